"""Search filters (issue 18): a time window and who or what wrote an item.

``since``/``until`` take a date (``2026-11-30``, local time; as ``until`` it includes that
whole day), a date and time in ISO 8601 (``2026-11-30T14:00``, with or without an offset),
an age (``90m``, ``12h``, ``7d``, ``2w``), or ``today``/``yesterday``. The window applies to
when an item last changed (its current revision). ``author`` is a device fingerprint
prefix as ``memories history`` and ``memories devices`` show it; ``source`` matches the
start of an item's ``source`` metadata (for example a transcript turn or a URL).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from datetime import datetime, timedelta

from engine.errors import MemoriesError

__all__ = ["Filters", "parse_when", "WHEN_HELP"]

WHEN_HELP = "a date (2026-11-30), an ISO date and time, an age (90m, 12h, 7d, 2w), today or yesterday"
_AGE = re.compile(r"^(\d{1,6})\s*(m|min|h|d|w)$")
_UNIT_S = {"m": 60, "min": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_DATE_ONLY = re.compile(r"^\d{4}-\d{2}-\d{2}$")


def _local_midnight(day: datetime) -> datetime:
    return day.replace(hour=0, minute=0, second=0, microsecond=0)


def parse_when(text: str, *, end: bool, now_s: float | None = None) -> int:
    """Milliseconds since the epoch; ``end`` makes a whole day inclusive (for ``until``)."""
    value = text.strip().lower()
    now = time.time() if now_s is None else now_s
    age = _AGE.match(value)
    if age:
        return int((now - int(age.group(1)) * _UNIT_S[age.group(2)]) * 1000)
    if value in ("today", "yesterday"):
        start = _local_midnight(datetime.fromtimestamp(now)) - timedelta(days=1 if value == "yesterday" else 0)
        stamp = start + timedelta(days=1) if end else start
        return int(stamp.timestamp() * 1000)
    try:
        parsed = datetime.fromisoformat(value.upper().replace("Z", "+00:00") if "t" in value else value)
    except ValueError:
        raise MemoriesError("invalid_input", f"A time filter takes {WHEN_HELP}.") from None
    if end and _DATE_ONLY.match(value):
        parsed += timedelta(days=1)
    # A naive value is local time: astimezone() on a naive datetime assumes the local zone.
    return int(parsed.astimezone().timestamp() * 1000) - (1 if end and _DATE_ONLY.match(value) else 0)


@dataclass(frozen=True)
class Filters:
    since_ms: int | None = None
    until_ms: int | None = None
    author: str | None = None  # lowercase hex fingerprint prefix
    source: str | None = None

    @classmethod
    def parse(cls, since: str | None, until: str | None, author: str | None, source: str | None) -> Filters | None:
        if since is None and until is None and author is None and source is None:
            return None
        since_ms = parse_when(since, end=False) if since is not None else None
        until_ms = parse_when(until, end=True) if until is not None else None
        if since_ms is not None and until_ms is not None and since_ms > until_ms:
            raise MemoriesError("invalid_input", "The time window is empty: `since` is after `until`.")
        if author is not None and not re.fullmatch(r"[0-9a-fA-F]{4,64}", author):
            raise MemoriesError("invalid_input", "An author is a device fingerprint prefix: 4 to 64 hex digits.")
        return cls(since_ms, until_ms, author.lower() if author else None, source)

    def keeps(self, updated_ms: int, author_fingerprint: str, meta: dict[str, str]) -> bool:
        if self.since_ms is not None and updated_ms < self.since_ms:
            return False
        if self.until_ms is not None and updated_ms > self.until_ms:
            return False
        if self.author is not None and not author_fingerprint.startswith(self.author):
            return False
        return self.source is None or meta.get("source", "").startswith(self.source)
