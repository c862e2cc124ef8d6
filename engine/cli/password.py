"""Passwords come only from a TTY prompt or --password-stdin, never from argv."""

from __future__ import annotations

import sys

from engine.cli.context import UsageError

__all__ = ["read_password"]


def read_password(from_stdin: bool, *, confirm: bool = False, prompt: str = "Password: ") -> str:
    if from_stdin:
        line = sys.stdin.readline()
        password = line[:-1] if line.endswith("\n") else line
        if password.endswith("\r"):
            password = password[:-1]
        if not password:
            raise UsageError("--password-stdin read an empty password")
        return password
    if not sys.stdin.isatty():
        raise UsageError("no terminal to ask for the password; use --password-stdin")
    import getpass

    password = getpass.getpass(prompt)
    if confirm:
        again = getpass.getpass("Repeat the password: ")
        if again != password:
            raise UsageError("the passwords do not match")
    if not password:
        raise UsageError("the password is empty")
    return password
