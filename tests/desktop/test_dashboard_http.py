"""DT-5 / API-6: the dashboard's checks, driven over real HTTP against a real engine."""

from __future__ import annotations

import os
import re
import signal
import socket
from typing import Any

import pytest

from tests.desktop.support import Dashboard
from tests.helpers import Cli

CANARY = "CANARY-private-meta-5d1e"


def _card(module_vault: Cli, title: str = "first") -> dict[str, Any]:
    put = module_vault.put(title, "body text", "tag-a")
    return module_vault.ok("get", put["id"])


def test_status_needs_the_token(dashboard: Dashboard) -> None:
    """DT-5: per-launch token, constant-time compared; missing or wrong is refused."""
    for token in (None, "", "wrong", dashboard.token[:-1], dashboard.token + "x"):
        code, _, body = dashboard.request("GET", "/api/status", token=token)
        assert code == 401, token
        assert body["error"]["code"] == "dashboard_unauthorized"
    code, _, body = dashboard.request("GET", "/api/status", token=None, headers={"Authorization": dashboard.token})
    assert code == 401  # the token alone, without the Bearer scheme
    # The right token under another scheme (issue 27: a removed scheme check must fail a test).
    for scheme in ("Basic", "basic", "Digest", "Token", "Bearerx"):
        code, _, body = dashboard.request(
            "GET", "/api/status", token=None, headers={"Authorization": f"{scheme} {dashboard.token}"}
        )
        assert code == 401 and body["error"]["code"] == "dashboard_unauthorized", scheme
    # Schemes are case-insensitive (RFC 9110 §11.1).
    code, _, _ = dashboard.request("GET", "/api/status", token=None, headers={"Authorization": f"bearer {dashboard.token}"})
    assert code == 200
    assert dashboard.request("GET", "/api/status")[0] == 200


def test_wrong_host_is_refused_everywhere(dashboard: Dashboard) -> None:
    """DT-5: DNS rebinding: a page served under another host name gets nothing."""
    for host in (f"evil.example:{dashboard.port}", "127.0.0.1", f"127.0.0.1:{dashboard.port + 1}", f"[::1]:{dashboard.port}"):
        for path in ("/", "/static/app.js", "/api/status"):
            code, _, body = dashboard.request("GET", path, host=host)
            assert code == 403, (host, path)
            assert body["error"]["code"] == "dashboard_forbidden"
    assert dashboard.request("GET", "/api/status", host=f"localhost:{dashboard.port}")[0] == 200


def test_cross_site_post_changes_nothing(dashboard: Dashboard, module_vault: Cli) -> None:
    """DT-5: Origin checked on every state-changing request; refused saves change nothing."""
    card = _card(module_vault)
    save = {"base": card["revision"], "fields": {"title": "hijacked"}}
    cases: list[dict[str, Any]] = [
        {"origin": "http://evil.example"},
        {"origin": None},
        {"origin": f"http://127.0.0.1:{dashboard.port + 1}"},
        {"origin": "null"},
        {"headers": {"Sec-Fetch-Site": "cross-site"}},
        {"token": None},
    ]
    for case in cases:
        code, _, _ = dashboard.request("POST", f"/api/cards/{card['id']}", save, **case)
        assert code in (401, 403), case
        code, _, _ = dashboard.request("POST", "/api/lock", {}, **case)
        assert code in (401, 403), case
    after = module_vault.ok("get", card["id"])
    assert (after["title"], after["revision"]) == ("first", card["revision"])
    assert module_vault.ok("status")["state"] == "unlocked"


def test_headers_and_no_inline_script(dashboard: Dashboard) -> None:
    """DT-5: strict CSP on every response; the page has no inline script or style."""
    for path in ("/", "/api/status", "/api/nothing-here"):
        _, headers, _ = dashboard.request("GET", path)
        csp = headers["content-security-policy"]
        assert "default-src 'none'" in csp and "script-src 'self'" in csp and "unsafe-inline" not in csp
        assert headers["x-content-type-options"] == "nosniff"
        assert headers["x-frame-options"] == "DENY"
    _, _, page = dashboard.request("GET", "/")
    html = page.decode()
    assert not re.search(r"<script(?![^>]*\bsrc=)[^>]*>", html), "inline script"
    assert "<style" not in html and not re.search(r"\son[a-z]+=", html), "inline style or handler"


def test_loopback_only(dashboard: Dashboard) -> None:
    """DT-5: bound to 127.0.0.1 only (another loopback address is refused)."""
    assert dashboard.url.startswith("http://127.0.0.1:")
    with pytest.raises(OSError), socket.create_connection(("127.0.0.2", dashboard.port), timeout=5):
        pass


def test_fixed_surface_no_arbitrary_requests(dashboard: Dashboard, module_vault: Cli) -> None:
    """API-6: no generic request route, no unlock, no quit without a tray host."""
    for method, path, body in (
        ("POST", "/api/request", {"op": "lock"}),
        ("POST", "/api/unlock", {"password": "x"}),
        ("POST", "/api/sudo", {"password": "x"}),
        ("POST", "/api/quit", {}),
        ("GET", "/api/credentials", None),
        ("DELETE", "/api/cards/abcdef", None),
    ):
        code, _, _ = dashboard.request(method, path, body)
        assert code in (404, 405), (method, path)
    assert module_vault.ok("status")["state"] == "unlocked"


def test_save_rejects_fields_outside_the_allowlist(dashboard: Dashboard, module_vault: Cli) -> None:
    """DT-5: only allowlisted fields; bad input gets a typed error and changes nothing."""
    card = _card(module_vault)
    path = f"/api/cards/{card['id']}"
    bad: list[Any] = [
        ({"base": card["revision"], "fields": {"meta": {"k": "v"}}}, "unknown_field"),
        ({"base": card["revision"], "fields": {"kind": "credential"}}, "unknown_field"),
        ({"base": card["revision"], "fields": {"title": "x"}, "op": "delete"}, "unknown_field"),
        ({"fields": {"title": "x"}}, "invalid_input"),
        ({"base": "not-hex", "fields": {"title": "x"}}, "invalid_input"),
        ({"base": card["revision"], "fields": {"title": ""}}, "invalid_input"),
        ({"base": card["revision"], "fields": {"tags": "notalist"}}, "invalid_input"),
        ({"base": card["revision"], "fields": {"title": "x" * 1001}}, "invalid_input"),
        (b"{not json", "invalid_input"),
        ([1, 2], "invalid_input"),
    ]
    for body, code in bad:
        status, _, answer = dashboard.request("POST", path, body)
        assert status == 400, body
        assert answer["error"]["code"] == code, (body, answer)
    huge = {"base": card["revision"], "fields": {"body": "x" * (3 * 1024 * 1024)}}
    status, _, answer = dashboard.request("POST", path, huge)
    assert status == 413, "request bodies are bounded"
    status, _, answer = dashboard.request("POST", "/api/cards/..%2f..%2fetc", {"base": card["revision"]})
    assert status in (400, 404)
    status, _, answer = dashboard.request("GET", "/api/cards?kind=credential")
    assert status == 400 and answer["error"]["code"] == "invalid_input"
    after = module_vault.ok("get", card["id"])
    assert after["revision"] == card["revision"]
    assert len(module_vault.ok("history", card["id"])["revisions"]) == 1


def test_edit_and_stale_save_shows_conflict(dashboard: Dashboard, module_vault: Cli) -> None:
    """DT-5, DT-7: a save is an edit with the loaded base; a stale base is refused, or kept as a
    conflict when the user asks for both versions; never an overwrite."""
    card = _card(module_vault)
    path = f"/api/cards/{card['id']}"
    status, _, loaded = dashboard.request("GET", path)
    assert status == 200
    assert loaded["fields"] == {"title": "first", "body": "body text", "tags": ["tag-a"]}
    status, _, saved = dashboard.request("POST", path, {"base": loaded["revision"], "fields": {"title": "second"}})
    assert status == 200 and saved["conflict"] is False
    assert module_vault.ok("get", card["id"])["title"] == "second"
    # DT-7: a second page still holding the first revision is refused by the engine's revision
    # check, and nothing is written.
    status, _, refused = dashboard.request("POST", path, {"base": loaded["revision"], "fields": {"title": "third"}})
    assert status == 409 and refused["error"]["code"] == "stale_base"
    assert module_vault.ok("get", card["id"])["revision"] == saved["revision"]
    # Told so, the user keeps both versions: a conflict, never an overwrite.
    both = {"base": loaded["revision"], "fields": {"title": "third"}, "keep_both": True}
    status, _, stale = dashboard.request("POST", path, both)
    assert status == 200 and stale["conflict"] is True
    now = module_vault.ok("get", card["id"])
    assert now["conflict"] is True and now["heads"] == 2
    assert {h["title"] for h in now["head_contents"]} == {"second", "third"}
    # While in conflict, further saves are refused (resolve with the CLI).
    status, _, answer = dashboard.request("POST", path, {"base": saved["revision"], "fields": {"title": "fourth"}})
    assert status == 409 and answer["error"]["code"] == "conflict"
    status, _, listed = dashboard.request("GET", "/api/cards?kind=memory")
    assert [i["conflict"] for i in listed["items"] if i["id"] == card["id"]] == [True]


def test_private_fields_never_leave_the_engine(dashboard: Dashboard, module_vault: Cli) -> None:
    """DT-5: the dashboard never shows a value outside its allowlist (canary in private meta)."""
    put = module_vault.ok("put", "--title", "with private", "--body", "visible", "--meta", f"private={CANARY}")
    assert CANARY in str(module_vault.ok("get", put["id"]))
    seen = []
    for path in ("/api/cards?kind=memory", f"/api/cards/{put['id']}", "/api/status"):
        code, _, body = dashboard.request("GET", path)
        assert code == 200
        seen.append(str(body))
    assert CANARY not in "".join(seen)
    assert "visible" in seen[1]


def test_hung_engine_does_not_block_the_dashboard(dashboard: Dashboard, module_vault: Cli) -> None:
    """DT-2: a SIGSTOPped engine shows as "not responding"; the status page keeps answering."""
    pid = module_vault.daemon_pid()
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)
    try:
        data = dashboard.wait_state("not_responding")
        assert data["probe"]["error"] == "timeout"
        assert dashboard.request("GET", "/")[0] == 200
    finally:
        os.kill(pid, signal.SIGCONT)
    dashboard.wait_state("unlocked", "attention")


def test_lock_from_the_dashboard(dashboard: Dashboard, module_vault: Cli) -> None:
    """DT-5: Lock now locks the vault; the dashboard has no way to unlock it again."""
    code, _, body = dashboard.request("POST", "/api/lock", {})
    assert (code, body) == (200, {"locked": True})
    assert module_vault.ok("status") == {"state": "locked"}
    data = dashboard.wait_state("locked")
    assert data["probe"]["status"] == {"state": "locked"}
    code, _, body = dashboard.request("GET", "/api/cards?kind=memory")
    assert code == 423 and body["error"]["code"] == "locked"
    module_vault.unlock()
    dashboard.wait_state("unlocked", "attention")


def test_protected_cards_and_secrets_never_shown(dashboard: Dashboard, module_vault: Cli) -> None:
    """DT-5/CD-3/CD-7: no credential value or protected card's secret ever reaches the dashboard,
    through any route: lists, the editor, history, every diff, links and the protected views."""
    token = "CANARY-token-3b7e91"
    moved = "CANARY-moved-secret-c4d2"
    prot = module_vault.ok("protected", "new", "--title", "Prot card", "--account", "acc", "--token-stdin", input=token)
    mem = module_vault.put("holds a secret", f"api key is {moved} here")
    module_vault.ok("secret", "protect", mem["id"], "--label", "apikey", "--value-stdin", input=moved)
    seen = []
    for kind in ("memory", "knowledge", "brain", "persona"):
        code, _, body = dashboard.request("GET", f"/api/cards?kind={kind}")
        assert code == 200
        seen.append(str(body))
        assert all(item["kind"] == kind for item in body["items"])
    code, _, body = dashboard.request("GET", f"/api/cards/{prot['id']}")
    assert code == 400 and body["error"]["code"] == "invalid_input"
    seen.append(str(body))
    code, _, body = dashboard.request("POST", f"/api/cards/{prot['id']}", {"base": prot["revision"], "fields": {"title": "x"}})
    assert code == 400
    code, _, body = dashboard.request("GET", f"/api/cards/{mem['id']}")
    assert code == 200 and "{{secret:apikey}}" in body["fields"]["body"]
    seen.append(str(body))
    # Saving through the dashboard keeps the reference (the engine carries the secret map).
    code, _, saved = dashboard.request(
        "POST", f"/api/cards/{mem['id']}", {"base": body["revision"], "fields": {"title": "renamed"}}
    )
    assert code == 200 and saved["conflict"] is False
    # The read-only routes too (issue 17): history, every diff, links, the protected views.
    revisions = [r["revision"] for r in module_vault.ok("history", mem["id"])["revisions"]]
    paths = [f"/api/cards/{mem['id']}/history", f"/api/cards/{mem['id']}/links", f"/api/cards/{prot['id']}/history"]
    paths += [
        f"/api/cards/{mem['id']}/diff?to={new}" + (f"&from={old}" if old else "")
        for old in [None, *revisions]
        for new in revisions
    ]
    paths += ["/api/protected", "/api/protected?kind=protected", "/api/protected?kind=credential", f"/api/protected/{prot['id']}"]
    for path in paths:
        code, _, body = dashboard.request("GET", path)
        assert code == 200, (path, body)
        seen.append(str(body))
    text = "".join(seen)
    assert "{{secret:apikey}}" in text
    assert token not in text and moved not in text
    assert module_vault.ok("get", prot["id"])["title"] == "Prot card"


@pytest.mark.parametrize(
    "path",
    ["/api/cards", "/api/cards/{id}", "/api/cards/{id}/resolve", "/api/tickets/{ticket}/approve"],
)
@pytest.mark.parametrize("nested", [b"[" * 100_000 + b"]" * 100_000, b'{"a":' * 50_000 + b"1" + b"}" * 50_000])
def test_deeply_nested_json_is_a_typed_400_with_the_security_headers(
    dashboard: Dashboard, module_vault: Cli, path: str, nested: bytes
) -> None:
    """DT-5, API-8, issue 27: a body nested beyond the JSON decoder's depth on any POST route
    that reads one answers 400 invalid_input with the usual headers (it was a bare 500)."""
    card = _card(module_vault, "nested")
    before = module_vault.ok("status")["assets"]
    target = path.format(id=card["id"], ticket="a" * 16)  # well-formed; no such ticket is needed
    code, headers, body = dashboard.request("POST", target, nested)
    assert code == 400, body
    assert body["error"]["code"] == "invalid_input" and "nested too deeply" in body["error"]["message"]
    assert "default-src 'none'" in headers["content-security-policy"]
    assert headers["x-content-type-options"] == "nosniff" and headers["cache-control"] == "no-store"
    assert module_vault.ok("status")["assets"] == before
