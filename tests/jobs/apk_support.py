"""What the APK signing tests share: a tiny APK built in the test and a checked subprocess."""

from __future__ import annotations

import subprocess
import zipfile
from pathlib import Path

# A text manifest: real APKs carry binary XML, from which apksigner reads the minimum SDK itself.
MANIFEST = (
    b'<?xml version="1.0" encoding="utf-8"?>\n'
    b'<manifest xmlns:android="http://schemas.android.com/apk/res/android" package="org.example.tiny">'
    b"<application/></manifest>\n"
)


def sh(*argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run a tool (openssl, keytool, apksigner) and fail the test with its output if it fails."""
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=180, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def tiny_apk(path: Path, payload: bytes = b"dex\n035\x00") -> Path:
    """A tiny APK: a zip with a manifest and a stand-in classes.dex."""
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("AndroidManifest.xml", MANIFEST)
        archive.writestr("classes.dex", payload)
    return path
