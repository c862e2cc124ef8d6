"""One name for one idea across commands: a flag a user learned on one command works on its
siblings (the old spellings stay as aliases so scripts keep working)."""

from __future__ import annotations

import pytest

from engine.cli.main import build_parser


@pytest.mark.parametrize("flag", ["--otp-stdin", "--totp-uri-stdin"])
def test_login_new_reads_its_otp_uri_with_the_flag_protected_new_uses(flag: str) -> None:
    args = build_parser().parse_args(["login", "new", "--title", "Bank", "--password-stdin", flag])
    assert args.totp_uri_stdin is True
    protected = build_parser().parse_args(["protected", "new", "--title", "GitHub", "--otp-stdin"])
    assert protected.otp_stdin is True


@pytest.mark.parametrize("command", [["device", "request", "--approver", "ab12cd34"], ["device", "approve", "request.txt"]])
@pytest.mark.parametrize("flag", ["-o", "--output", "--out"])
def test_device_files_are_written_with_the_output_flag_file_and_job_use(command: list[str], flag: str) -> None:
    args = build_parser().parse_args([*command, flag, "out.txt"])
    assert args.out == "out.txt"
    assert build_parser().parse_args(["file", "get", "ab12", "-o", "x"]).output == "x"
