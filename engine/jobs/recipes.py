"""CLI-level job kinds turned into plans (JB-1): S/MIME and OpenPGP signing/encryption, APK signing,
iOS (macOS only).

A recipe knows which tools it runs, which credential type each slot takes, which files a
credential becomes in the workspace, and the argv of each step. Arguments are whole
words; a word that is exactly ``{in:NAME}``, ``{cred:SLOT.FILE}``, ``{out:NAME}`` or
``{home:NAME}`` is replaced by a path in the workspace (JB-3), ``{tool:NAME}`` by the
path of a pinned tool file, and nothing else is expanded.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
import zipfile
from dataclasses import dataclass
from typing import Any

from engine.errors import MemoriesError
from engine.jobs.plan import PLAN_VERSION, Plan, fresh_output, pin_file, pin_input, pin_tool

__all__ = ["KINDS", "CredentialInfo", "build_plan", "credential_files"]

KINDS = ("smime-sign", "openpgp-sign", "openpgp-encrypt", "apk-sign", "ios-sign")
# Where Debian (and the Android SDK layout the apksigner wrapper also knows) keeps apksigner.jar.
APKSIGNER_JARS = ("/usr/share/java/apksigner.jar", "/usr/share/java/lib/apksigner.jar")


@dataclass(frozen=True)
class CredentialInfo:
    """What a plan pins about a credential: never its secret."""

    ref: str
    asset: str
    revision: str
    ctype: str
    public: dict[str, Any]


def _binding(slot: str, cred: CredentialInfo, wanted: str, files: list[str]) -> dict[str, Any]:
    if cred.ctype != wanted:
        raise MemoriesError("invalid_input", f"This job needs a {wanted} credential for --{slot}.")
    return {
        "slot": slot,
        "ref": cred.ref,
        "asset": cred.asset,
        "revision": cred.revision,
        "type": cred.ctype,
        "files": files,
    }


def _gpg(*words: str) -> list[str]:
    return ["--batch", "--no-tty", "--quiet", "--homedir", "{home:gnupg}", *words]


def _apksigner_tools() -> dict[str, dict[str, Any]]:
    """Java and the apksigner archives, pinned. The `apksigner` command is a bash wrapper around
    `java -jar apksigner.jar`; the job runs java itself so that no shell runs (JB-3). The
    archive's manifest loads its libraries (Class-Path), so those are pinned too."""
    wrapper = shutil.which("apksigner", path=os.defpath + os.pathsep + "/usr/local/bin")
    found = [os.path.join(os.path.dirname(os.path.realpath(wrapper)), "apksigner.jar")] if wrapper else []
    jar = next((path for path in [*found, *APKSIGNER_JARS] if os.path.isfile(path)), None)
    if jar is None:
        raise MemoriesError("job_tool_missing", "The tool `apksigner` is not installed on this machine.")
    tools = {"java": pin_tool("java"), "apksigner.jar": pin_file(jar)}
    try:
        with zipfile.ZipFile(tools["apksigner.jar"]["path"]) as archive:
            manifest = archive.read("META-INF/MANIFEST.MF").decode("utf-8", "replace")
    except (OSError, KeyError, zipfile.BadZipFile):
        raise MemoriesError("job_tool_missing", "The apksigner.jar on this machine is not a readable Java archive.") from None
    # Manifest lines wrap at 72 bytes with a leading space on the continuation.
    unwrapped = manifest.replace("\r\n", "\n").replace("\n ", "")
    for line in unwrapped.splitlines():
        if line.startswith("Class-Path:"):
            for number, entry in enumerate(line.removeprefix("Class-Path:").split(), 1):
                library = entry if os.path.isabs(entry) else os.path.join(os.path.dirname(jar), entry)
                tools[f"apksigner-lib{number}.jar"] = pin_file(library)
    return tools


def _check_apk_key(key: CredentialInfo) -> None:
    """apksigner signs with RSA, EC or DSA keys only: say so at planning, not as a failed run."""
    from cryptography import x509
    from cryptography.hazmat.primitives.asymmetric import dsa, ec, rsa

    try:
        leaf = x509.load_pem_x509_certificates(str(key.public.get("certificate", "")).encode("ascii"))[0]
    except (ValueError, UnicodeEncodeError, IndexError):
        raise MemoriesError("invalid_input", "That tls_cert credential has no readable certificate.") from None
    if not isinstance(leaf.public_key(), rsa.RSAPublicKey | ec.EllipticCurvePublicKey | dsa.DSAPublicKey):
        raise MemoriesError("invalid_input", "apksigner signs with RSA, EC or DSA keys; this certificate's key is none of them.")


def build_plan(
    kind: str,
    *,
    input_path: str,
    output_path: str,
    key: CredentialInfo | None,
    recipients: list[CredentialInfo],
    min_sdk: int | None = None,
) -> Plan:
    if kind == "ios-sign":
        if sys.platform != "darwin":
            raise MemoriesError("unsupported_platform", "iOS signing needs codesign, which exists only on macOS.")
        raise MemoriesError("unsupported_platform", "iOS signing is not available in this version.")
    if kind not in KINDS:
        raise MemoriesError("invalid_input", "Unknown job kind.")
    if min_sdk is not None and kind != "apk-sign":
        raise MemoriesError("invalid_input", "--min-sdk belongs to apk-sign.")
    inputs = [pin_input("in", input_path)]
    steps: list[dict[str, Any]] = []
    credentials: list[dict[str, Any]] = []
    if kind == "smime-sign":
        if key is None or recipients:
            raise MemoriesError("invalid_input", "smime-sign takes --key (a tls_cert credential) and no --recipient.")
        tools = {"openssl": pin_tool("openssl")}
        credentials.append(_binding("key", key, "tls_cert", ["cert.pem", "key.pem"]))
        output = fresh_output("signed", output_path)
        steps.append(
            {
                "tool": "openssl",
                "argv": [
                    "cms", "-sign", "-binary", "-nodetach", "-md", "sha256",
                    "-in", "{in:in}", "-signer", "{cred:key.cert.pem}", "-inkey", "{cred:key.key.pem}",
                    "-outform", "DER", "-out", "{out:signed}",
                ],
            }
        )  # fmt: skip
    elif kind == "openpgp-sign":
        if key is None or recipients:
            raise MemoriesError("invalid_input", "openpgp-sign takes --key (an openpgp credential) and no --recipient.")
        if not key.public.get("secret"):
            raise MemoriesError("invalid_input", "That openpgp credential holds only a public key; signing needs its secret key.")
        tools = {"gpg": pin_tool("gpg"), "gpgconf": pin_tool("gpgconf")}
        credentials.append(_binding("key", key, "openpgp", ["secret.asc"]))
        output = fresh_output("signature", output_path)
        fpr = str(key.public.get("fingerprint", ""))
        steps.append({"tool": "gpg", "argv": _gpg("--import", "{cred:key.secret.asc}")})
        steps.append(
            {
                "tool": "gpg",
                "argv": _gpg("--pinentry-mode", "loopback", "--passphrase", "", "--local-user", fpr,
                             "--armor", "--output", "{out:signature}", "--detach-sign", "{in:in}"),
            }
        )  # fmt: skip
    elif kind == "apk-sign":
        if key is None or recipients:
            raise MemoriesError("invalid_input", "apk-sign takes --key (a tls_cert credential) and no --recipient.")
        tools = _apksigner_tools()
        # apksigner reads the key as PKCS#8 DER only; the engine converts it in memory (credential_files).
        credentials.append(_binding("key", key, "tls_cert", ["cert.pem", "key.pk8"]))
        _check_apk_key(key)
        output = fresh_output("signed", output_path)
        # An APK whose manifest is not binary XML names no minimum SDK: --min-sdk says it.
        sdk = ["--min-sdk-version", str(min_sdk)] if min_sdk is not None else []
        steps.append(
            {
                "tool": "java",
                "argv": [
                    "-XX:-UsePerfData", "-Xmx512m", "-jar", "{tool:apksigner.jar}", "sign",
                    "--key", "{cred:key.key.pk8}", "--cert", "{cred:key.cert.pem}", *sdk,
                    "--v4-signing-enabled", "false", "--out", "{out:signed}", "{in:in}",
                ],
            }
        )  # fmt: skip
    else:  # openpgp-encrypt
        if key is not None or not recipients:
            raise MemoriesError("invalid_input", "openpgp-encrypt takes --recipient (openpgp credentials) and no --key.")
        tools = {"gpg": pin_tool("gpg"), "gpgconf": pin_tool("gpgconf")}
        output = fresh_output("encrypted", output_path)
        words: list[str] = []
        for number, recipient in enumerate(recipients, 1):
            slot = f"recipient{number}"
            credentials.append(_binding(slot, recipient, "openpgp", ["public.asc"]))
            steps.append({"tool": "gpg", "argv": _gpg("--import", f"{{cred:{slot}.public.asc}}")})
            words += ["--recipient", str(recipient.public.get("fingerprint", ""))]
        steps.append(
            {
                "tool": "gpg",
                "argv": _gpg("--trust-model", "always", *words, "--output", "{out:encrypted}", "--encrypt", "{in:in}"),
            }
        )
    # Steps that always run after the others (their failures are ignored): stop gpg-agent.
    final = [{"tool": "gpgconf", "argv": ["--homedir", "{home:gnupg}", "--kill", "all"]}] if "gpgconf" in tools else []
    return {
        "v": PLAN_VERSION,
        "kind": kind,
        "tools": tools,
        "inputs": inputs,
        "credentials": credentials,
        "steps": steps,
        "outputs": [output],
        "cleanup": {"steps": final, "workspace": "removed after every run, successful or not"},
        "created_ms": int(time.time() * 1000),
    }


def _pkcs8_der(key_pem: str) -> bytes:
    from cryptography.hazmat.primitives import serialization

    try:
        key = serialization.load_pem_private_key(key_pem.encode("ascii"), password=None)
    except (ValueError, TypeError, UnicodeEncodeError):
        raise MemoriesError("invalid_input", "The credential's private key is not a PEM private key.") from None
    return key.private_bytes(serialization.Encoding.DER, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())


def credential_files(ctype: str, public: dict[str, Any], secret: dict[str, Any], wanted: list[str]) -> dict[str, bytes]:
    """The files of ``wanted`` a credential becomes in the workspace (each written 0600)."""
    if ctype == "tls_cert":
        files = {
            "cert.pem": str(public.get("certificate", "")).encode("ascii"),
            "key.pem": str(secret.get("private_key", "")).encode("ascii"),
        }
        if "key.pk8" in wanted:  # converted only for the job that needs it (apk-sign)
            files["key.pk8"] = _pkcs8_der(str(secret.get("private_key", "")))
        return files
    if ctype == "openpgp":
        files = {"public.asc": str(public.get("public_key", "")).encode("ascii")}
        if secret.get("private_key"):
            files["secret.asc"] = str(secret["private_key"]).encode("ascii")
        return files
    raise MemoriesError("invalid_input", "This credential type cannot be used by a job.")
