"""The transcript import's fast paths give exactly what the plain code gave (issue 28, import speed):
the redactor's literal screens, msgspec line parsing with json as the fallback, the early stop of
``salient``, and the canonical encoder's exact-type shortcuts. Each is compared with a reference
written here the straightforward way, on hand-picked cases and on Hypothesis text."""

from __future__ import annotations

import functools
import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from engine.crypto import canonical
from engine.transcripts import corrections, jsonl, redact
from engine.transcripts.model import Parsed

# Pieces that make the shapes' screens and patterns fire, or nearly fire.
_PIECES = [
    "password=hunter22",
    "PASSWORD: 'abc123xyz'",
    "paſſword=secretvalue9",  # Unicode case folding (ſ): must still be redacted as before
    "AKIAABCDEFGHIJKLMNOP",
    "aws_secret_access_key = " + "A" * 40,
    "AWS_SECRET_ACCESS_KEY=" + "B" * 40,
    "export API_KEY=" + "Q" * 12,
    "ghp_" + "a" * 36,
    "github_pat_" + "b" * 30,
    "glpat-" + "c" * 24,
    "xoxb-1234567890-abc",
    "https://hooks.slack.com/services/T000/B000/XXXX",
    "sk_live_" + "d" * 20,
    "whsec_" + "e" * 20,
    "sk-ant-" + "f" * 30,
    "sk-proj-" + "g" * 30,
    "AIza" + "h" * 35,
    "npm_" + "i" * 36,
    "pypi-AgEIcHlwaS5vcmc" + "j" * 60,
    "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.abcdefghijk",
    "postgres://user:pa55word@db:5432/x",
    "-----BEGIN RSA PRIVATE KEY-----\nMIIE\n-----END RSA PRIVATE KEY-----",
    "token: settings.TOKEN",
    "max_tokens: 4096",
    "时区 备份目录 token=中文值abcd",
    "Kelvin K api_key=zzzzzz",
    " ",
    "\n",
    "=",
    ":",
    "'",
    '"',
    "x",
    "api",
    "key",
    "secret",
    "auth",
    "gh",
    "sk-",
]


def _reference(redactor: redact.Redactor, text: str) -> str:
    """The redactor's loop without the screens: every shape runs on every text."""
    if not text:
        return text
    if redactor._vault is not None:
        text, n = redactor._vault.subn(redact.placeholder("vault"), text)
        if n:
            redactor._note("vault", n)
    for kind, pattern, group in redact._SHAPES:
        text = pattern.sub(functools.partial(redactor._replace, kind=kind, group=group), text)
    return text


def _same_redaction(text: str) -> None:
    fast, slow = redact.Redactor(["vaultvalue123"]), redact.Redactor(["vaultvalue123"])
    assert fast(text) == _reference(slow, text)
    assert fast.count == slow.count and fast.kinds == slow.kinds


def test_redaction_screens_change_nothing_on_known_shapes() -> None:
    for piece in _PIECES:
        _same_redaction(piece)
        _same_redaction(f"before {piece} after vaultvalue123")
    _same_redaction(" ".join(_PIECES))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(_PIECES), st.text(max_size=12)), max_size=12))
def test_redaction_screens_change_nothing(parts: list[str]) -> None:
    _same_redaction("".join(parts))
    _same_redaction(" ".join(parts))


def _reference_lines(data: bytes) -> list[tuple[int, Any] | tuple[int, str]]:
    out: list[tuple[int, Any] | tuple[int, str]] = []
    for lineno, raw in enumerate(data[: data.rfind(b"\n") + 1].split(b"\n")[:-1], start=1):
        if not raw.strip():
            continue
        try:
            value = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError):
            out.append((lineno, "not valid JSON"))
            continue
        out.append((lineno, value) if isinstance(value, dict) else (lineno, "not a JSON object"))
    return out


def _lines(data: bytes) -> list[tuple[int, Any] | tuple[int, str]]:
    parsed = Parsed("x", "x/1")
    got: list[tuple[int, Any] | tuple[int, str]] = list(jsonl.json_lines(data, parsed))
    got.extend(parsed.warnings)
    return sorted(got, key=lambda item: item[0])


_LINES = [
    b'{"a": 1, "a": 2}',
    b'{"x": NaN}',
    b'{"f": 1e400}',
    b'{"s": "\\ud800"}',
    b'{"n": 123456789012345678901234567890}',
    b"\xef\xbb\xbf{}",
    b'{"bad": "\xff"}',
    b"[1, 2]",
    b'"text"',
    b"{" * 5000 + b"}" * 5000,
    b'{"ok": "\xe6\x97\xb6\xe5\x8c\xba"}',
    b"   ",
    b"{not json}",
]


def test_line_parsing_matches_json() -> None:
    data = b"\n".join(_LINES) + b"\n"
    got, want = _lines(data), _reference_lines(data)
    assert json.dumps(got, default=repr) == json.dumps(want, default=repr)  # NaN compares by text


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(_LINES), st.binary(max_size=20)), max_size=8))
def test_line_parsing_matches_json_on_anything(lines: list[bytes]) -> None:
    data = b"\n".join(line.replace(b"\n", b" ") for line in lines) + b"\n"
    assert json.dumps(_lines(data), default=repr) == json.dumps(_reference_lines(data), default=repr)


def _reference_salient(text: str) -> list[str]:
    out: dict[str, None] = {}
    for m in corrections._LATIN.finditer(text):
        word = m.group(0).lower().strip(".-/")
        if (len(word) >= 3 or word.isdigit()) and word not in corrections._STOP:
            out.setdefault(word, None)
    for run in corrections._HAN.findall(text):
        for i in range(len(run) - 1):
            out.setdefault(run[i : i + 2], None)
    return list(out)[: corrections.MAX_KEYS]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(["staging", "db", "5433", "改为", "数据库端口", "the", "port"]), st.text(max_size=8))))
def test_salient_early_stop_changes_nothing(words: list[str]) -> None:
    text = " ".join(words)
    assert corrections.salient(text) == _reference_salient(text)


class _Str(str):
    pass


@settings(max_examples=200, deadline=None)
@given(
    st.recursive(
        st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=5), st.binary(max_size=5)),
        lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=4), inner, max_size=4)),
        max_leaves=20,
    )
)
def test_canonical_shortcuts_change_nothing(value: Any) -> None:
    def reference(v: Any) -> Any:
        if isinstance(v, bool) or v is None or isinstance(v, (str, int)):
            return v
        if isinstance(v, bytes):
            return {"$b": canonical.b64e(v)}
        if isinstance(v, dict):
            return {k: reference(x) for k, x in v.items()}
        return [reference(x) for x in v]

    want = json.dumps(reference(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    assert canonical.canonical_bytes(value) == want
    assert canonical.canonical_bytes({"k": [_Str("sub"), True, (1, 2)]}) == b'{"k":["sub",true,[1,2]]}'
