"""Edit a memory in the user's editor, like `git commit`: front matter (title, tags, meta) + body.

The file lives in a fresh private directory (``mkdtemp``: 0700, unpredictable name; the file
is 0600) because it holds the body in plain text, and both are removed afterwards whatever
happens (editor failure, Ctrl-C). The editor is ``$VISUAL``, then ``$EDITOR``, then ``vi``,
split with :mod:`shlex` and run without a shell.

The file looks like this (values that would not survive a line, e.g. with a line feed or
leading spaces, are written as JSON strings; tags with commas as a JSON list)::

    ---
    title: Groceries
    tags: home, weekly
    meta:
      store: corner shop
    ---
    the body, exactly as stored
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from engine.cli.context import UsageError
from engine.errors import MemoriesError

__all__ = ["Draft", "edit_draft", "parse_draft", "render_draft"]

FENCE = "---"
HELP_LINES = (
    "# Edit the title, tags, meta and the body below the second '---'. Lines starting with",
    "# '#' above that line are ignored. Save and quit to store it; quit without changes to cancel.",
)


@dataclass
class Draft:
    title: str = ""
    tags: list[str] = field(default_factory=list)
    meta: dict[str, str] = field(default_factory=dict)
    body: str = ""


def _value(text: str, key: bool = False) -> str:
    """One line that reads back as ``text`` (a key also quoted when it holds ':')."""
    if (
        (key and ":" in text)
        or text != text.strip()
        or text.startswith(("'", '"', "["))
        or any(ord(c) < 32 or c == "\x7f" for c in text)
    ):
        return json.dumps(text, ensure_ascii=False)
    return text


def _unvalue(text: str, what: str) -> str:
    text = text.strip()
    if text.startswith('"'):
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            raise UsageError(f"the {what} line is not a valid quoted string; nothing was saved") from None
        if not isinstance(value, str):
            raise UsageError(f"the {what} line is not a string; nothing was saved")
        return value
    return text


def render_draft(draft: Draft) -> str:
    lines = [FENCE, *HELP_LINES, f"title: {_value(draft.title)}"]
    if any("," in t or t != t.strip() or t.startswith(("[", '"')) for t in draft.tags):
        lines.append(f"tags: {json.dumps(draft.tags, ensure_ascii=False)}")
    else:
        lines.append(f"tags: {', '.join(draft.tags)}")
    lines.append("meta:")
    for key, value in sorted(draft.meta.items()):
        lines.append(f"  {_value(key, key=True)}: {_value(value)}")
    lines.append(FENCE)
    return "\n".join(lines) + "\n" + draft.body


def parse_draft(text: str) -> Draft:
    """The draft in an edited file; a malformed header is a usage error (nothing is saved)."""
    lines = text.split("\n")
    if not lines or lines[0].strip() != FENCE:
        raise UsageError("the edited file must start with a '---' line; nothing was saved")
    try:
        end = next(i for i in range(1, len(lines)) if lines[i].strip() == FENCE)
    except StopIteration:
        raise UsageError("the edited file has no closing '---' line after the title and tags; nothing was saved") from None
    draft = Draft(body="\n".join(lines[end + 1 :]))
    in_meta = False
    for raw in lines[1:end]:
        if not raw.strip() or raw.lstrip().startswith("#"):
            continue
        if in_meta and raw[:1] in (" ", "\t"):
            key, sep, value = _split_pair(raw.strip())
            if not sep or not key:
                raise UsageError("a meta line needs 'key: value'; nothing was saved")
            draft.meta[_unvalue(key, "meta key")] = _unvalue(value, "meta value")
            continue
        in_meta = False
        name, sep, value = raw.partition(":")
        name = name.strip()
        if not sep or name not in ("title", "tags", "meta"):
            raise UsageError(f"the header takes title, tags and meta lines, not {name[:30]!r}; nothing was saved")
        if name == "title":
            draft.title = _unvalue(value, "title")
        elif name == "tags":
            draft.tags = _tags(value)
        else:
            in_meta = True
            if value.strip():
                raise UsageError("write meta as indented 'key: value' lines under 'meta:'; nothing was saved")
    return draft


def _split_pair(text: str) -> tuple[str, str, str]:
    if text.startswith('"'):  # a quoted key may hold ':'
        decoder = json.JSONDecoder()
        try:
            _, end = decoder.raw_decode(text)
        except json.JSONDecodeError:
            return "", "", ""
        rest = text[end:].lstrip()
        if not rest.startswith(":"):
            return "", "", ""
        return text[:end], ":", rest[1:]
    return text.partition(":")


def _tags(value: str) -> list[str]:
    value = value.strip()
    if value.startswith("["):
        try:
            tags = json.loads(value)
        except json.JSONDecodeError:
            raise UsageError("the tags line is not a valid list; nothing was saved") from None
        if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
            raise UsageError("the tags line must list strings; nothing was saved")
        return tags
    return [t.strip() for t in value.split(",") if t.strip()]


def editor_command() -> list[str]:
    raw = os.environ.get("VISUAL") or os.environ.get("EDITOR") or "vi"
    try:
        words = shlex.split(raw)
    except ValueError:
        words = []
    if not words:
        raise MemoriesError("invalid_input", "$VISUAL or $EDITOR is not a command line; set it to your editor.")
    return words


def edit_draft(draft: Draft, home: Path, name: str = "memory.md") -> Draft | None:
    """Open ``draft`` in the editor; the edited draft, or None if the file was left as it was.

    The draft (a note in clear) lives in a 0700 folder under the data home's private scratch/
    folder, not the shared temp folder: a killed CLI's copy is swept by the next call."""
    from engine.cli.scratch import new_scratch_dir

    command = editor_command()
    original = render_draft(draft)
    directory = str(new_scratch_dir(home, "edit"))
    try:
        path = os.path.join(directory, name)
        text = original
        while True:
            edited = _run_editor(command, path, text)
            if edited == original:
                return None
            if not edited.strip():
                raise MemoriesError("invalid_input", "The edited file is empty; nothing was saved.")
            try:
                result = parse_draft(edited)
                break
            except UsageError as slip:
                # As git does with a failed commit message, the typed text is not thrown away:
                # the same text opens again, and only a "no" drops it.
                if not _edit_again(str(slip)):
                    raise
                text = edited
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    # Editors add a final line feed the stored body may not have had: that is no change.
    if result.body == draft.body + "\n" and not draft.body.endswith("\n"):
        result.body = draft.body
    if result == draft:
        return None
    return result


def _run_editor(command: list[str], path: str, text: str) -> str:
    """Write ``text`` to ``path``, run the editor, read it back."""
    # Made afresh each time, 0600: on a second round the editor may have replaced the file.
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
        handle.write(text)
    try:
        code = subprocess.run([*command, path], check=False).returncode
    except OSError:
        raise MemoriesError(
            "invalid_input", f"The editor {command[0][:60]!r} could not be started; set $VISUAL or $EDITOR."
        ) from None
    if code != 0:
        raise MemoriesError("invalid_input", f"The editor exited with status {code}; nothing was saved.")
    try:
        with open(path, encoding="utf-8", newline="") as handle:
            return handle.read()
    except FileNotFoundError:
        raise MemoriesError("invalid_input", "The editor removed the file; nothing was saved.") from None
    except UnicodeDecodeError:
        raise MemoriesError("invalid_input", "The edited file is not UTF-8 text; nothing was saved.") from None


def _edit_again(problem: str) -> bool:
    """Say what is wrong with the edited file and ask (on the terminal) whether to fix it."""
    print(f"memories: {problem.removesuffix('; nothing was saved')}.", file=sys.stderr, flush=True)
    try:
        answer = input("Edit it again? Your text is kept. [Y/n] ")
    except EOFError:
        return False
    return answer.strip().lower() in ("", "y", "yes")
