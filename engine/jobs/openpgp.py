"""Import of an OpenPGP key as an ``openpgp`` credential: checked with GnuPG in a throwaway GNUPGHOME.

The credential's public fields hold the fingerprint, user IDs and the armored public key;
its secret body holds the armored secret key when one was given (signing needs it,
encryption to a recipient does not). Passphrase-protected secret keys are refused: the
vault is what protects the key.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
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


def import_openpgp_key(armored: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(public fields, secret body) of one armored OpenPGP key (a public key or a secret key)."""
    if not armored.strip() or len(armored) > MAX_KEY or "-----BEGIN PGP" not in armored:
        raise MemoriesError("invalid_input", "The key file is not an armored OpenPGP key.")
    home = tempfile.mkdtemp(prefix="mgpg-")  # 0700, short: gpg-agent's socket lives here
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
