"""A group command typed alone (`memories login`) shows what may follow it, not the top-level help."""

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
