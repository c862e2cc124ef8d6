"""Issue 31: `unlock` at a terminal offers another try after a wrong password; `sudo` on a
locked vault says it is locked before asking for any password. Real pty, real engine."""

from __future__ import annotations

from tests.helpers import PASSWORD, Cli
from tests.terminal import run_in_terminal

WRONG = "not the vault password 1234"


def test_unlock_at_a_terminal_retries_after_a_wrong_password(vault: Cli) -> None:
    """A typo at the prompt gets "Wrong password; try again." and a new prompt; the right
    password then unlocks. The typed passwords never appear on the terminal."""
    vault.ok("lock")
    code, output = run_in_terminal(
        vault.command("unlock"),
        [("Vault password: ", WRONG), ("Vault password: ", PASSWORD)],  # the second prompt is the retry's
        vault.environ(),
    )
    assert code == 0, output
    assert output.index("Wrong password; try again.") < output.rindex("Vault password: "), output
    assert "Wrong password; try again." in output and "Unlocked." in output
    assert WRONG not in output and PASSWORD not in output
    assert vault.ok("status")["state"] == "unlocked"


def test_unlock_from_stdin_gets_one_try(vault: Cli) -> None:
    """Piped input is not a person at a terminal: one wrong password is one error, no prompt."""
    vault.ok("lock")
    proc = vault.run("unlock", "--password-stdin", "--json", input=WRONG + "\n")
    assert proc.returncode != 0 and '"wrong_password"' in proc.stdout
    assert "try again" not in proc.stderr


def test_sudo_on_a_locked_vault_says_locked_before_asking(vault: Cli) -> None:
    """`sudo` on a locked vault answers `locked` with the command to run, and never prompts."""
    vault.ok("lock")
    code, output = run_in_terminal(vault.command("sudo"), [], vault.environ(), timeout=30)
    assert code != 0, output
    assert "Vault password" not in output, output
    assert "locked" in output and "memories unlock" in output
    vault.stop()  # an engine that is not running is locked too
    proc = vault.run("sudo", "--json")
    assert proc.returncode != 0 and '"locked"' in proc.stdout
