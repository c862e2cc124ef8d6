"""`memories run` through the real CLI and daemon: secrets into a child's environment (RN-1, API-7)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.cli.run_child import MASK, Masker
from tests.helpers import Cli

SECRET = "s3cr3t-Pa55word-value"
TOKEN = "tok_0123456789abcdef"
MASKED = MASK.decode()


@pytest.fixture(scope="module")
def run_vault(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cli, str]]:
    """A vault with two protected labels on one note; elevated for this test process's namespace."""
    cli = Cli(home=tmp_path_factory.mktemp("run") / "home")
    cli.init()
    note = cli.put("deploy", f"db {SECRET} api {TOKEN}")
    cli.ok("secret", "protect", note["id"], "--label", "db_password", "--value-stdin", input=SECRET + "\n")
    cli.ok("secret", "protect", note["id"], "--label", "api_token", "--value-stdin", input=TOKEN + "\n")
    cli.sudo()
    yield cli, note["id"]
    cli.stop()


def py(code: str) -> list[str]:
    return ["--", sys.executable, "-c", code]


def test_secrets_reach_the_child_and_are_masked(run_vault: tuple[Cli, str]) -> None:
    """RN-1: a label and ID:LABEL become env vars of the child; stdout and stderr never show the values."""
    cli, note = run_vault
    code = "import os,sys; print('db=' + os.environ['DB']); print('api=' + os.environ['API'], file=sys.stderr)"
    proc = cli.run("run", "--env", "DB=db_password", "--env", f"API={note}:api_token", *py(code))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"db={MASKED}\n"
    assert proc.stderr == f"api={MASKED}\n"


def test_card_field_reference(run_vault: tuple[Cli, str]) -> None:
    """RN-1: card:ID#field names a label of a card."""
    cli, note = run_vault
    proc = cli.run("run", "--no-masking", "--env", f"T=card:{note}#api_token", *py("import os; print(os.environ['T'])"))
    assert proc.returncode == 0 and proc.stdout == TOKEN + "\n"


def test_no_masking_passes_output_through(run_vault: tuple[Cli, str]) -> None:
    cli, _ = run_vault
    proc = cli.run("run", "--no-masking", "--env", "DB=db_password", *py("import os; print(os.environ['DB'])"))
    assert proc.returncode == 0 and proc.stdout == SECRET + "\n"


def test_secret_printed_in_pieces_is_masked(run_vault: tuple[Cli, str]) -> None:
    """RN-1: a child that writes the value a few bytes at a time (each flushed, each a separate read)."""
    cli, _ = run_vault
    code = (
        "import os,sys,time\n"
        "v=os.environ['DB']\n"
        "for i in range(0,len(v),3):\n"
        "    sys.stdout.write(v[i:i+3]); sys.stdout.flush(); time.sleep(0.01)\n"
        "print(' end')\n"
    )
    proc = cli.run("run", "--env", "DB=db_password", *py(code))
    assert proc.returncode == 0
    assert SECRET not in proc.stdout and proc.stdout == f"{MASKED} end\n"


def test_masking_across_pipe_chunk_boundaries(run_vault: tuple[Cli, str]) -> None:
    """RN-1: 2 MiB of output with the value straddling every 64 KiB read boundary; every occurrence masked."""
    cli, _ = run_vault
    code = (
        "import os,sys\n"
        "v=os.environ['DB'].encode(); out=bytearray()\n"
        "for k in range(1,33):\n"
        "    out += b'x' * (k*65536 - len(out) - 7) + v\n"
        "sys.stdout.buffer.write(bytes(out)); sys.stdout.buffer.write(b'\\n')\n"
    )
    proc = subprocess.run(
        cli.command("run", "--env", "DB=db_password", *py(code)), env=cli.environ(), capture_output=True, timeout=60
    )
    assert proc.returncode == 0
    assert SECRET.encode() not in proc.stdout
    assert proc.stdout.count(MASK) == 32


def test_exit_codes_pass_through(run_vault: tuple[Cli, str]) -> None:
    """RN-1: the child's exit status is the command's; a child killed by a signal gives 128 + N."""
    cli, _ = run_vault
    assert cli.run("run", "--env", "DB=db_password", *py("raise SystemExit(7)")).returncode == 7
    killed = cli.run("run", "--env", "DB=db_password", *py("import os,signal; os.kill(os.getpid(), signal.SIGKILL)"))
    assert killed.returncode == 128 + signal.SIGKILL


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signals_are_forwarded(run_vault: tuple[Cli, str], sig: signal.Signals) -> None:
    """RN-1: SIGTERM/SIGINT to `memories run` reach the child, which answers and chooses the exit code."""
    cli, _ = run_vault
    code = (
        "import signal,sys,time\n"
        "def h(n,f):\n"
        "    print('got', n, flush=True); sys.exit(40 + n)\n"
        "signal.signal(signal.SIGTERM,h); signal.signal(signal.SIGINT,h)\n"
        "print('ready', flush=True)\n"
        "while True: time.sleep(0.05)\n"
    )
    proc = subprocess.Popen(
        cli.command("run", "--env", "DB=db_password", *py(code)), env=cli.environ(), stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    assert proc.stdout.readline() == "ready\n"
    proc.send_signal(sig)
    rest, _ = proc.communicate(timeout=30)
    assert rest == f"got {int(sig)}\n"
    assert proc.returncode == 40 + int(sig)


def test_template_rendered_to_a_private_file_removed_afterwards(run_vault: tuple[Cli, str], tmp_path: Path) -> None:
    """RN-1: {{secret:LABEL}} rendered into a 0600 file in a 0700 directory; gone after the child exits."""
    cli, _ = run_vault
    template = tmp_path / "app.env"
    template.write_text("DB_PASSWORD={{secret:db_password}}\nAPI={{ secret:api_token }}\nPLAIN=1\n")
    report = tmp_path / "report"
    code = (
        "import os,sys\n"
        "p=sys.argv[1]\n"
        "modes = oct(os.stat(p).st_mode & 0o777) + ' ' + oct(os.stat(os.path.dirname(p)).st_mode & 0o777)\n"
        "open(sys.argv[2],'w').write(p + '\\n' + modes + '\\n' + open(p).read())\n"
    )
    proc = cli.run("run", "--template", str(template), "--", sys.executable, "-c", code, "{template}", str(report))
    assert proc.returncode == 0, proc.stderr
    lines = report.read_text().splitlines()
    assert lines[1:] == ["0o600 0o700", f"DB_PASSWORD={SECRET}", f"API={TOKEN}", "PLAIN=1"]
    assert not Path(lines[0]).exists() and not Path(lines[0]).parent.exists()


def test_template_values_printed_by_the_child_are_masked(run_vault: tuple[Cli, str], tmp_path: Path) -> None:
    """RN-1: a secret that reaches the child only through the rendered template (no --env) is
    masked when the child prints it, on stdout and on stderr: the masker is given the
    template's values too, not only the environment's."""
    cli, _ = run_vault
    template = tmp_path / "app.env"
    template.write_text("DB_PASSWORD={{secret:db_password}}\nAPI={{ secret:api_token }}\n")
    code = "import sys\nlines = open(sys.argv[1]).read().splitlines()\nprint(lines[0])\nprint(lines[1], file=sys.stderr)\n"
    proc = cli.run("run", "--template", str(template), "--", sys.executable, "-c", code, "{template}")
    assert proc.returncode == 0, proc.stderr
    assert SECRET not in proc.stdout and proc.stdout == f"DB_PASSWORD={MASKED}\n"
    assert TOKEN not in proc.stderr and proc.stderr == f"API={MASKED}\n"


def test_needs_elevation_and_known_labels(run_vault: tuple[Cli, str], tmp_path: Path) -> None:
    """RN-1, API-8: without sudo (another shell session) or with an unknown label the child never starts."""
    cli, _ = run_vault
    marker = tmp_path / "ran"
    child = py(f"open({str(marker)!r}, 'w').write('x')")
    # A new parent process is a new elevation namespace (cli:{ppid}), like another shell.
    wrapper = [sys.executable, "-c", "import subprocess,sys; sys.exit(subprocess.call(sys.argv[1:]))"]
    proc = subprocess.run(
        [*wrapper, *cli.command("run", "--json", "--env", "DB=db_password", *child)],
        env=cli.environ(),
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 1 and '"elevation_required"' in proc.stdout
    unknown = cli.err("run", "--env", "DB=no_such_label", *child)
    assert unknown["code"] == "not_found" and "no_such_label" not in unknown["message"]
    assert not marker.exists()


def test_audit_records_intent_and_exit(run_vault: tuple[Cli, str]) -> None:
    """API-7: the intent is committed before delivery and the finish records the exit code."""
    cli, _ = run_vault
    assert cli.run("run", "--env", "DB=db_password", *py("raise SystemExit(3)")).returncode == 3
    entries = [e for e in cli.ok("audit", "--op", "run_bound", "--limit", "2")["entries"]]
    assert [e["phase"] for e in entries] == ["finish", "intent"]
    assert entries[0]["outcome"] == "failed"


# -- the masker itself (the same object the CLI feeds) -------------------------------------
def test_masker_every_split_point() -> None:
    """RN-1: whatever the read boundaries, no output contains a secret, and nothing else is lost."""
    text = b"start " + SECRET.encode() + b" mid " + TOKEN.encode() + SECRET.encode() + b" end"
    expected = text.replace(SECRET.encode(), MASK).replace(TOKEN.encode(), MASK)
    for i in range(len(text) + 1):
        for j in range(i, len(text) + 1, 5):
            masker = Masker([SECRET, TOKEN])
            out = masker.feed(text[:i]) + masker.feed(text[i:j]) + masker.feed(text[j:]) + masker.flush()
            assert out == expected, (i, j)


def test_masker_one_byte_at_a_time_and_overlapping_secrets() -> None:
    masker = Masker(["abc", "abcdef", "cde"])
    data = b"xxabcdefyyabcyycdezz"
    out = b"".join(masker.feed(data[k : k + 1]) for k in range(len(data))) + masker.flush()
    assert out == b"xx" + MASK + b"yy" + MASK + b"yy" + MASK + b"zz"


def test_masker_without_secrets_is_transparent() -> None:
    masker = Masker([])
    assert masker.feed(b"abc") + masker.flush() == b"abc"
    assert os.environ.get("NEVER_SET_BY_TESTS") is None
