"""`memories password generate`: random passwords or passphrases with a strength estimate (CD-11).

Randomness is :mod:`secrets`. Passphrases draw from the EFF large wordlist (7776 words,
12.9 bits each) as shipped by the maintained ``xkcdpass`` package (BSD-3; the list itself is
the EFF's, CC BY 3.0 US). The strength estimate is the maintained ``zxcvbn`` package,
imported only when an estimate is needed (CLI start-up is measured).
"""

from __future__ import annotations

import argparse
import math
import secrets
import string
import sys
from functools import lru_cache
from typing import Any

from engine.cli.context import Context, UsageError
from engine.errors import MemoriesError

__all__ = ["register", "generate_password", "generate_passphrase", "estimate", "weak_password_warning"]

SYMBOLS = "!#$%&()*+,-./:;<=>?@[]^_{|}~"
DEFAULT_LENGTH = 24
MIN_LENGTH, MAX_LENGTH = 8, 1024
MIN_WORDS, MAX_WORDS = 3, 64
WEAK_SCORE = 3  # zxcvbn scores 0–4; below 3 is "weak" (CD-11)
_ESTIMATE_CHARS = 100  # zxcvbn's matching grows fast with length; the head decides the score anyway


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    pw = sub.add_parser("password", parents=[common], help="password generator with a strength estimate")
    psub = pw.add_subparsers(dest="password_command", metavar="SUBCOMMAND", parser_class=type(pw))
    p = psub.add_parser("generate", parents=[common], help="print a random password (or --words passphrase)")
    p.add_argument("--length", type=int, help=f"characters (default {DEFAULT_LENGTH}, {MIN_LENGTH}–{MAX_LENGTH})")
    p.add_argument("--words", type=int, help=f"a passphrase of N words from the EFF list ({MIN_WORDS}–{MAX_WORDS})")
    p.add_argument("--symbols", action=argparse.BooleanOptionalAction, default=True, help="include symbols (default yes)")
    p.set_defaults(func=cmd_generate)


def generate_password(length: int = DEFAULT_LENGTH, symbols: bool = True) -> str:
    """Uniform over the alphabet, redrawn until every class (lower, upper, digit, symbol) occurs."""
    if not MIN_LENGTH <= length <= MAX_LENGTH:
        raise UsageError(f"--length must be {MIN_LENGTH}–{MAX_LENGTH}")
    classes = [string.ascii_lowercase, string.ascii_uppercase, string.digits] + ([SYMBOLS] if symbols else [])
    alphabet = "".join(classes)
    while True:
        value = "".join(secrets.choice(alphabet) for _ in range(length))
        if all(any(c in group for c in value) for group in classes):
            return value


@lru_cache(maxsize=1)
def _wordlist() -> tuple[str, ...]:
    from importlib import resources

    try:
        text = resources.files("xkcdpass").joinpath("static/eff-long").read_text("utf-8")
    except (ModuleNotFoundError, OSError):
        raise MemoriesError("invalid_input", "The word list is missing; install the xkcdpass package.") from None
    words = tuple(dict.fromkeys(w.strip() for w in text.splitlines() if w.strip().isalpha()))
    if len(words) < 7000:
        raise MemoriesError("invalid_input", "The word list is incomplete; reinstall the xkcdpass package.")
    return words


def generate_passphrase(words: int, symbols: bool = True) -> tuple[str, float]:
    """N words joined by '-', plus (with symbols) one random digit and symbol; returns (value, entropy bits)."""
    if not MIN_WORDS <= words <= MAX_WORDS:
        raise UsageError(f"--words must be {MIN_WORDS}–{MAX_WORDS}")
    wordlist = _wordlist()
    parts = [secrets.choice(wordlist) for _ in range(words)]
    bits = words * math.log2(len(wordlist))
    if symbols:
        parts.append(secrets.choice(string.digits) + secrets.choice(SYMBOLS))
        bits += math.log2(10 * len(SYMBOLS))
    return "-".join(parts), bits


def estimate(password: str) -> dict[str, Any]:
    """zxcvbn's score (0–4), its guess count, offline crack time and feedback for ``password``."""
    from zxcvbn import zxcvbn

    result = zxcvbn(password[:_ESTIMATE_CHARS])
    feedback = result.get("feedback") or {}
    return {
        "score": int(result["score"]),
        "guesses_log10": round(float(result["guesses_log10"]), 1),
        "crack_time": str(result["crack_times_display"]["offline_slow_hashing_1e4_per_second"]),
        "warning": str(feedback.get("warning") or ""),
        "suggestions": [str(s) for s in feedback.get("suggestions") or []],
    }


def weak_password_warning(password: str) -> str | None:
    """A sentence for `init` when the vault password is weak (zxcvbn score < 3), else None."""
    try:
        result = estimate(password)
    except ImportError:
        return None
    if result["score"] >= WEAK_SCORE:
        return None
    hint = f" {result['warning']}" if result["warning"] else ""
    return (
        f"this vault password is weak (strength {result['score']}/4; guessed offline in {result['crack_time']}).{hint} "
        "Anyone who copies the vault file can try passwords without limit; consider a longer one "
        "(`memories password generate --words 6`)."
    )


def cmd_generate(ctx: Context, args: argparse.Namespace) -> int:
    if args.words is not None and args.length is not None:
        raise UsageError("give either --length or --words, not both")
    if args.words is not None:
        value, bits = generate_passphrase(args.words, args.symbols)
        kind = "words"
    else:
        length = args.length if args.length is not None else DEFAULT_LENGTH
        value = generate_password(length, args.symbols)
        size = 62 + (len(SYMBOLS) if args.symbols else 0)
        bits = length * math.log2(size)
        kind = "characters"
    strength = estimate(value)
    result = {"password": value, "kind": kind, "entropy_bits": round(bits, 1), "strength": strength}
    if ctx.json_output:
        ctx.emit(result)
    else:
        print(value)
        print(
            f"{bits:.0f} bits of randomness; zxcvbn strength {strength['score']}/4 (offline: {strength['crack_time']})",
            file=sys.stderr,
        )
    return 0
