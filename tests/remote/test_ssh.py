"""SSH sessions (RM-2, RM-3, RM-5) against a real OpenSSH sshd and an asyncssh password server."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.helpers import Cli, require
from tests.remote import fakes
from tests.remote.conftest import other_namespace
from tests.remote.credentials import add_ssh
from tests.remote.servers import Sshd
from tests.remote.tickets import run_once
from tests.terminal import run_in_terminal


@pytest.fixture(scope="module")
def elevated(rvault: Cli) -> Cli:
    rvault.sudo()
    return rvault


def test_generated_key_logs_in_and_private_key_is_never_returned(elevated: Cli, sshd: Sshd, tmp_path: Path) -> None:
    """RM-3: generate under sudo, derive the public key, authorize it, then log in (host key pinned, RM-2)."""
    generated = elevated.ok("credential", "generate", "ssh", "--name", "deploy-key")
    assert "PRIVATE" not in str(generated)
    public = elevated.ok("credential", "public", "deploy-key")["public_key"]
    assert public.startswith("ssh-ed25519 ")
    with open(sshd.root / "authorized_keys", "a") as handle:
        handle.write(public + "\n")
    add_ssh(elevated, "box", port=sshd.port, user="root", host_key=sshd.host_pub, extra=("--key", "deploy-key"))
    result = run_once(elevated, "box", "echo hello; id -un")
    assert result["output"] == "hello\nroot\n" and result["exit_status"] == 0
    shown = elevated.ok("credential", "show", "deploy-key")
    assert "PRIVATE" not in str(shown) and "private_key" not in shown["public"]


def test_imported_key_and_known_hosts_entry(elevated: Cli, sshd: Sshd, tmp_path: Path) -> None:
    """RM-2: an imported OpenSSH private key, host verified through a known-hosts entry."""
    known = tmp_path / "known_hosts"
    known.write_text(f"[127.0.0.1]:{sshd.port} {sshd.host_pub}\n")
    identity = ("--identity-file", str(sshd.client_key), "--known-hosts-file", str(known))
    add_ssh(elevated, "box-imported", port=sshd.port, user="root", host_key=None, extra=identity)
    result = run_once(elevated, "box-imported", "echo out; echo err >&2")
    assert (result["output"], result["stderr"], result["exit_status"]) == ("out\n", "err\n", 0)


def test_certificate_auth(elevated: Cli, sshd: Sshd, tmp_path: Path) -> None:
    """RM-2: a key that is not in authorized_keys logs in with an OpenSSH certificate from the trusted user CA."""
    key = tmp_path / "cert_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    subprocess.run(
        ["ssh-keygen", "-q", "-s", str(sshd.user_ca), "-I", "test", "-n", "root", "-V", "-5m:+1h", str(key) + ".pub"], check=True
    )
    identity = ("--identity-file", str(key))
    add_ssh(elevated, "box-nocert", port=sshd.port, user="root", host_key=sshd.host_pub, extra=identity)
    assert elevated.err("remote", "open", "box-nocert")["code"] == "remote_auth_failed"
    certificate = (*identity, "--certificate-file", f"{key}-cert.pub")
    add_ssh(elevated, "box-cert", port=sshd.port, user="root", host_key=sshd.host_pub, extra=certificate)
    assert run_once(elevated, "box-cert", "echo cert")["output"] == "cert\n"


def test_unknown_or_changed_host_key_is_refused(elevated: Cli, sshd: Sshd, tmp_path: Path) -> None:
    """RM-2: a host key other than the pinned one is refused, never accepted."""
    other = tmp_path / "other"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    wrong = " ".join(Path(f"{other}.pub").read_text().split()[:2])
    identity = ("--identity-file", str(sshd.client_key))
    add_ssh(elevated, "box-wrong-hostkey", port=sshd.port, user="root", host_key=wrong, extra=identity)
    assert elevated.err("remote", "open", "box-wrong-hostkey")["code"] == "host_key_unknown"
    # A credential without any host key pin cannot even be created.
    err = elevated.err(
        "credential",
        "new",
        "ssh",
        "--name",
        "box-nopin",
        "--host",
        "127.0.0.1",
        "--port",
        str(sshd.port),
        "--user",
        "root",
        "--identity-file",
        str(sshd.client_key),
    )
    assert err["code"] == "invalid_input"


def test_password_auth(elevated: Cli) -> None:
    """RM-2: password credentials against asyncssh's server; a wrong password is a typed error."""
    with fakes.asyncssh_password_server("ana", "ssh-pw-1") as (port, host_key):
        for name, pw in (("pw-box", "ssh-pw-1"), ("pw-box-bad", "nope")):
            add_ssh(elevated, name, port=port, user="ana", password=pw, host_key=host_key)
        assert run_once(elevated, "pw-box", "uptime")["output"] == "ran: uptime\n"
        assert elevated.err("remote", "open", "pw-box-bad")["code"] == "remote_auth_failed"


async def _echo(reader, writer) -> None:  # type: ignore[no-untyped-def]
    while data := await reader.read(1024):
        writer.write(b"echo:" + data)
        await writer.drain()


def test_ssh_proxy_forwards_through_the_daemons_connection(elevated: Cli, sshd: Sshd) -> None:
    """PX-1: a loopback port forward over the daemon's key-authenticated, host-verified SSH connection."""
    import socket

    identity = ("--identity-file", str(sshd.client_key))
    add_ssh(elevated, "tunnel", port=sshd.port, user="root", host_key=sshd.host_pub, extra=identity)
    assert elevated.err("proxy", "start", "tunnel")["code"] == "invalid_input"  # needs --forward
    with fakes.serve(_echo) as echo_port:
        proxy = elevated.ok("proxy", "start", "tunnel", "--forward", f"127.0.0.1:{echo_port}")
        for _ in range(2):
            with socket.create_connection(("127.0.0.1", proxy["port"]), timeout=20) as sock:
                sock.sendall(b"through ssh")
                assert sock.recv(100) == b"echo:through ssh"
        elevated.ok("proxy", "stop", proxy["proxy"])
    assert elevated.ok("proxy", "list")["proxies"] == []


def _keygen(path: Path, *args: str) -> Path:
    require(shutil.which("ssh-keygen") is not None, "ssh-keygen (apt: openssh-client)")
    subprocess.run(["ssh-keygen", "-q", "-N", "", "-f", str(path), *args], check=True)
    return path


@pytest.mark.parametrize("keytype", [("-t", "ed25519", "-C", "ana@laptop"), ("-t", "rsa", "-b", "2048", "-m", "PEM")])
def test_public_key_of_an_imported_identity_file(elevated: Cli, tmp_path: Path, keytype: tuple[str, ...]) -> None:
    """RM-2/RM-3: `credential public` of an ssh credential holding an imported key prints exactly what
    `ssh-keygen -y -f KEY` prints (comment included), plus the stored certificate line; never the private key."""
    key = _keygen(tmp_path / "id", *keytype)
    ca = _keygen(tmp_path / "ca", "-t", "ed25519")
    subprocess.run(["ssh-keygen", "-q", "-s", str(ca), "-I", "t", "-n", "deploy", "-V", "-5m:+1h", f"{key}.pub"], check=True)
    host_key = " ".join(Path(f"{ca}.pub").read_text().split()[:2])
    name = f"pub-{keytype[1]}"
    add_ssh(elevated, name, user="deploy", host_key=host_key, extra=("--identity-file", str(key)))
    certificate = ("--identity-file", str(key), "--certificate-file", f"{key}-cert.pub")
    add_ssh(elevated, f"{name}-cert", user="deploy", host_key=host_key, extra=certificate)
    expected = subprocess.run(["ssh-keygen", "-y", "-f", str(key)], capture_output=True, text=True, check=True).stdout.strip()
    private_body = "".join(key.read_text().splitlines()[1:-1])

    printed = elevated.run("credential", "public", name)
    assert printed.returncode == 0, printed.stderr
    assert printed.stdout.strip() == expected
    with_cert = elevated.run("credential", "public", f"{name}-cert")
    assert with_cert.stdout.splitlines() == [expected, Path(f"{key}-cert.pub").read_text().strip()]
    as_json = elevated.ok("credential", "public", name)
    assert as_json == {"type": "ssh", "public_key": expected, "certificate": ""}
    for out in (printed.stdout, with_cert.stdout, str(as_json), printed.stderr):
        assert "PRIVATE" not in out and private_body[:40] not in out


def test_public_key_needs_sudo_and_a_key(elevated: Cli, tmp_path: Path) -> None:
    """RM-3/API-8: deriving it decrypts the private key, so another (unelevated) shell gets elevation_required;
    a password-only ssh credential has no key and says so; a --key credential shows that key's line."""
    key = _keygen(tmp_path / "id", "-t", "ed25519")
    host_key = " ".join(Path(f"{key}.pub").read_text().split()[:2])
    add_ssh(elevated, "pub-sudo", user="deploy", host_key=host_key, extra=("--identity-file", str(key)))
    add_ssh(elevated, "pub-password", user="deploy", host_key=host_key, password="s3cret-pw-xyz")
    proc = other_namespace(elevated, "credential", "public", "pub-sudo")
    assert proc.returncode != 0 and json.loads(proc.stdout)["error"]["code"] == "elevation_required"
    err = elevated.err("credential", "public", "pub-password")
    assert err["code"] == "invalid_input" and "password" in err["message"] and "s3cret" not in err["message"]
    elevated.ok("credential", "new", "ssh-key", "--name", "pub-imported-key", "--identity-file", str(key))
    add_ssh(elevated, "pub-by-ref", user="deploy", host_key=host_key, extra=("--key", "pub-imported-key"))
    line = elevated.ok("credential", "public", "pub-by-ref")["public_key"]
    assert line == elevated.ok("credential", "public", "pub-imported-key")["public_key"]
    assert line.split()[:2] == Path(f"{key}.pub").read_text().split()[:2]


def test_passphrase_protected_identity_file_logs_in(elevated: Cli, sshd: Sshd, tmp_path: Path) -> None:
    """RM-2 against real sshd: a passphrase-protected copy of the authorized key is imported with its
    passphrase (stdin, or typed at the terminal prompt like ssh-add) and logs in; without it the typed
    error says so, a wrong one is refused, neither stores anything nor echoes the passphrase."""
    key = tmp_path / "protected"
    shutil.copy(sshd.client_key, key)
    key.chmod(0o600)
    subprocess.run(["ssh-keygen", "-q", "-p", "-N", "open sesame 7", "-f", str(key)], check=True, capture_output=True)
    base = ["credential", "new", "ssh", "--host", "127.0.0.1", "--port", str(sshd.port), "--user", "root"]
    base += ["--host-key", sshd.host_pub, "--identity-file", str(key)]

    missing = elevated.err(*base, "--name", "box-locked-key")
    assert missing["code"] == "key_encrypted"
    wrong = elevated.err(*base, "--name", "box-locked-key", "--key-passphrase-stdin", input="open sesame 8\n")
    assert wrong["code"] == "wrong_key_passphrase" and "sesame" not in json.dumps(wrong)
    listed = elevated.ok("credential", "list")["items"]
    assert "box-locked-key" not in [c["name"] for c in listed]

    elevated.ok(*base, "--name", "box-locked-key", "--key-passphrase-stdin", input="open sesame 7\n")
    assert run_once(elevated, "box-locked-key", "echo unlocked")["output"] == "unlocked\n"
    expected = subprocess.run(["ssh-keygen", "-y", "-f", str(sshd.client_key)], capture_output=True, text=True, check=True)
    assert elevated.ok("credential", "public", "box-locked-key")["public_key"].split()[:2] == expected.stdout.split()[:2]

    # At a terminal the CLI asks for the passphrase instead of failing, and nothing echoes it.
    code, screen = run_in_terminal(
        elevated.command(*base, "--name", "box-typed-key"),
        [("Passphrase of the private key: ", "open sesame 7")],
        elevated.environ(),
    )
    assert code == 0, screen
    assert "sesame" not in screen
    assert run_once(elevated, "box-typed-key", "echo typed")["output"] == "typed\n"


def test_certificate_of_another_key_is_refused_at_import(elevated: Cli, sshd: Sshd, tmp_path: Path) -> None:
    """RM-2: an OpenSSH certificate must certify the credential's own key (file or --key reference);
    a mismatch is invalid_input at import instead of a refused login later."""
    mine = _keygen(tmp_path / "mine", "-t", "ed25519")
    other = _keygen(tmp_path / "other", "-t", "ed25519")
    subprocess.run(
        ["ssh-keygen", "-q", "-s", str(sshd.user_ca), "-I", "t", "-n", "root", "-V", "-5m:+1h", f"{mine}.pub"], check=True
    )
    certificate = ("--certificate-file", f"{mine}-cert.pub")
    base = ["credential", "new", "ssh", "--host", "127.0.0.1", "--port", str(sshd.port), "--user", "root"]
    base += ["--host-key", sshd.host_pub]
    err = elevated.err(*base, "--name", "cert-mismatch", "--identity-file", str(other), *certificate)
    assert err["code"] == "invalid_input" and "certif" in err["message"]
    elevated.ok("credential", "new", "ssh-key", "--name", "other-key", "--identity-file", str(other))
    err = elevated.err(*base, "--name", "cert-mismatch", "--key", "other-key", *certificate)
    assert err["code"] == "invalid_input"
    assert elevated.err(*base, "--name", "cert-alone", *certificate, "--password-stdin", input="pw\n")["code"] == "invalid_input"
    elevated.ok("credential", "new", "ssh-key", "--name", "mine-key", "--identity-file", str(mine))
    elevated.ok(*base, "--name", "cert-by-ref", "--key", "mine-key", *certificate)
    assert run_once(elevated, "cert-by-ref", "echo certified")["output"] == "certified\n"
