"""Two honest engines, the rest of issue 14's list (SY-4, CD-4, CD-5, API-4).

Protected secrets and HOTP counters across sync, TLS end to end with a throwaway CA made by
`openssl`, and `memories sync --watch`. Real homes, real daemons, a real `memories serve`.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

from tests.cards.test_otp_parsing import RFC4226_CODES, SEED
from tests.helpers import Cli, require
from tests.sync.support import B_PASSWORD, Listener, free_port, sync, sync_err, token_for, wait_until

TOKEN = "tok-sync-secret-4f1c9e2a7b"
PRINT_DIGEST = "import hashlib, os; print(hashlib.sha256(os.environ['SECRET'].encode()).hexdigest())"


def _b32(key: bytes) -> str:
    import base64

    return base64.b32encode(key).decode().rstrip("=")


def _secret_digest(cli: Cli, card: str, password: str) -> str:
    """The secret as a program run by `memories run` sees it, hashed (the value never printed)."""
    cli.sudo(password)
    proc = cli.run("run", "--env", f"SECRET=card:{card}#token", "--", sys.executable, "-c", PRINT_DIGEST)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip().splitlines()[-1]


def test_a_protected_secret_and_an_hotp_counter_stay_consistent(pair: tuple[Cli, Cli]) -> None:
    """CD-4, CD-5, SY-4: a protected token made on A is the same secret on B after sync (and
    never shown by a read there); an HOTP counter advanced on either side continues after the
    highest value any side used once they have synced, so no code is handed out twice
    (also after both sides used it while apart: the next code follows the higher counter)."""
    a, b = pair
    prot = a.ok("protected", "new", "--title", "Deploy", "--token-stdin", input=TOKEN + "\n")
    uri = f"otpauth://hotp/Bank:me?secret={_b32(SEED['SHA1'])}&counter=0"
    bank = a.ok("protected", "new", "--title", "Bank", "--otp-stdin", input=uri + "\n")
    used = [a.ok("otp", bank["id"]) for _ in range(2)]  # counters 0, 1 on A
    token = token_for(a, b)
    with Listener(a, free_port()).start() as listener:
        sync(b, listener.url, token)
        assert _secret_digest(b, prot["id"], B_PASSWORD) == hashlib.sha256(TOKEN.encode()).hexdigest()
        assert TOKEN not in json.dumps(b.ok("get", prot["id"]))
        used.append(b.ok("otp", bank["id"]))  # counter 2 on B, not 0
        sync(b, listener.url, token)
        used.append(a.ok("otp", bank["id"]))  # counter 3 on A
        # Apart: A uses two codes, B one; after the sync both continue after the highest.
        used += [a.ok("otp", bank["id"]) for _ in range(2)]  # 4, 5 on A
        used.append(b.ok("otp", bank["id"]))  # 3 on B: offline it cannot know A used 3..5
        sync(b, listener.url, token)
        after = [b.ok("otp", bank["id"])]
        sync(b, listener.url, token)
        after.append(a.ok("otp", bank["id"]))
    assert [c["counter"] for c in used] == [0, 1, 2, 3, 4, 5, 3]
    assert [c["counter"] for c in after] == [6, 7]
    assert [c["code"] for c in used + after] == [RFC4226_CODES[n] for n in (0, 1, 2, 3, 4, 5, 3, 6, 7)]


def _ca(where: Path) -> tuple[Path, Path, Path]:
    """A throwaway CA and a server certificate for 127.0.0.1 signed by it (openssl)."""
    require(shutil.which("openssl") is not None, "openssl is needed to make a test CA (apt: openssl)")

    def ssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=where, check=True, capture_output=True, timeout=60)

    ssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "2",
        "-subj", "/CN=memories test CA", "-keyout", "ca.key", "-out", "ca.pem")  # fmt: skip
    ssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
        "-subj", "/CN=127.0.0.1", "-keyout", "server.key", "-out", "server.csr")  # fmt: skip
    (where / "san.ext").write_text("subjectAltName=IP:127.0.0.1\n", encoding="utf-8")
    ssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
        "-days", "2", "-extfile", "san.ext", "-out", "server.pem")  # fmt: skip
    return where / "ca.pem", where / "server.pem", where / "server.key"


def test_tls_end_to_end_with_a_private_ca(pair: tuple[Cli, Cli], tmp_path: Path) -> None:
    """SY-4, API-4: `memories serve --tls-cert/--tls-key` and `memories sync https://… --ca FILE`
    sync over TLS; without --ca the server's certificate does not verify: sync_unreachable
    and nothing is sent."""
    a, b = pair
    ca, cert, key = _ca(tmp_path)
    b.put("over TLS", "b")
    token = token_for(a, b)
    with Listener(a, free_port()).start("--tls-cert", str(cert), "--tls-key", str(key)) as listener:
        url = listener.url.replace("http://", "https://")
        assert url.startswith("https://127.0.0.1:")
        refused = sync_err(b, url, token)
        assert refused["code"] == "sync_unreachable" and "certificate" in refused["message"], refused
        assert a.ok("status")["assets"] == 0
        result = sync(b, url, token, "--ca", str(ca))
        assert result["synced"] is True
        assert {row["title"] for row in a.ok("list", "--all")["items"]} == {"over TLS"}


def test_watch_brings_changes_without_a_second_command(pair: tuple[Cli, Cli]) -> None:
    """SY-4: `memories sync URL --watch` keeps syncing: a note written on B (the watching side)
    reaches A, and one written on A reaches B, with no further command (bounded waits)."""
    a, b = pair
    token = token_for(a, b)
    with Listener(a, free_port()).start() as listener:
        watcher = subprocess.Popen(
            b.command("sync", listener.url, "--watch", "--interval", "2", "--token-stdin", "--json"),
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            text=True,
            env=b.environ(),
        )
        try:
            assert watcher.stdin is not None
            watcher.stdin.write(token + "\n")
            watcher.stdin.close()
            b.put("from the watching side", "b")
            assert wait_until(lambda: a.ok("status")["assets"] == 1, 30), "B's note did not reach A"
            a.put("from the serving side", "a")
            assert wait_until(lambda: b.ok("status")["assets"] == 2, 30), "A's note did not reach B"
            assert watcher.poll() is None  # still watching
        finally:
            watcher.terminate()
            watcher.wait(timeout=30)
    assert {row["title"] for row in b.ok("list", "--all")["items"]} == {"from the watching side", "from the serving side"}
