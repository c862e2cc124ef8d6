"""Issue 27, item 6: a protected item's page offers only its own commands.

Opening a login after a card with protected values must not leave that card's block (its
`memories sudo && memories copy ID:LABEL` lines) on screen; the one-time-code line shows only
for a login that has a TOTP, and every command whose operation needs elevation starts with
`memories sudo &&` (the table of elevated operations is tests/integration/test_elevation_table.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.desktop.browser import run_in_browser
from tests.desktop.support import Dashboard, start_dashboard, stop_process
from tests.helpers import Cli

OTP_URI = "otpauth://totp/Mail:ana?secret=JBSWY3DPEHPK3PXP"


@pytest.fixture(scope="module")
def page_vault(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("commands")
    cli = Cli(home=tmp / "home")
    cli.init()
    dash = None
    try:
        keyed = cli.ok("card", "new", "--type", "knowledge", "--title", "Deploy notes", "--body", "use sekrit-value-93 here")
        cli.ok("secret", "protect", keyed["id"], "--label", "deploy", "--value-stdin", input="sekrit-value-93")
        plain = cli.ok("login", "new", "--title", "Bank", "--username", "ana", "--password-stdin", input="pw-1\n")
        with_otp = cli.ok("login", "new", "--title", "Mail", "--password-stdin", "--totp-uri-stdin", input=f"pw-2\n{OTP_URI}\n")
        token = cli.ok("protected", "new", "--title", "Token only", "--token-stdin", input="tok-abcdef-1\n")
        otp_card = cli.ok("protected", "new", "--title", "OTP only", "--otp-stdin", input=OTP_URI + "\n")
        dash = start_dashboard(cli, tmp / "dashboard.log")
        dash.wait_state("unlocked", "attention")
        yield {"cli": cli, "dash": dash, "keyed": keyed, "plain": plain, "otp": with_otp, "token": token, "otp_card": otp_card}
    finally:
        if dash is not None:
            stop_process(dash.proc)
        cli.stop()


def _commands(dash: Dashboard, item_id: str) -> list[str]:
    code, _, body = dash.request("GET", f"/api/protected/{item_id}")
    assert code == 200, body
    return [c["command"] for c in body["commands"]]


def test_commands_follow_what_the_item_holds_and_name_sudo(page_vault: dict[str, Any]) -> None:
    dash: Dashboard = page_vault["dash"]
    plain, otp = page_vault["plain"]["short_id"], page_vault["otp"]["short_id"]
    assert _commands(dash, page_vault["plain"]["id"]) == [
        f"memories sudo && memories login copy-password {plain}",
        f"memories login copy-username {plain}",
    ]
    assert _commands(dash, page_vault["otp"]["id"]) == [
        f"memories sudo && memories login copy-password {otp}",
        f"memories sudo && memories login copy-otp {otp}",
    ]
    token, otp_card = page_vault["token"]["short_id"], page_vault["otp_card"]["short_id"]
    assert _commands(dash, page_vault["token"]["id"]) == [f"memories sudo && memories copy {token}"]
    assert _commands(dash, page_vault["otp_card"]["id"]) == [
        f"memories sudo && memories copy {otp_card}",
        f"memories otp {otp_card}",
    ]


def test_a_login_opened_after_a_card_with_protected_values_shows_only_its_own(page_vault: dict[str, Any]) -> None:
    dash: Dashboard = page_vault["dash"]
    keyed, plain = page_vault["keyed"], page_vault["plain"]

    async def scenario(page: Any) -> None:
        await page.wait_for_selector(f"#card-list button[data-id='{keyed['id']}']")
        await page.click(f"#card-list button[data-id='{keyed['id']}']")
        await page.wait_for_selector("#item-secrets:not([hidden])")
        shown = await page.text_content("#item-secret-list") or ""
        assert f"memories sudo && memories copy {keyed['short_id']}:deploy" in shown
        await page.click("#protected-filter button[data-kind='login']")
        await page.wait_for_selector(f"#card-list button[data-id='{plain['id']}']")
        await page.click(f"#card-list button[data-id='{plain['id']}']")
        await page.wait_for_selector("#locked:not([hidden]) .command code")
        assert await page.is_hidden("#item-secrets"), "the previous card's protected values are still shown"
        assert await page.locator("#item-secret-list li").count() == 0
        commands = await page.eval_on_selector_all("#locked-commands code", "cs => cs.map(c => c.textContent)")
        assert commands == [
            f"memories sudo && memories login copy-password {plain['short_id']}",
            f"memories login copy-username {plain['short_id']}",
        ]
        assert keyed["short_id"] not in (await page.text_content("#editor") or "")

    run_in_browser(dash.url, scenario)


def test_page_never_holds_a_secret_value(page_vault: dict[str, Any]) -> None:
    dash: Dashboard = page_vault["dash"]
    seen = "".join(
        str(dash.request("GET", f"/api/protected/{page_vault[k]['id']}")[2]) for k in ("plain", "otp", "token", "otp_card")
    )
    for secret in ("pw-1", "pw-2", "tok-abcdef-1", "JBSWY3DPEHPK3PXP", "sekrit-value-93"):
        assert secret not in seen


def test_im2_a_logins_protected_fields_are_offered_by_name_only(page_vault: dict[str, Any], tmp_path: Path) -> None:
    """IM-2: an imported login's protected fields (a PIN, a "Section: answer") are offered as
    `memories copy ID:NAME` commands by name; the page never holds their values."""
    import json

    cli: Cli = page_vault["cli"]
    dash: Dashboard = page_vault["dash"]
    export = tmp_path / "bw.json"
    fields = [{"name": "PIN", "value": "pin-value-5521", "type": 1}, {"name": "Security: answer", "value": "ans-77", "type": 1}]
    item = {"type": 1, "name": "Imported bank", "login": {"username": "ana2"}, "fields": fields}
    export.write_text(json.dumps({"encrypted": False, "folders": [], "items": [item]}), "utf-8")
    cli.ok("import", "bitwarden", str(export))
    login = next(i for i in cli.ok("login", "list")["items"] if i["title"] == "Imported bank")
    code, _, body = dash.request("GET", f"/api/protected/{login['id']}")
    assert code == 200, body
    short = login["short_id"]
    assert [c["command"] for c in body["commands"]] == [
        f"memories login copy-username {short}",
        f"memories sudo && memories copy {short}:PIN",
        f"memories sudo && memories copy '{short}:Security: answer'",
    ]
    assert "pin-value-5521" not in str(body) and "ans-77" not in str(body)
