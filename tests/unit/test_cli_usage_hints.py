"""Usage mistakes a newcomer makes get an answer that fits: a group command typed alone
(`memories login`) shows what may follow it, and another command's option is named as such."""

from __future__ import annotations

import pytest

from engine.cli.main import main


@pytest.mark.parametrize("group", ["password", "login", "card", "credential", "secret", "device"])
def test_a_group_without_an_action_prints_its_own_help(group: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([group]) == 2
    out = capsys.readouterr().out
    assert out.startswith(f"usage: memories {group} ")  # it printed `memories --help` before


@pytest.mark.parametrize(("group", "action"), [("file", "exec"), ("backup", "verify"), ("autostart", "enable")])
def test_a_group_whose_action_is_required_names_the_actions(group: str, action: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([group]) == 2
    err = capsys.readouterr().err
    assert f"`memories {group}` needs one of:" in err and action in err
    assert f"`memories {group} --help`" in err


def test_another_commands_option_is_not_suggested_as_itself(capsys: pytest.CaptureFixture[str]) -> None:
    """`agent disconnect --project .` once said "unknown option '--project'; did you mean
    `--project`?" (an option of `agent connect`); `agent list --scope` is such a case now."""
    assert main(["agent", "list", "--scope", "read"]) == 2
    err = capsys.readouterr().err
    assert "did you mean" not in err
    assert "`memories agent list` has no option '--scope'; `memories agent list --help`" in err


def test_a_mistyped_option_still_gets_did_you_mean(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list", "--tga", "x"]) == 2
    assert "did you mean `--tag`?" in capsys.readouterr().err
