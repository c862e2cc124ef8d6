"""Crypto jobs through the real CLI, daemon, openssl and GnuPG (JB-1 … JB-3)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engine.cli.context import JSON_VERSION
from engine.errors import MemoriesError
from engine.jobs.plan import plan_digest
from tests.helpers import PASSWORD, Cli, require
from tests.mcp.support import grant, ipc

require(shutil.which("openssl") is not None and shutil.which("gpg") is not None, "openssl and gpg are needed for crypto jobs")


def sh(*argv: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:
    done = subprocess.run(argv, cwd=cwd, capture_output=True, timeout=60, check=False, env=env)
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    return done


class Lab:
    def __init__(self, cli: Cli, root: Path) -> None:
        self.cli = cli
        self.root = root
        self.gnupg = root / "g"

    def gpg(self, *words: str) -> subprocess.CompletedProcess[bytes]:
        env = {"PATH": "/usr/bin:/bin", "GNUPGHOME": str(self.gnupg), "LC_ALL": "C"}
        return sh("gpg", "--batch", "--no-tty", "--pinentry-mode", "loopback", "--passphrase", "", *words, cwd=self.root, env=env)

    def workspaces(self) -> list[str]:
        jobs = self.cli.home / "jobs"
        return sorted(os.listdir(jobs)) if jobs.exists() else []

    def file(self, name: str, data: bytes) -> Path:
        path = self.root / name
        path.write_bytes(data)
        return path


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    """A vault holding an S/MIME signer (tls_cert, issued by a throwaway CA) and OpenPGP keys."""
    root = Path(os.path.realpath(tmp_path_factory.mktemp("jobs")))
    cli = Cli(home=root / "home")
    cli.init()
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes")
    sh("openssl", "req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-subj", "/CN=Throwaway CA", "-days", "2", cwd=root)
    sh("openssl", "req", *ec, "-keyout", "signer.key", "-out", "signer.csr", "-subj", "/CN=signer", cwd=root)
    sh("openssl", "x509", "-req", "-in", "signer.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
       "-out", "signer.pem", "-days", "2", cwd=root)  # fmt: skip
    cli.ok("credential", "new", "tls-cert", "--name", "signer", "--certificate-file", str(root / "signer.pem"),
           "--key-file", str(root / "signer.key"))  # fmt: skip
    lab = Lab(cli, root)
    lab.gnupg.mkdir(mode=0o700)
    lab.gpg("--quick-gen-key", "Release <release@example.org>", "ed25519", "sign,cert", "0")
    lab.gpg("--quick-gen-key", "Alice <alice@example.org>", "default", "default", "0")
    lab.gpg("--quick-gen-key", "Signonly <signonly@example.org>", "ed25519", "sign", "0")
    (root / "release.asc").write_bytes(lab.gpg("--armor", "--export-secret-keys", "release@example.org").stdout)
    (root / "alice.asc").write_bytes(lab.gpg("--armor", "--export", "alice@example.org").stdout)
    (root / "signonly.asc").write_bytes(lab.gpg("--armor", "--export", "signonly@example.org").stdout)
    cli.ok("credential", "new", "openpgp", "--name", "release-key", "--key-file", str(root / "release.asc"))
    cli.ok("credential", "new", "openpgp", "--name", "alice", "--key-file", str(root / "alice.asc"))
    cli.ok("credential", "new", "openpgp", "--name", "signonly", "--key-file", str(root / "signonly.asc"))
    yield lab
    subprocess.run(["gpgconf", "--homedir", str(lab.gnupg), "--kill", "all"], capture_output=True, check=False)
    cli.stop()


def plan(lab: Lab, kind: str, source: Path, output: Path, *extra: str) -> dict[str, Any]:
    return lab.cli.ok("job", "plan", kind, str(source), "--output", str(output), *extra)


def test_run_needs_elevation_before_anything_is_resolved(lab: Lab) -> None:
    """JB-2: without sudo a run is refused before the digest is even looked up (an unknown one too)."""
    source = lab.file("elev.txt", b"elevation first\n")
    shown = plan(lab, "smime-sign", source, lab.root / "elev.p7m", "--key", "signer")
    assert lab.cli.err("job", "run", shown["digest"])["code"] == "elevation_required"
    assert lab.cli.err("job", "run", "0" * 64)["code"] == "elevation_required"
    assert not (lab.root / "elev.p7m").exists()
    lab.cli.sudo()  # the rest of the module runs elevated (same parent process)
    assert lab.cli.err("job", "run", "0" * 64)["code"] == "not_found"


def test_smime_sign_verifies_with_openssl(lab: Lab) -> None:
    """JB-1, JB-3: the plan pins input, tool, credential and output; the run publishes a CMS signature."""
    data = b"Quarterly report\n" * 100
    source = lab.file("report.txt", data)
    output = lab.root / "report.p7m"
    shown = plan(lab, "smime-sign", source, output, "--key", "signer")
    body = shown["plan"]
    assert shown["digest"] == plan_digest(body)
    assert body["inputs"] == [{"name": "in", "path": str(source), "sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}]
    assert body["tools"]["openssl"]["path"].startswith("/")
    assert body["credentials"][0]["type"] == "tls_cert" and body["credentials"][0]["ref"] == "signer"
    assert all(isinstance(word, str) for step in body["steps"] for word in step["argv"])
    assert body["outputs"] == [{"name": "signed", "path": str(output)}]
    assert lab.cli.ok("job", "show", shown["digest"]) == shown
    lab.cli.sudo()
    ran = lab.cli.ok("job", "run", shown["digest"])
    assert ran["outputs"] == [str(output)]
    sh("openssl", "cms", "-verify", "-inform", "DER", "-in", str(output), "-CAfile", "ca.pem", "-purpose", "any",
       "-out", "recovered.txt", cwd=lab.root)  # fmt: skip
    assert (lab.root / "recovered.txt").read_bytes() == data
    assert lab.workspaces() == []
    # A plan's outputs are fresh: the same plan again refuses to overwrite what it wrote.
    assert lab.cli.err("job", "run", shown["digest"])["code"] == "job_output_exists"


def test_plan_refuses_existing_output_and_ios_off_macos(lab: Lab) -> None:
    """JB-1: outputs must not exist; iOS signing off macOS is a clear typed error."""
    source = lab.file("x.txt", b"x")
    taken = lab.file("taken.p7m", b"mine")
    assert plan_error(lab, "smime-sign", source, taken, "--key", "signer") == "job_output_exists"
    assert taken.read_bytes() == b"mine"
    assert plan_error(lab, "ios-sign", source, lab.root / "app.ipa", "--key", "signer") == "unsupported_platform"
    assert plan_error(lab, "openpgp-sign", source, lab.root / "x.asc", "--key", "signer") == "invalid_input"


def plan_error(lab: Lab, kind: str, source: Path, output: Path, *extra: str) -> str:
    return str(lab.cli.err("job", "plan", kind, str(source), "--output", str(output), *extra)["code"])


def test_tampered_input_publishes_nothing(lab: Lab) -> None:
    """JB-3: an input whose bytes changed after planning is refused; nothing published, workspace gone."""
    source = lab.file("contract.txt", b"pay 100\n")
    output = lab.root / "contract.p7m"
    shown = plan(lab, "smime-sign", source, output, "--key", "signer")
    source.write_bytes(b"pay 900\n")
    lab.cli.sudo()
    assert lab.cli.err("job", "run", shown["digest"])["code"] == "job_input_changed"
    assert not output.exists()
    assert lab.workspaces() == []


def test_changed_plan_is_not_the_approved_plan(lab: Lab) -> None:
    """JB-2: the digest binds the plan's bytes: any other digest names no plan and runs nothing."""
    source = lab.file("bound.txt", b"bound\n")
    output = lab.root / "bound.p7m"
    shown = plan(lab, "smime-sign", source, output, "--key", "signer")
    changed = dict(shown["plan"], outputs=[{"name": "signed", "path": str(lab.root / "elsewhere.p7m")}])
    lab.cli.sudo()
    assert lab.cli.err("job", "run", plan_digest(changed))["code"] == "not_found"
    assert lab.cli.err("job", "run", shown["digest"][:12])["code"] == "invalid_request"  # no prefixes
    assert not output.exists() and not (lab.root / "elsewhere.p7m").exists()


def test_openpgp_sign_and_encrypt_verify_with_gpg(lab: Lab) -> None:
    """JB-1, JB-3: GnuPG in a temporary GNUPGHOME with keys from the vault; checked by gpg outside."""
    data = b"release 1.0\n"
    source = lab.file("release.tar", data)
    lab.cli.sudo()
    signed = plan(lab, "openpgp-sign", source, lab.root / "release.tar.asc", "--key", "release-key")
    lab.cli.ok("job", "run", signed["digest"])
    lab.gpg("--verify", str(lab.root / "release.tar.asc"), str(source))
    sealed = plan(lab, "openpgp-encrypt", source, lab.root / "release.tar.gpg", "--recipient", "alice")
    assert sealed["plan"]["credentials"][0]["files"] == ["public.asc"]  # encryption never touches a secret
    lab.cli.ok("job", "run", sealed["digest"])
    assert lab.gpg("--decrypt", str(lab.root / "release.tar.gpg")).stdout == data
    assert lab.workspaces() == []


def test_failing_step_publishes_nothing(lab: Lab) -> None:
    """JB-3: a step that fails (a sign-only key cannot encrypt): nothing published, workspace gone."""
    source = lab.file("fail.txt", b"fail\n")
    output = lab.root / "fail.gpg"
    shown = plan(lab, "openpgp-encrypt", source, output, "--recipient", "signonly")
    lab.cli.sudo()
    failed = lab.cli.err("job", "run", shown["digest"])
    assert failed["code"] == "job_step_failed"
    assert "nothing was published" in failed["message"]
    assert not output.exists()
    assert lab.workspaces() == []


def test_mcp_cannot_run_jobs(lab: Lab) -> None:
    """JB-3: an MCP grant, even allow_all, is refused job_run, job_plan, job_status and job_cancel (issue 16)."""
    source = lab.file("mcp.txt", b"mcp\n")
    output = lab.root / "mcp.p7m"
    shown = plan(lab, "smime-sign", source, output, "--key", "signer")
    lab.cli.sudo()
    token = grant(lab.cli, "jobs-agent", "allow_all")
    for inner in ({"op": "job_run", "digest": shown["digest"]}, {"op": "job_plan", "kind": "smime-sign",
                  "input": str(source), "output": str(lab.root / "mcp2.p7m"), "key": "signer"},
                  {"op": "job_status", "run": "0" * 32}, {"op": "job_cancel", "run": "0" * 32}):  # fmt: skip
        with ipc(lab.cli) as client, pytest.raises(MemoriesError) as caught:
            client.request({"op": "mcp_call", "token": token, "request": inner})
        assert caught.value.code == "permission_denied"
    assert not output.exists()


def test_deleted_credential_makes_the_plan_stale(lab: Lab) -> None:
    """JB-2: credentials are looked up by the pinned ID and revision; a deleted one stops the run."""
    made = lab.cli.ok("credential", "new", "openpgp", "--name", "bob", "--key-file", str(lab.root / "alice.asc"))
    source = lab.file("stale.txt", b"stale\n")
    output = lab.root / "stale.gpg"
    shown = plan(lab, "openpgp-encrypt", source, output, "--recipient", "bob")
    lab.cli.ok("delete", made["id"])
    lab.cli.sudo()
    assert lab.cli.err("job", "run", shown["digest"])["code"] == "job_plan_stale"
    assert not output.exists()
    assert lab.workspaces() == []


SHAPES = Path(__file__).resolve().parents[1] / "data" / "cli_json_shapes.json"


def test_job_json_shapes_are_pinned(lab: Lab) -> None:
    """Issue 19, issue 16: `job plan|show|run|status --json` carry "v": 1 and the key sets pinned in
    tests/data/cli_json_shapes.json (`job run` prints the final result, as before runs moved off
    the service lock). MEMORIES_UPDATE_JSON_SHAPES=1 writes them into the fixture."""
    from tests.integration.test_cli_json_shapes import shape

    def printed(*args: str) -> Any:
        proc = lab.cli.run(*args, "--json")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return json.loads(proc.stdout)

    source = lab.file("shape.txt", b"shape\n")
    outputs: dict[str, Any] = {"job plan": printed("job", "plan", "smime-sign", str(source), "--output",
                                                   str(lab.root / "shape.p7m"), "--key", "signer")}  # fmt: skip
    digest = outputs["job plan"]["digest"]
    outputs["job show"] = printed("job", "show", digest)
    lab.cli.sudo()
    outputs["job run"] = printed("job", "run", digest)
    again = plan(lab, "smime-sign", source, lab.root / "shape2.p7m", "--key", "signer")
    with ipc(lab.cli) as client:  # this test process's own namespace: elevate it, then run
        client.request({"op": "sudo", "password": PASSWORD})
        run = client.request({"op": "job_run", "digest": again["digest"]})["run"]
        while client.request({"op": "job_status", "run": run})["state"] == "running":
            client.request({"op": "job_status", "run": run, "wait_ms": 2000, "seen_step": 0})
    outputs["job status"] = printed("job", "status", run)
    assert outputs["job run"]["outputs"] == [str(lab.root / "shape.p7m")]
    assert outputs["job status"]["state"] == "done"
    shapes = {name: shape(value) for name, value in outputs.items()}
    for name, value in outputs.items():
        assert value["v"] == JSON_VERSION, name
    pinned = json.loads(SHAPES.read_text())
    if os.environ.get("MEMORIES_UPDATE_JSON_SHAPES") == "1":
        pinned["shapes"].update(shapes)
        SHAPES.write_text(json.dumps(pinned, indent=1, sort_keys=True) + "\n")
    for name, got in shapes.items():
        assert got == pinned["shapes"].get(name), f"the --json shape of `{name}` changed; see docs/cli-json.md"
