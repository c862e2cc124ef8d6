"""APK signing through the real CLI, daemon, java and Debian's apksigner (JB-1 … JB-3)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes

from engine.errors import MemoriesError
from engine.jobs.plan import plan_digest
from tests.helpers import Cli, require
from tests.jobs.apk_support import sh, tiny_apk
from tests.mcp.support import grant, ipc

require(
    shutil.which("apksigner") is not None and shutil.which("java") is not None and shutil.which("openssl") is not None,
    "apksigner (Debian package apksigner), java and openssl are needed for apk-sign",
)

MIN_SDK = "24"


class Lab:
    def __init__(self, cli: Cli, root: Path) -> None:
        self.cli = cli
        self.root = root

    def apk(self, name: str, payload: bytes = b"dex\n035\x00") -> Path:
        """A tiny APK built here (apk_support.tiny_apk)."""
        return tiny_apk(self.root / name, payload)

    def plan(self, source: Path, output: Path, *extra: str) -> dict[str, Any]:
        return self.cli.ok("job", "plan", "apk-sign", str(source), "--output", str(output), "--key", "android", *extra)

    def workspaces(self) -> list[str]:
        jobs = self.cli.home / "jobs"
        return sorted(os.listdir(jobs)) if jobs.exists() else []

    def verify(self, apk: Path) -> str:
        return sh("apksigner", "verify", "--min-sdk-version", MIN_SDK, "--print-certs", str(apk), cwd=self.root).stdout


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    """A vault holding an EC P-256 signing key with its self-signed certificate (tls_cert)."""
    root = Path(os.path.realpath(tmp_path_factory.mktemp("apk")))
    cli = Cli(home=root / "home")
    cli.init()
    sh("openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
       "-keyout", "android.key", "-out", "android.pem", "-subj", "/CN=Tiny Release", "-days", "2", cwd=root)  # fmt: skip
    sh("openssl", "req", "-x509", "-newkey", "ed25519", "-nodes", "-keyout", "ed.key", "-out", "ed.pem",
       "-subj", "/CN=Edwards", "-days", "2", cwd=root)  # fmt: skip
    cli.ok("credential", "new", "tls-cert", "--name", "android", "--certificate-file", str(root / "android.pem"),
           "--key-file", str(root / "android.key"))  # fmt: skip
    cli.ok("credential", "new", "tls-cert", "--name", "edwards", "--certificate-file", str(root / "ed.pem"),
           "--key-file", str(root / "ed.key"))  # fmt: skip
    cli.sudo()
    yield Lab(cli, root)
    cli.stop()


def test_apk_sign_verifies_with_apksigner(lab: Lab) -> None:
    """JB-1, JB-3: the plan pins java and apksigner's archives; the signed APK verifies with the vault's certificate."""
    source = lab.apk("tiny.apk")
    output = lab.root / "tiny-signed.apk"
    shown = lab.plan(source, output, "--min-sdk", MIN_SDK)
    body = shown["plan"]
    assert shown["digest"] == plan_digest(body)
    assert set(body["tools"]) >= {"java", "apksigner.jar"}
    assert all(tool["path"].startswith("/") and len(tool["sha256"]) == 64 for tool in body["tools"].values())
    # No shell: the step runs java itself, never the `apksigner` bash wrapper.
    assert [step["tool"] for step in body["steps"]] == ["java"]
    assert body["credentials"][0]["files"] == ["cert.pem", "key.pk8"]
    assert body["outputs"] == [{"name": "signed", "path": str(output)}]
    ran = lab.cli.ok("job", "run", shown["digest"])
    assert ran["outputs"] == [str(output)]
    printed = lab.verify(output)
    certificate = x509.load_pem_x509_certificate((lab.root / "android.pem").read_bytes())
    assert f"certificate SHA-256 digest: {certificate.fingerprint(hashes.SHA256()).hex()}" in printed
    assert not (lab.root / "tiny-signed.apk.idsig").exists()  # one artifact: the signed APK
    assert lab.workspaces() == []
    with pytest.raises(AssertionError):
        lab.verify(source)  # the input itself stays unsigned


def test_missing_min_sdk_fails_the_step_and_publishes_nothing(lab: Lab) -> None:
    """JB-3: apksigner fails (a text manifest names no minimum SDK): nothing published, workspace gone, no key shown."""
    source = lab.apk("nosdk.apk")
    output = lab.root / "nosdk-signed.apk"
    shown = lab.plan(source, output)
    failed = lab.cli.err("job", "run", shown["digest"])
    assert failed["code"] == "job_step_failed"
    assert "nothing was published" in failed["message"]
    key_body = "".join((lab.root / "android.key").read_text().splitlines()[1:-1])
    assert key_body[:40] not in failed["message"]
    assert not output.exists()
    assert lab.workspaces() == []


def test_tampered_apk_publishes_nothing(lab: Lab) -> None:
    """JB-3: an APK changed after planning is refused (digest mismatch); nothing published, workspace gone."""
    source = lab.apk("tampered.apk")
    output = lab.root / "tampered-signed.apk"
    shown = lab.plan(source, output, "--min-sdk", MIN_SDK)
    lab.apk("tampered.apk", payload=b"dex\n035\x00 with a backdoor")
    assert lab.cli.err("job", "run", shown["digest"])["code"] == "job_input_changed"
    assert not output.exists()
    assert lab.workspaces() == []


def test_changed_plan_runs_nothing(lab: Lab) -> None:
    """JB-2: a plan with another output (or any other byte) has another digest, which names no approved plan."""
    source = lab.apk("bound.apk")
    output = lab.root / "bound-signed.apk"
    shown = lab.plan(source, output, "--min-sdk", MIN_SDK)
    changed = dict(shown["plan"], outputs=[{"name": "signed", "path": str(lab.root / "elsewhere.apk")}])
    assert lab.cli.err("job", "run", plan_digest(changed))["code"] == "not_found"
    assert not output.exists() and not (lab.root / "elsewhere.apk").exists()
    assert lab.workspaces() == []


def test_plan_refuses_what_apksigner_cannot_do(lab: Lab) -> None:
    """JB-1: an Ed25519 certificate, a missing key, --min-sdk on another kind: typed errors at planning."""
    source = lab.apk("refused.apk")
    output = str(lab.root / "refused-signed.apk")
    edwards = lab.cli.err("job", "plan", "apk-sign", str(source), "-o", output, "--key", "edwards", "--min-sdk", MIN_SDK)
    assert edwards["code"] == "invalid_input" and "RSA, EC or DSA" in edwards["message"]
    assert lab.cli.err("job", "plan", "apk-sign", str(source), "-o", output)["code"] == "invalid_input"
    misplaced = lab.cli.err("job", "plan", "smime-sign", str(source), "-o", output, "--key", "android", "--min-sdk", "3")
    assert misplaced["code"] == "invalid_input"
    zero = lab.cli.err("job", "plan", "apk-sign", str(source), "-o", output, "--key", "android", "--min-sdk", "0")
    assert zero["code"] == "invalid_request"


def test_mcp_cannot_plan_or_run_apk_sign(lab: Lab) -> None:
    """JB-3: an MCP grant, even allow_all, is refused job_run and job_plan for apk-sign."""
    source = lab.apk("mcp.apk")
    output = lab.root / "mcp-signed.apk"
    shown = lab.plan(source, output, "--min-sdk", MIN_SDK)
    token = grant(lab.cli, "apk-agent", "allow_all")
    plan_request = {
        "op": "job_plan",
        "kind": "apk-sign",
        "input": str(source),
        "output": str(lab.root / "mcp2.apk"),
        "key": "android",
    }
    for inner in ({"op": "job_run", "digest": shown["digest"]}, plan_request):
        with ipc(lab.cli) as client, pytest.raises(MemoriesError) as caught:
            client.request({"op": "mcp_call", "token": token, "request": inner})
        assert caught.value.code == "permission_denied"
    assert not output.exists() and not (lab.root / "mcp2.apk").exists()
