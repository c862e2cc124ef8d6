"""GnuPG jobs in a data home whose path is too long for gpg-agent's sockets (JB-3).

Without /run/user/UID (servers, containers, this CI) gpg-agent puts its sockets in GNUPGHOME,
and a Unix socket path holds at most 107 bytes: a workspace a few folders deep made every GnuPG
step fail. The runner then keeps the GnuPG home in a short private folder, removed with the
workspace, and by the start-up sweep after a crash."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from tests.helpers import Cli, require

require(shutil.which("gpg") is not None and shutil.which("gpgconf") is not None, "GnuPG (gpg, gpgconf) runs OpenPGP jobs")


def gpg(home: Path, *words: str) -> bytes:
    env = {"PATH": "/usr/bin:/bin", "GNUPGHOME": str(home), "LC_ALL": "C"}
    done = subprocess.run(
        ["gpg", "--batch", "--no-tty", "--pinentry-mode", "loopback", "--passphrase", "", *words],
        env=env,
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    return done.stdout


def short_homes() -> set[str]:
    return {name for name in os.listdir(tempfile.gettempdir()) if name.startswith("mg-")}


def test_openpgp_sign_works_from_a_deep_data_home(tmp_path: Path) -> None:
    """JB-3: openpgp-sign from a data home ~120 bytes deep signs (gpg outside verifies it); the
    workspace and the short GnuPG home are both gone afterwards."""
    deep = Path(os.path.realpath(tmp_path)) / ("d" * 60) / ("e" * 40)
    cli = Cli(home=deep / "home")
    assert len(str(cli.home / "jobs" / "w-12345678" / "home" / "gnupg" / "S.gpg-agent.browser")) > 107
    keys = Path(tempfile.mkdtemp(prefix="k-"))
    try:
        gpg(keys, "--quick-gen-key", "Deep <deep@example.org>", "ed25519", "sign,cert", "0")
        (tmp_path / "deep.asc").write_bytes(gpg(keys, "--armor", "--export-secret-keys", "deep@example.org"))
        cli.init()
        cli.ok("credential", "new", "openpgp", "--name", "deep-key", "--key-file", str(tmp_path / "deep.asc"))
        cli.sudo()
        source = tmp_path / "notes.txt"
        source.write_bytes(b"signed from far down\n")
        output = tmp_path / "notes.txt.asc"
        before = short_homes()
        shown = cli.ok("job", "plan", "openpgp-sign", str(source), "--output", str(output), "--key", "deep-key")
        ran = cli.ok("job", "run", shown["digest"])
        assert ran["outputs"] == [str(output)]
        gpg(keys, "--verify", str(output), str(source))
        assert not (cli.home / "jobs").exists() or os.listdir(cli.home / "jobs") == []
        assert short_homes() == before  # the short GnuPG home went with the workspace
    finally:
        cli.stop()
        subprocess.run(["gpgconf", "--homedir", str(keys), "--kill", "all"], capture_output=True, check=False)
        shutil.rmtree(keys, ignore_errors=True)


def test_a_crashed_runs_short_gnupg_home_is_swept_at_start(tmp_path: Path) -> None:
    """JB-3: a workspace a killed engine left behind, with its GnuPG home linked from a short
    folder, is removed with that folder when the engine starts again; a link to a folder that is
    not one of ours is not followed."""
    cli = Cli(home=tmp_path / "home")
    cli.init()
    cli.stop()
    stale = Path(tempfile.mkdtemp(prefix="mg-"))
    (stale / "private-keys-v1.d").mkdir()
    (stale / "private-keys-v1.d" / "key.key").write_bytes(b"secret key material")
    other = tmp_path / "not-ours"
    other.mkdir()
    (other / "keep.txt").write_text("stays")
    for name, target in (("w-crashed", stale), ("w-foreign", other)):
        home = cli.home / "jobs" / name / "home"
        home.mkdir(parents=True)
        os.symlink(target, home / "gnupg")
    try:
        cli.unlock()
        assert cli.ok("status")["state"] == "unlocked"
        assert not stale.exists()
        assert (other / "keep.txt").read_text() == "stays"
        assert os.listdir(cli.home / "jobs") == []
    finally:
        cli.stop()
        shutil.rmtree(stale, ignore_errors=True)
