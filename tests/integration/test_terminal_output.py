"""CLI text output a terminal cannot misread, and the CLI's edges at a shell (tracker issue 12).

Everything runs the real `memories` CLI against a real daemon over its socket: stored
content with terminal control sequences, search highlighting on a real pty, a reader
that closes the pipe early, a body piped on stdin, and a body over the frame limit.
"""

from __future__ import annotations

import asyncio
import os
import re
import socket
import struct
import subprocess
from pathlib import Path
from typing import Any

from engine.config import Paths
from engine.ipc.framing import MAX_FRAME_BYTES, read_frame_sync, size_text
from engine.terminal_text import BOLD, RESET
from tests.helpers import Cli
from tests.remote import fakes
from tests.terminal import run_in_terminal

# An OSC 52 clipboard write, a CSI screen clear, a C1 CSI, BEL, DEL, a bare CR, a line feed.
EVIL = "A\x1b]52;c;aGVsbG8=\x07B\x1b[2JC\x9bD\x07E\x7fF\rG\nH"
# Bytes a terminal acts on, as they appear in UTF-8 output: C0 but LF/TAB, DEL, C1.
RAW_CONTROL = re.compile(rb"[\x00-\x08\x0b-\x1f\x7f]|\xc2[\x80-\x9f]")


def _text(cli: Cli, *args: str, env: dict[str, str] | None = None) -> bytes:
    """Text-mode stdout as bytes (no decoding that could hide a raw byte)."""
    proc = subprocess.run(
        cli.command(*args), capture_output=True, timeout=60, env={**cli.environ(), **(env or {})}, stdin=subprocess.DEVNULL
    )
    assert proc.returncode == 0, (args, proc.stdout, proc.stderr)
    return proc.stdout


def _assert_clean(out: bytes, args: tuple[str, ...]) -> None:
    found = RAW_CONTROL.search(out)
    assert found is None, f"{args} printed a raw control byte {found.group()!r}: {out!r}"


def _store(vault: Cli) -> tuple[dict[str, Any], dict[str, Any]]:
    put = vault.ok("put", "--title", "Title " + EVIL, "--body", "flatwhite " + EVIL, "--tag", "tag" + EVIL, "--meta", "k=" + EVIL)
    vault.ok("edit", put["short_id"], "--body", "flatwhite edited " + EVIL, "--title", "Edited " + EVIL)
    card = vault.ok("card", "new", "--type", "knowledge", "--title", "Card " + EVIL, "--body", "card body " + EVIL)
    vault.ok("card", "link", card["short_id"], put["short_id"], "--rel", "rel")
    return put, card


def test_text_output_escapes_control_sequences_json_stays_exact(vault: Cli) -> None:
    """API-8 / issue 12: list, get, search, history, diff and card text output carry no raw
    control byte from stored titles, bodies, tags or metadata; --json returns them exactly."""
    put, card = _store(vault)
    pid, cid = put["short_id"], card["short_id"]
    commands: list[tuple[str, ...]] = [
        ("list",),
        ("get", pid),
        ("search", "flatwhite"),
        ("history", pid),
        ("diff", pid),
        ("card", "show", cid),
        ("card", "connections", cid),
        ("graph",),
    ]
    for args in commands:
        out = _text(vault, *args)
        _assert_clean(out, args)
        assert b"\\x1b]52;c;aGVsbG8=\\x07" in out, (args, out)  # shown, as visible escapes

    # Single-line fields stay on one line: the memory and the card are exactly two rows.
    listed = _text(vault, "list")
    assert listed.count(b"\n") == 2 and b"Edited A\\x1b]52" in listed and b"G\\nH" in listed
    # Bodies keep their line breaks; a bare CR is shown, not obeyed.
    got = _text(vault, "get", pid)
    assert b"flatwhite edited A\\x1b]52" in got and b"F\\rG\nH" in got

    # --json is exact JSON: the original strings, control characters included.
    item = next(i for i in vault.ok("list")["items"] if i["short_id"] == pid)
    assert item["title"] == "Edited " + EVIL and item["tags"] == ["tag" + EVIL]
    got_json = vault.ok("get", pid)
    assert got_json["body"] == "flatwhite edited " + EVIL and got_json["meta"] == {"k": EVIL}
    assert vault.ok("card", "show", cid)["title"] == "Card " + EVIL
    assert vault.ok("search", "flatwhite")["results"][0]["title"] in ("Edited " + EVIL, "Card " + EVIL)


def test_error_messages_on_stderr_are_escaped(vault: Cli) -> None:
    """A usage error that quotes user input cannot put a raw control byte on the terminal."""
    missing = "/nonexistent/\x1b]52;c;eA==\x07\x9b"
    proc = subprocess.run(
        vault.command("put", "--title", "t", "--body-file", missing), capture_output=True, timeout=60, env=vault.environ()
    )
    assert proc.returncode == 2 and b"[usage]" in proc.stderr
    _assert_clean(proc.stderr.rstrip(b"\n"), ("put --body-file",))
    assert b"/nonexistent/\\x1b]52;c;eA==\\x07\\x9b" in proc.stderr


def test_search_highlights_bold_on_a_terminal_only(vault: Cli) -> None:
    """Issue 12: highlights print as terminal bold on a TTY (escaping first, so stored text
    cannot inject sequences), as **markers** in a pipe or with NO_COLOR."""
    vault.put("Espresso", "a flatwhite \x1b]52;c;eA==\x07 with \x1b[2J oat milk")
    command = vault.command("search", "flatwhite")
    code, screen = run_in_terminal(command, [], vault.environ())
    assert code == 0, screen
    assert f"{BOLD}flatwhite{RESET}" in screen
    assert "**flatwhite**" not in screen
    # Our bold is the only sequence: the stored ESCs arrive as visible text.
    assert "\x1b" not in screen.replace(BOLD, "").replace(RESET, "")
    assert "\\x1b]52;c;eA==\\x07" in screen and "\a" not in screen

    code, plain = run_in_terminal(command, [], {**vault.environ(), "NO_COLOR": "1"})
    assert code == 0 and "**flatwhite**" in plain and "\x1b" not in plain

    piped = _text(vault, "search", "flatwhite")
    assert b"**flatwhite**" in piped and b"\x1b" not in piped


def test_closed_pipe_ends_quietly(vault: Cli) -> None:
    """Issue 12: `memories list --json | head` — the reader is gone before the CLI writes:
    no BrokenPipeError traceback, exit 141 (128 + SIGPIPE) like other tools."""
    for i in range(3):
        vault.put(f"note {i}", "x" * 200)
    for args in (("list", "--json"), ("list",)):
        proc = subprocess.Popen(
            vault.command(*args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, env=vault.environ()
        )
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.close()  # the reader goes away, as `head` does after its lines
        stderr = proc.stderr.read()
        assert proc.wait(60) == 141, stderr
        assert stderr == b"", stderr


def test_put_reads_a_piped_body(vault: Cli) -> None:
    """Issue 12: `put --title T` reads the body from a piped stdin (off argv, out of `ps`);
    an explicit --body wins over stdin; the help says argv is visible."""
    body = "private notes\nline two\n"
    put = vault.ok("put", "--title", "Piped", input=body)
    assert vault.ok("get", put["short_id"])["body"] == body
    explicit = vault.ok("put", "--title", "Explicit", "--body", "from argv", input="ignored stdin")
    assert vault.ok("get", explicit["short_id"])["body"] == "from argv"
    help_text = vault.run("put", "--help").stdout
    assert "ps" in help_text and "standard input" in help_text


def test_body_over_the_frame_limit_says_size_limit_and_what_to_do(vault: Cli) -> None:
    """API-8 / issue 12: an oversize body is refused before sending, naming the field, its
    size, the limit (engine.ipc.framing.MAX_FRAME_BYTES) and what to do; nothing is stored."""
    body = "x" * (MAX_FRAME_BYTES + 200 * 1024)
    error = vault.err("put", "--title", "Big", input=body)
    assert error["code"] == "frame_too_large"
    message = error["message"]
    assert f"The body is {size_text(len(body))};" in message
    assert f"at most {size_text(MAX_FRAME_BYTES)}" in message and "Split" in message
    text = vault.run("put", "--title", "Big", input=body)
    assert text.returncode == 1 and text.stderr.startswith("memories: error [frame_too_large]: The body is")
    assert vault.ok("list")["total"] == 0


def test_engine_names_the_limit_for_an_oversize_frame(vault: Cli) -> None:
    """API-2 / API-8: a client announcing more than the limit gets frame_too_large with the
    announced size and the limit in the sentence, over the real socket."""
    announced = MAX_FRAME_BYTES + 1024 * 1024
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(10)
        sock.connect(os.fspath(Paths(vault.home).socket))
        sock.sendall(struct.pack(">I", announced))
        reply = read_frame_sync(sock, MAX_FRAME_BYTES)
    error = reply["error"]
    assert error["code"] == "frame_too_large"
    assert f"is {size_text(announced)}" in error["message"] and f"at most {size_text(MAX_FRAME_BYTES)}" in error["message"]


async def _echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while data := await reader.read(1024):
        writer.write(b"echo:" + data)
        await writer.drain()


def test_remote_tcp_instruction_is_text_not_python_bytes(vault: Cli, tmp_path: Path) -> None:
    """Issue 12: a TCP send shows as its (escaped) text and size, not as b'…'; escapes in
    the remote output too; --json unchanged."""
    vault.sudo()
    with fakes.serve(_echo) as port:
        vault.ok("credential", "new", "tcp", "--name", "echo", "--host", "127.0.0.1", "--port", str(port))
        session = vault.ok("remote", "open", "echo")["session"]
        data = tmp_path / "payload"
        payload = b"PING \x1b]52;c;eA==\x07\r\n\xff"
        data.write_bytes(payload)
        proposed = _text(vault, "remote", "propose", session, "x", "--data-file", str(data))
        _assert_clean(proposed, ("remote", "propose"))
        assert b"instruction send PING \\x1b]52;c;eA==\\x07\\r\\n\\xff  (%d bytes)" % len(payload) in proposed
        assert b"b'" not in proposed
        listed = _text(vault, "remote", "list")
        assert b"send PING \\x1b]52" in listed and b"b'" not in listed
        ticket = vault.ok("remote", "list")["tickets"][0]
        # --json: the engine's display text, exact (control characters unescaped), never b'…'
        assert ticket["instruction"] == f"send PING \x1b]52;c;eA==\x07\r\n\\xff  ({len(payload)} bytes)"
        vault.ok("remote", "approve", ticket["ticket"])
        out = _text(vault, "remote", "exec", ticket["ticket"])
        _assert_clean(out.rstrip(b"\n"), ("remote", "exec"))
        assert b"echo:PING \\x1b]52;c;eA==\\x07" in out
        vault.ok("remote", "close", session)


def test_credential_list_text_is_escaped(vault: Cli) -> None:
    """Credential names are shown escaped in `credential list`; --json keeps them exact."""
    vault.sudo()
    created = vault.ok("credential", "new", "tcp", "--name", "n\x7f\x9b", "--host", "127.0.0.1", "--port", "9")
    out = _text(vault, "credential", "list")
    _assert_clean(out.rstrip(b"\n"), ("credential", "list"))
    assert b"n\\x7f\\x9b" in out
    assert vault.ok("credential", "show", created["short_id"])["name"] == "n\x7f\x9b"
