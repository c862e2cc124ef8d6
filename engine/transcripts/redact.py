"""No secrets in memory (AG-10): what a transcript turn loses before it is stored or indexed.

Every event's text passes through a ``Redactor`` on import. Two sources of secrets:

- the values this vault already protects (every value any credential has held: logins,
  protected cards, secret maps, ``credential new``), given by the engine, replaced by
  ``[redacted:vault]`` wherever they occur;
- the well-known shapes of tokens that tools print (``cat .env``, ``env``, a config file):
  private-key blocks, AWS access keys and secret-key assignments, GitHub, GitLab, Slack,
  Stripe, OpenAI/Anthropic, Google, npm and PyPI tokens, JWTs, passwords in URLs, and
  ``password=`` / ``secret:`` / ``API_KEY=`` style assignments, each replaced by
  ``[redacted:KIND]``.

Why a module of our own rather than detect-secrets (Yelp, the maintained detector library on
PyPI; issue 28 asked for one): tried on this machine, its ``scan_line`` costs about 5 ms a
line with its default plugins (a 20,000-turn import would spend minutes in it), several of
its plugins report only the token's prefix as the secret (GitHub ``ghp``, GitLab ``glpat``)
and its JWT match drops the signature, so it cannot say *where* a value is to replace it,
and unquoted ``password=…`` assignments are only caught by its entropy heuristics, which
flag ordinary words. The patterns below follow the token formats the providers document
(and detect-secrets' own plugin list); tests/transcripts/test_redaction.py checks each.

The original text is not kept anywhere: only the redacted text is stored, indexed, shown.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final

__all__ = ["Redactor", "MIN_VAULT_VALUE", "placeholder"]

# A vault value shorter than this is not searched for (a 4-digit PIN would mask every year).
MIN_VAULT_VALUE: Final = 6


def placeholder(kind: str) -> str:
    return f"[redacted:{kind}]"


# (kind, pattern, group holding the secret: 0 = the whole match). Order matters: blocks and
# specific shapes first, generic assignments last (they would otherwise take a known token).
_SHAPES: Final[tuple[tuple[str, re.Pattern[str], int], ...]] = (
    (
        "private_key",
        re.compile(
            r"-----BEGIN ((?:[A-Z0-9]+ )*)PRIVATE KEY(?: BLOCK)?-----[\s\S]*?(?:-----END \1PRIVATE KEY(?: BLOCK)?-----|\Z)"
        ),
        0,
    ),
    ("aws_access_key", re.compile(r"\b(?:A3T[A-Z0-9]|AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}\b"), 0),
    (
        "aws_secret_key",
        re.compile(r"(?i)\baws_?(?:secret_?(?:access_?)?key|session_?token)[\"']?\s*[:=]\s*[\"']?([A-Za-z0-9/+=]{40,})"),
        1,
    ),
    ("github_token", re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{36,255}|github_pat_[A-Za-z0-9_]{22,255})\b"), 0),
    ("gitlab_token", re.compile(r"\bgl(?:pat|dt|ptt|rt|soat|ft|imt|agent|cbt|oas)-[A-Za-z0-9_\-]{20,}"), 0),
    ("slack_token", re.compile(r"\bxox[abposr]-[A-Za-z0-9\-]{10,}"), 0),
    ("slack_webhook", re.compile(r"https://hooks\.slack\.com/services/T[A-Za-z0-9_]+/B[A-Za-z0-9_]+/[A-Za-z0-9_]+"), 0),
    ("stripe_key", re.compile(r"\b(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,}\b"), 0),
    ("stripe_webhook_secret", re.compile(r"\bwhsec_[A-Za-z0-9]{16,}\b"), 0),
    ("anthropic_key", re.compile(r"\bsk-ant-[A-Za-z0-9_\-]{20,}"), 0),
    ("openai_key", re.compile(r"\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{20,}"), 0),
    ("google_api_key", re.compile(r"\bAIza[0-9A-Za-z_\-]{35}\b"), 0),
    ("npm_token", re.compile(r"\bnpm_[A-Za-z0-9]{36}\b"), 0),
    ("pypi_token", re.compile(r"\bpypi-AgEIcHlwaS5vcmc[A-Za-z0-9_\-]{50,}"), 0),
    ("jwt", re.compile(r"\beyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}"), 0),
    ("url_password", re.compile(r"\b[a-z][a-z0-9+.\-]{1,20}://[^\s/:@\"'<>]{1,128}:([^\s@/\"'<>]{3,256})@"), 1),
    (
        "secret",
        re.compile(
            r"(?i)\b[\w.\-]*(?:password|passwd|pwd|passphrase|secret|token|api[_\-]?key|access[_\-]?key|private[_\-]?key"
            r"|client[_\-]?secret|auth[_\-]?key|credentials?)[\w.\-]*[\"']?\s*(?::=|=|:)\s*"
            r"(?:\"([^\"\s]{4,})\"|'([^'\s]{4,})'|([^\s\"',;}{)(\]\[]{4,}))"
        ),
        -1,  # the first of groups 1..3 that matched
    ),
)
# Literals every match of each shape contains (same order as _SHAPES): a text holding none of
# them cannot match, so the pattern is not run (one `in` test costs far less than a regex scan,
# and most turns hold no secret). Case-insensitive shapes are screened on the lower-cased text,
# and only for ASCII text: Unicode case folding makes a few other letters match (ſ, K, ı).
_HINTS: Final[tuple[tuple[tuple[str, ...], bool], ...]] = (
    (("PRIVATE KEY",), False),
    (("A3T", "AKIA", "ASIA", "ABIA", "ACCA"), False),
    (("aws",), True),
    (("gh", "github_pat_"), False),
    (("gl",), False),
    (("xox",), False),
    (("hooks.slack.com",), False),
    (("_live_", "_test_"), False),
    (("whsec_",), False),
    (("sk-ant-",), False),
    (("sk-",), False),
    (("AIza",), False),
    (("npm_",), False),
    (("pypi-AgEIcHlwaS5vcmc",), False),
    (("eyJ",), False),
    (("://",), False),
    (("pass", "pwd", "secret", "token", "api", "access", "private", "auth", "credential"), True),
)
# Each shape's hints as one regex of plain literals: a single C-level scan per shape.
_SCREENS: Final[tuple[tuple[re.Pattern[str], bool], ...]] = tuple(
    (re.compile("|".join(map(re.escape, hints))), folded) for hints, folded in _HINTS
)
# An assignment whose value is code or a reference, not a secret: settings.X, os.environ[...], ${VAR}, $VAR,
# <...>, or a small number (max_tokens: 4096).
_NOT_A_VALUE = re.compile(
    r"^(?:\d{1,7}|\$\{?\w+\}?|<[^>]*>|\[redacted:\w+\]|%\(?\w+\)?s?|[A-Za-z_]\w*(?:\.\w+)+(?:\(.*)?|None|null|true|false|\*+)$"
)


@dataclass
class Redactor:
    """Replaces secrets in text; ``count`` says how many it replaced so far, per kind in ``kinds``."""

    vault_values: Iterable[str] = ()
    count: int = 0
    kinds: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        values = sorted({v for v in self.vault_values if len(v) >= MIN_VAULT_VALUE}, key=len, reverse=True)
        # One alternation, longest first, so a value inside another stays hidden.
        self._vault = re.compile("|".join(map(re.escape, values))) if values else None

    def _note(self, kind: str, n: int = 1) -> None:
        self.count += n
        self.kinds[kind] = self.kinds.get(kind, 0) + n

    def apply(self, text: str) -> tuple[str, int]:
        """The redacted text and how many secrets it held."""
        before = self.count
        out = self(text)
        return out, self.count - before

    def __call__(self, text: str) -> str:
        if not text:
            return text
        if self._vault is not None:
            text, n = self._vault.subn(placeholder("vault"), text)
            if n:
                self._note("vault", n)
        ascii_text = text.isascii()
        lowered = text.lower() if ascii_text else text
        for (kind, pattern, group), (screen, folded) in zip(_SHAPES, _SCREENS, strict=True):
            if folded and not ascii_text:
                pass  # screened only for ASCII text (see _HINTS)
            elif screen.search(lowered if folded else text) is None:
                continue
            replaced = pattern.sub(functools.partial(self._replace, kind=kind, group=group), text)
            if replaced is not text:  # the next screens read the text as it is now
                text = replaced
                ascii_text = text.isascii()
                lowered = text.lower() if ascii_text else text
        return text

    def _replace(self, match: re.Match[str], kind: str, group: int) -> str:
        if group == -1:
            index = next(i for i in (1, 2, 3) if match.group(i) is not None)
            value = match.group(index)
            if _NOT_A_VALUE.match(value):
                return match.group(0)
            start, end = match.span(index)
        elif group == 0:
            self._note(kind)
            return placeholder(kind)
        else:
            start, end = match.span(group)
        base = match.start(0)
        self._note(kind)
        whole = match.group(0)
        return whole[: start - base] + placeholder(kind) + whole[end - base :]
