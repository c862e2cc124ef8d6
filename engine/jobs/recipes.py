"""CLI-level job kinds turned into plans (JB-1): S/MIME and OpenPGP signing/encryption, iOS (macOS only).

A recipe knows which tools it runs, which credential type each slot takes, which files a
credential becomes in the workspace, and the argv of each step. Arguments are whole
words; a word that is exactly ``{in:NAME}``, ``{cred:SLOT.FILE}``, ``{out:NAME}`` or
``{home:NAME}`` is replaced by a path in the workspace (JB-3) and nothing else is expanded.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from typing import Any

from engine.errors import MemoriesError
from engine.jobs.plan import PLAN_VERSION, Plan, fresh_output, pin_input, pin_tool

__all__ = ["KINDS", "CredentialInfo", "build_plan", "credential_files"]

KINDS = ("smime-sign", "openpgp-sign", "openpgp-encrypt", "apk-sign", "ios-sign")


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


def build_plan(
    kind: str,
    *,
    input_path: str,
    output_path: str,
    key: CredentialInfo | None,
    recipients: list[CredentialInfo],
) -> Plan:
    if kind == "ios-sign":
        if sys.platform != "darwin":
            raise MemoriesError("unsupported_platform", "iOS signing needs codesign, which exists only on macOS.")
        raise MemoriesError("unsupported_platform", "iOS signing is not available in this version.")
    if kind == "apk-sign":
        raise MemoriesError("unsupported_platform", "APK signing is not available in this version.")
    if kind not in KINDS:
        raise MemoriesError("invalid_input", "Unknown job kind.")
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


def credential_files(ctype: str, public: dict[str, Any], secret: dict[str, Any]) -> dict[str, bytes]:
    """The files a credential becomes in the workspace (each written 0600)."""
    if ctype == "tls_cert":
        return {
            "cert.pem": str(public.get("certificate", "")).encode("ascii"),
            "key.pem": str(secret.get("private_key", "")).encode("ascii"),
        }
    if ctype == "openpgp":
        files = {"public.asc": str(public.get("public_key", "")).encode("ascii")}
        if secret.get("private_key"):
            files["secret.asc"] = str(secret["private_key"]).encode("ascii")
        return files
    raise MemoriesError("invalid_input", "This credential type cannot be used by a job.")
