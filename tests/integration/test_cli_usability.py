"""Issue 19: a CLI people enjoy — editor, stdin, tags, listings, did-you-mean, candidates, status, completion."""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.helpers import Cli, require
from tests.terminal import run_in_terminal

# An "editor": records the file it was given (and its directory's mode), then rewrites it
# with the replacements in EDIT_FROM/EDIT_TO (or leaves it alone when EDIT_FROM is empty).
EDITOR_SCRIPT = """
import json, os, stat, sys
path = sys.argv[1]
with open(os.environ["EDIT_LOG"], "w") as log:
    json.dump({"path": path, "dir_mode": stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode),
               "file_mode": stat.S_IMODE(os.stat(path).st_mode)}, log)
if os.environ.get("EDIT_FROM"):
    text = open(path, encoding="utf-8").read()
    for old, new in zip(os.environ["EDIT_FROM"].split("|"), os.environ["EDIT_TO"].split("|")):
        text = text.replace(old, new)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)
sys.exit(int(os.environ.get("EDIT_EXIT", "0")))
"""


def _editor(cli: Cli, tmp_path: Path, edit_from: str = "", edit_to: str = "", code: int = 0) -> Path:
    script = tmp_path / "editor.py"
    script.write_text(EDITOR_SCRIPT)
    log = tmp_path / "editor.log"
    cli.env.update(
        {
            "VISUAL": f"{sys.executable} {script}",
            "EDIT_LOG": str(log),
            "EDIT_FROM": edit_from,
            "EDIT_TO": edit_to,
            "EDIT_EXIT": str(code),
        }
    )
    return log


def _in_terminal(cli: Cli, *args: str) -> tuple[int, str]:
    return run_in_terminal(cli.command(*args), [], cli.environ())


def test_edit_opens_the_editor_and_saves_what_changed(vault: Cli, tmp_path: Path) -> None:
    """`memories edit ID` on a terminal opens $VISUAL on front matter + body; the edit is saved.

    The file is in a fresh 0700 directory, is 0600, and is gone afterwards (it held the body)."""
    item = vault.put("Groceries", "milk\neggs", "home")
    log = _editor(vault, tmp_path, "title: Groceries|eggs|tags: home", "title: Shopping|eggs\nbread|tags: home, weekly")
    code, out = _in_terminal(vault, "edit", item["short_id"])
    assert code == 0, out
    record = json.loads(log.read_text())
    assert record["dir_mode"] == 0o700 and record["file_mode"] == 0o600
    assert not os.path.exists(record["path"]) and not os.path.exists(os.path.dirname(record["path"]))
    assert os.path.dirname(record["path"]) != "/tmp"
    got = vault.ok("get", item["short_id"])
    assert (got["title"], got["body"], got["tags"]) == ("Shopping", "milk\neggs\nbread", ["home", "weekly"])
    assert "added weekly" in out


def test_edit_with_an_unchanged_file_saves_nothing(vault: Cli, tmp_path: Path) -> None:
    item = vault.put("Keep", "as it is")
    log = _editor(vault, tmp_path)
    code, out = _in_terminal(vault, "edit", item["short_id"])
    assert code == 0 and "No changes" in out
    assert log.exists()
    assert len(vault.ok("history", item["short_id"])["revisions"]) == 1


def test_a_failing_editor_saves_nothing_and_removes_the_file(vault: Cli, tmp_path: Path) -> None:
    item = vault.put("Keep", "as it is")
    log = _editor(vault, tmp_path, "as it is", "changed", code=3)
    code, out = _in_terminal(vault, "edit", item["short_id"])
    assert code == 1 and "status 3" in out
    assert not os.path.exists(json.loads(log.read_text())["path"])
    assert vault.ok("get", item["short_id"])["body"] == "as it is"


def test_put_with_no_body_on_a_terminal_opens_the_editor(vault: Cli, tmp_path: Path) -> None:
    _editor(vault, tmp_path, "title: |meta:\n---\n", "title: Written in the editor|meta:\n---\nthe body\n")
    code, out = _in_terminal(vault, "put")
    assert code == 0, out
    items = vault.ok("list")["items"]
    assert [i["title"] for i in items] == ["Written in the editor"]
    assert vault.ok("get", items[0]["short_id"])["body"] == "the body\n"


# An "editor" that slips on its first round (a misspelt header line, with the body typed) and,
# given the same file again, checks the typed body is still there and fixes the header.
SLIPPING_EDITOR = """
import os, sys
path, rounds = sys.argv[1], os.environ["EDIT_ROUNDS"]
done = len(open(rounds).read()) if os.path.exists(rounds) else 0
open(rounds, "a").write("x")
text = open(path, encoding="utf-8").read()
if done == 0:
    text = text.replace("title: Draft", "titel: Draft") + "typed with care\\n"
else:
    assert "typed with care" in text, text
    text = text.replace("titel: Draft", "title: Draft")
open(path, "w", encoding="utf-8").write(text)
"""


def _slipping_editor(cli: Cli, tmp_path: Path) -> Path:
    script = tmp_path / "slip.py"
    script.write_text(SLIPPING_EDITOR)
    rounds = tmp_path / "rounds"
    cli.env.update({"VISUAL": f"{sys.executable} {script}", "EDIT_ROUNDS": str(rounds)})
    return rounds


def test_a_front_matter_slip_keeps_the_text_and_offers_to_edit_again(vault: Cli, tmp_path: Path) -> None:
    """Issue 31: a header slip in `put`'s editor does not throw the typed text away; as git does
    with a failed commit message, it says what is wrong and opens the same text again."""
    rounds = _slipping_editor(vault, tmp_path)
    code, out = run_in_terminal(vault.command("put", "--title", "Draft"), [("Edit it again?", "")], vault.environ())
    assert code == 0, out
    assert "not 'titel'" in out and rounds.read_text() == "xx"
    items = vault.ok("list")["items"]
    assert [i["title"] for i in items] == ["Draft"]
    assert vault.ok("get", items[0]["short_id"])["body"] == "typed with care\n"


def test_declining_to_edit_again_after_a_slip_saves_nothing(vault: Cli, tmp_path: Path) -> None:
    item = vault.put("Draft", "as it is")
    rounds = _slipping_editor(vault, tmp_path)
    code, out = run_in_terminal(vault.command("edit", item["short_id"]), [("Edit it again?", "n")], vault.environ())
    assert code == 2 and "nothing was saved" in out, out
    assert rounds.read_text() == "x"
    assert vault.ok("get", item["short_id"])["body"] == "as it is"
    assert len(vault.ok("history", item["short_id"])["revisions"]) == 1


def test_edit_reads_a_piped_body(vault: Cli) -> None:
    item = vault.put("Note", "old body")
    proc = vault.run("edit", item["short_id"], input="new body from a pipe")
    assert proc.returncode == 0, proc.stderr
    assert vault.ok("get", item["short_id"])["body"] == "new body from a pipe"


def test_edit_never_reads_dev_null_or_an_empty_file(vault: Cli, tmp_path: Path) -> None:
    """A script's `</dev/null` (a character device) or an empty file must not wipe a body."""
    item = vault.put("Note", "precious body")
    proc = vault.run("edit", item["short_id"])  # stdin is /dev/null
    assert proc.returncode == 2 and "nothing to change" in proc.stderr
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    with open(empty, "rb") as handle:
        proc = subprocess.run(
            vault.command("edit", item["short_id"]), stdin=handle, capture_output=True, text=True, env=vault.environ()
        )
    assert proc.returncode == 2
    full = tmp_path / "body.txt"
    full.write_text("from a file")
    with open(full, "rb") as handle:
        proc = subprocess.run(
            vault.command("edit", item["short_id"]), stdin=handle, capture_output=True, text=True, env=vault.environ()
        )
    assert proc.returncode == 0, proc.stderr
    assert vault.ok("get", item["short_id"])["body"] == "from a file"
    assert len(vault.ok("history", item["short_id"])["revisions"]) == 2


def test_add_and_remove_tags_say_what_changed(vault: Cli) -> None:
    item = vault.put("Task", "", "todo", "home")
    proc = vault.run("edit", item["short_id"], "--add-tag", "done", "--remove-tag", "todo")
    assert proc.returncode == 0, proc.stderr
    assert "tags: added done; removed todo (now: home, done)" in proc.stdout
    assert vault.ok("get", item["short_id"])["tags"] == ["home", "done"]
    proc = vault.run("edit", item["short_id"], "--tag", "x")
    assert "added x; removed home, done" in proc.stdout
    assert vault.run("edit", item["short_id"], "--tag", "a", "--add-tag", "b").returncode == 2


def test_list_says_when_it_stopped_early_and_sorts(vault: Cli, tmp_path: Path) -> None:
    notes = tmp_path / "notes.jsonl"
    notes.write_text("".join(json.dumps({"title": f"n{i:03d}", "body": str(i)}) + "\n" for i in range(105)))
    vault.ok("import", str(notes))
    proc = vault.run("list")
    assert len(proc.stdout.splitlines()) == 100
    assert "showing 100 of 105" in proc.stderr and "--all" in proc.stderr
    proc = vault.run("list", "--all")
    assert len(proc.stdout.splitlines()) == 105 and proc.stderr == ""
    titles = [i["title"] for i in vault.ok("list", "--sort", "title", "--limit", "3")["items"]]
    assert titles == ["n000", "n001", "n002"]
    result = vault.ok("list", "--all")
    assert len(result["items"]) == result["total"] == 105


def test_mistyped_commands_and_options_suggest_the_closest(cli: Cli) -> None:
    proc = cli.run("serch", "x")
    assert proc.returncode == 2 and "did you mean `search`?" in proc.stderr
    assert "init" not in proc.stderr  # not the whole list
    assert "did you mean `--limit`?" in cli.run("list", "--lmit", "3").stderr
    assert "did you mean `show`?" in cli.run("card", "shwo", "x").stderr


def test_an_ambiguous_prefix_lists_the_candidates(vault: Cli, tmp_path: Path) -> None:
    """ambiguous_id carries the candidates (short ID, kind, title) and never a body."""
    notes = tmp_path / "notes.jsonl"
    # 1500 random IDs: two sharing their first 4 hex digits is all but certain.
    notes.write_text("".join(json.dumps({"title": f"t{i}", "body": f"SECRETBODY{i}"}) + "\n" for i in range(1500)))
    vault.ok("import", str(notes))
    ids = sorted(i["id"] for i in vault.ok("list", "--all")["items"])
    prefix = next(a[:4] for a, b in itertools.pairwise(ids) if a[:4] == b[:4])
    expected = {i for i in ids if i.startswith(prefix)}
    error = vault.err("get", prefix)
    assert error["code"] == "ambiguous_id"
    assert {c["id"] for c in error["candidates"]} == expected
    assert all(c["kind"] == "memory" and c["title"].startswith("t") for c in error["candidates"])
    proc = vault.run("get", prefix)
    assert proc.returncode == 1 and "SECRETBODY" not in proc.stderr + proc.stdout
    for full in expected:
        assert vault.ok("get", full)["id"] == full
    shown = [line.split()[0] for line in proc.stderr.splitlines()[1:]]
    assert all(any(full.startswith(s) for full in expected) for s in shown) and len(shown) == len(expected)


def test_status_on_a_fresh_home_says_how_to_start(cli: Cli) -> None:
    proc = cli.run("status")
    assert proc.returncode == 0
    assert proc.stdout.strip() == "No vault yet. Create one with `memories init`."
    assert not cli.home.exists() or not (cli.home / "engine.lock").exists()


def test_history_has_column_headers(vault: Cli) -> None:
    item = vault.put("Note", "a")
    lines = vault.run("history", item["short_id"]).stdout.splitlines()
    assert lines[0].split() == ["REVISION", "WHEN", "AUTHOR", "PARENTS", "TITLE"]
    assert lines[1].startswith(item["short_revision"])


def _bash_complete(cli: Cli, tmp_path: Path, line: list[str]) -> list[str]:
    """Source `memories completion bash` in a real bash and run the function on a command line."""
    require(shutil.which("bash") is not None, "bash is needed for the completion test")
    shim = tmp_path / "bin"
    shim.mkdir(exist_ok=True)
    (shim / "memories").write_text(f'#!/bin/sh\nexec {sys.executable} -m engine.cli --home {cli.home} "$@"\n')
    (shim / "memories").chmod(0o755)
    words = " ".join(f"'{w}'" for w in line)
    script = (
        f"source <(memories completion bash); COMP_WORDS=({words}); COMP_CWORD={len(line) - 1}; "
        '_memories; printf "%s\\n" "${COMPREPLY[@]}"'
    )
    env = {**cli.environ(), "PATH": f"{shim}:{os.environ['PATH']}", "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    proc = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return [w for w in proc.stdout.splitlines() if w]


def test_bash_completion_of_commands_options_ids_and_tags(vault: Cli, tmp_path: Path) -> None:
    item = vault.put("Completable", "", "garden")
    assert _bash_complete(vault, tmp_path, ["memories", "sea"]) == ["search"]
    assert "--add-tag" in _bash_complete(vault, tmp_path, ["memories", "edit", "--a"])
    assert _bash_complete(vault, tmp_path, ["memories", "card", "sh"]) == ["show"]
    assert _bash_complete(vault, tmp_path, ["memories", "get", item["id"][:3]]) == [item["short_id"]]
    assert _bash_complete(vault, tmp_path, ["memories", "list", "--tag", "gar"]) == ["garden"]
    assert _bash_complete(vault, tmp_path, ["memories", "list", "--sort", "ti"]) == ["title"]
    vault.ok("lock")
    assert _bash_complete(vault, tmp_path, ["memories", "get", item["id"][:3]]) == []


def test_dynamic_completion_never_starts_the_engine(vault: Cli) -> None:
    vault.stop()
    proc = vault.run("__complete", "ids", "")
    assert proc.returncode == 0 and proc.stdout == "" and proc.stderr == ""
    assert vault.daemon_pid() is None


def test_zsh_and_fish_scripts_are_generated(cli: Cli) -> None:
    zsh = cli.run("completion", "zsh")
    fish = cli.run("completion", "fish")
    assert zsh.returncode == 0 and "bashcompinit" in zsh.stdout and "complete -F _memories memories" in zsh.stdout
    assert fish.returncode == 0 and "__memories_at 'card'" in fish.stdout and "__complete ids" in fish.stdout
    if shutil.which("fish"):
        checked = subprocess.run(["fish", "--no-execute"], input=fish.stdout, capture_output=True, text=True)
        assert checked.returncode == 0, checked.stderr
    if shutil.which("zsh"):
        checked = subprocess.run(["zsh", "-n"], input=zsh.stdout, capture_output=True, text=True)
        assert checked.returncode == 0, checked.stderr


def test_help_topics_and_examples(cli: Cli) -> None:
    proc = cli.run("help", "conflicts")
    assert proc.returncode == 0 and "--resolve" in proc.stdout
    assert "EXAMPLES" in cli.run("edit", "--help").stdout
    assert "EXAMPLES" in cli.run("help", "card", "link").stdout
    assert "did you mean `secrets`?" in cli.run("help", "secrts").stderr
