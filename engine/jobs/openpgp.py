"""Import of an OpenPGP key as an ``openpgp`` credential: checked with GnuPG in a throwaway GNUPGHOME.

The credential's public fields hold the fingerprint, user IDs and the armored public key;
its secret body holds the armored secret key when one was given (signing needs it,
encryption to a recipient does not). Passphrase-protected secret keys are refused: the
vault is what protects the key.

The throwaway home holds the secret key while GnuPG reads it, so it is made where the jobs'
workspaces are (issue 27): under the data home's ``jobs/`` folder, which a starting engine
sweeps, never the shared temp folder; when that path is too long for gpg-agent's sockets, a
private ``mg-*`` folder under ``$XDG_RUNTIME_DIR`` (or the temp folder) linked from it, as a
job's GnuPG home is (engine/jobs/runner.py), so the sweep finds it too.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from engine.errors import MemoriesError

__all__ = ["import_openpgp_key"]

MAX_KEY = 64 * 1024


def _gpg(home: str, *words: str, data: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    gpg = shutil.which("gpg")
    if gpg is None:
        raise MemoriesError("job_tool_missing", "GnuPG (`gpg`) is needed to read an OpenPGP key and is not installed.")
    return subprocess.run(
        [gpg, "--batch", "--no-tty", "--homedir", home, *words],
        input=data,
        capture_output=True,
        timeout=60,
        check=False,
        env={"PATH": "/usr/bin:/bin", "LC_ALL": "C", "HOME": home, "GNUPGHOME": home},
    )


def _throwaway_home(root: Path) -> tuple[Path, str]:
    """A new 0700 workspace under ``root`` and the GnuPG home to use (inside it, or linked from it)."""
    from engine.jobs.runner import GPG_LONGEST_SOCKET, SOCKET_PATH_MAX, _short_base

    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(root, 0o700)
    workspace = Path(tempfile.mkdtemp(prefix="k-", dir=root))
    (workspace / "home").mkdir(mode=0o700)
    link = workspace / "home" / "gnupg"
    if len(os.fsencode(link / GPG_LONGEST_SOCKET)) <= SOCKET_PATH_MAX:
        link.mkdir(mode=0o700)
        return workspace, str(link)
    short = tempfile.mkdtemp(prefix="mg-", dir=_short_base())
    os.symlink(short, link)  # the start-up sweep (runner.clear_stale) follows it to an mg-* folder
    return workspace, short


def import_openpgp_key(armored: str, root: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """(public fields, secret body) of one armored OpenPGP key (a public key or a secret key);
    the throwaway GnuPG home lives under ``root`` (the data home's ``jobs/``)."""
    if not armored.strip() or len(armored) > MAX_KEY or "-----BEGIN PGP" not in armored:
        raise MemoriesError("invalid_input", "The key file is not an armored OpenPGP key.")
    workspace, home = _throwaway_home(root)
    try:
        if _gpg(home, "--import", data=armored.encode("utf-8")).returncode != 0:
            raise MemoriesError("invalid_input", "The key file is not an armored OpenPGP key.")
        listed = _gpg(home, "--with-colons", "--fixed-list-mode", "--list-keys").stdout.decode("utf-8", "replace")
        fingerprints: list[str] = []
        uids: list[str] = []
        seen_pub = False
        for line in listed.splitlines():
            fields = line.split(":")
            if fields[0] == "pub":
                seen_pub = True
            elif fields[0] == "fpr" and seen_pub:
                fingerprints.append(fields[9])
                seen_pub = False
            elif fields[0] == "uid" and len(fields) > 9:
                uids.append(fields[9][:200])
        if len(fingerprints) != 1:
            raise MemoriesError("invalid_input", "The key file must hold exactly one OpenPGP key.")
        fpr = fingerprints[0]
        secret_list = _gpg(home, "--with-colons", "--list-secret-keys").stdout.decode("utf-8", "replace")
        has_secret = any(line.startswith("sec:") for line in secret_list.splitlines())
        if has_secret:
            probe = _gpg(home, "--pinentry-mode", "loopback", "--passphrase", "", "--armor", "--export-secret-keys", fpr)
            if probe.returncode != 0 or not probe.stdout:
                raise MemoriesError("invalid_input", "The secret key is passphrase-protected; export it without a passphrase.")
        public_key = _gpg(home, "--armor", "--export", fpr).stdout.decode("ascii", "replace")
        public = {"fingerprint": fpr, "uids": uids[:16], "secret": has_secret, "public_key": public_key}
        return public, ({"private_key": armored.strip() + "\n"} if has_secret else {})
    finally:
        gpgconf = shutil.which("gpgconf")
        if gpgconf is not None:
            subprocess.run([gpgconf, "--homedir", home, "--kill", "all"], capture_output=True, timeout=30, check=False)
        shutil.rmtree(home, ignore_errors=True)
        shutil.rmtree(workspace, ignore_errors=True)
