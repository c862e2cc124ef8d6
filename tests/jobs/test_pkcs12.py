"""A signing key kept as a PKCS#12 bundle (an Android Studio / Java keystore, a .p12 from a CA)
imported as a tls_cert credential and used by a crypto job (JB-1 … JB-3), through the real CLI,
daemon, keytool, openssl and apksigner."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes

from tests.helpers import Cli, require
from tests.jobs.apk_support import sh, tiny_apk

require(
    all(shutil.which(tool) for tool in ("keytool", "apksigner", "java", "openssl")),
    "keytool and java (default-jre-headless), apksigner and openssl are needed for PKCS#12 keystores",
)

STORE_PASSWORD = "keystore canary 7Qx!"


def keystore(root: Path, name: str, storetype: str) -> Path:
    """A release keystore made the way Android Studio makes one (keytool -genkeypair)."""
    path = root / name
    sh("keytool", "-genkeypair", "-keystore", str(path), "-storetype", storetype, "-alias", "release",
       "-keyalg", "EC", "-groupname", "secp256r1", "-validity", "2", "-dname", "CN=P12 Release",
       "-storepass", STORE_PASSWORD, "-keypass", STORE_PASSWORD, cwd=root)  # fmt: skip
    return path


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cli, Path]]:
    root = Path(os.path.realpath(tmp_path_factory.mktemp("p12")))
    cli = Cli(home=root / "home")
    cli.init()
    cli.sudo()
    yield cli, root
    cli.stop()


def test_android_keystore_signs_an_apk(lab: tuple[Cli, Path]) -> None:
    """JB-1, JB-3: a PKCS12 keystore from keytool becomes a tls_cert credential (its password read
    once, at import), and apk-sign with it yields an APK apksigner verifies with that certificate."""
    cli, root = lab
    store = keystore(root, "release.jks", "PKCS12")
    made = cli.ok("credential", "new", "tls-cert", "--name", "release", "--pkcs12-file", str(store),
                  "--key-passphrase-stdin", input=STORE_PASSWORD + "\n")  # fmt: skip
    assert made["type"] == "tls_cert"
    exported = sh("keytool", "-exportcert", "-rfc", "-keystore", str(store), "-alias", "release",
                  "-storepass", STORE_PASSWORD, cwd=root).stdout  # fmt: skip
    certificate = x509.load_pem_x509_certificate(exported.encode("ascii"))

    apk = tiny_apk(root / "app.apk")
    output = root / "app-signed.apk"
    shown = cli.ok("job", "plan", "apk-sign", str(apk), "--output", str(output), "--key", "release", "--min-sdk", "24")
    cli.ok("job", "run", shown["digest"])
    printed = sh("apksigner", "verify", "--min-sdk-version", "24", "--print-certs", str(output), cwd=root).stdout
    assert f"certificate SHA-256 digest: {certificate.fingerprint(hashes.SHA256()).hex()}" in printed


def test_a_ca_issued_bundle_keeps_its_chain_and_an_empty_password_needs_none(lab: tuple[Cli, Path]) -> None:
    """A .p12 from `openssl pkcs12 -export` with the issuing CA: the credential holds the whole
    chain, leaf first; a bundle with an empty password is imported without asking for one."""
    cli, root = lab
    sh("openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
       "-keyout", "ca.key", "-out", "ca.pem", "-subj", "/CN=P12 Test CA", "-days", "2", cwd=root)  # fmt: skip
    sh("openssl", "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
       "-keyout", "leaf.key", "-out", "leaf.csr", "-subj", "/CN=mail@example.org", cwd=root)  # fmt: skip
    sh("openssl", "x509", "-req", "-in", "leaf.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
       "-out", "leaf.pem", "-days", "2", cwd=root)  # fmt: skip
    sh("openssl", "pkcs12", "-export", "-inkey", "leaf.key", "-in", "leaf.pem", "-certfile", "ca.pem",
       "-out", "mail.p12", "-passout", "pass:", cwd=root)  # fmt: skip
    cli.ok("credential", "new", "tls-cert", "--name", "mail", "--pkcs12-file", str(root / "mail.p12"))
    public = cli.run("credential", "public", "mail")
    assert public.returncode == 0, public.stderr
    chain = x509.load_pem_x509_certificates(public.stdout.encode("ascii"))
    leaf = x509.load_pem_x509_certificate((root / "leaf.pem").read_bytes())
    ca = x509.load_pem_x509_certificate((root / "ca.pem").read_bytes())
    assert [c.fingerprint(hashes.SHA256()) for c in chain] == [
        leaf.fingerprint(hashes.SHA256()),
        ca.fingerprint(hashes.SHA256()),
    ]
    assert "PRIVATE KEY" not in public.stdout


def test_bad_bundles_are_refused_with_a_sentence_and_store_nothing(lab: tuple[Cli, Path]) -> None:
    """API-8: a wrong password, a missing one (no terminal to ask at), a JKS keystore, garbage and
    a bundle given with a key file each get a typed error, store nothing and never echo the password."""
    cli, root = lab
    store = keystore(root, "bad.jks", "PKCS12")
    jks = keystore(root, "old.jks", "JKS")
    garbage = root / "garbage.p12"
    garbage.write_bytes(b"\x30\x82\x01\x00 not a pfx at all" * 4)
    before = cli.ok("credential", "list", "--all")
    new = ("credential", "new", "tls-cert", "--name", "refused", "--pkcs12-file")

    wrong = cli.err(*new, str(store), "--key-passphrase-stdin", input="not the password\n")
    assert wrong["code"] == "wrong_key_passphrase", wrong
    missing = cli.err(*new, str(store))
    assert missing["code"] == "key_encrypted", missing
    old = cli.err(*new, str(jks), "--key-passphrase-stdin", input=STORE_PASSWORD + "\n")
    assert old["code"] == "invalid_input" and "keytool -importkeystore" in old["message"], old
    junk = cli.err(*new, str(garbage))
    assert junk["code"] == "invalid_input" and "PKCS#12" in junk["message"], junk
    pem = root / "stray.pem"
    pem.write_text("-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n")
    both = cli.err(*new, str(store), "--certificate-file", str(pem), "--key-passphrase-stdin", input=STORE_PASSWORD + "\n")
    assert both["code"] == "invalid_input" and "alone" in both["message"], both
    elsewhere = cli.err("credential", "new", "tls-ca", "--name", "refused", "--pkcs12-file", str(store))
    assert elsewhere["code"] == "invalid_input" and "tls_cert" in elsewhere["message"], elsewhere

    assert cli.ok("credential", "list", "--all") == before
    for error in (wrong, missing, old, junk, both, elsewhere):
        assert STORE_PASSWORD not in str(error) and "not the password" not in str(error)
    logs = list((cli.home / "logs").glob("*"))
    assert logs, "the engine keeps a log in the data home"
    for log in logs:
        assert STORE_PASSWORD.encode() not in log.read_bytes()
