"""Passwords come only from a TTY prompt or --password-stdin, never from argv."""

from __future__ import annotations

import sys

from engine.cli.context import UsageError

__all__ = ["read_password"]


def read_password(from_stdin: bool, *, confirm: bool = False, prompt: str = "Password: ", flag: str = "--password-stdin") -> str:
    """``flag`` names the option that reads this secret from stdin, for the error sentences."""
    if from_stdin:
        line = sys.stdin.readline()
        password = line[:-1] if line.endswith("\n") else line
        if password.endswith("\r"):
            password = password[:-1]
        if not password:
            raise UsageError(f"{flag} read an empty line")
        return password
    if not sys.stdin.isatty():
        raise UsageError(f"no terminal to ask at; use {flag}")
    import getpass

    password = getpass.getpass(prompt)
    if confirm:
        again = getpass.getpass("Repeat the password: ")
        if again != password:
            raise UsageError("the passwords do not match")
    if not password:
        raise UsageError("the password is empty")
    return password
