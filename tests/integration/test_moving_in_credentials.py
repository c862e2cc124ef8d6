"""IM-2: every credential comes along, through the real CLI and daemon.

1Password 1PUX credential categories (Server, Database, API Credential, Wireless Router,
Email Account, a bank account's PIN) and password history; 1Password 7 CSV for Mac
(backslash-escaped quotes) and for Windows (extra columns); Bitwarden organisation exports
(collections, passkeys, password history, reprompt); KeePassXC CSV (recycle bin, root group).
The 1PUX is built here from 1Password's published 1PUX layout; the other samples are in
tests/data/moving/ (see its README for where each shape comes from).
"""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path
from typing import Any

from tests.cards.conftest import READ_BACK, clipboard, xdisplay
from tests.helpers import PASSWORD, Cli, raw, raw_error

__all__ = ["xdisplay"]  # the fixture, used by name

DATA = Path(__file__).resolve().parents[1] / "data" / "moving"


def _field(title: str, value: dict[str, Any], fid: str = "") -> dict[str, Any]:
    return {"title": title, "id": fid or title.lower(), "value": value, "guarded": False, "multiline": False}


def _item(category: str, title: str, fields: list[dict[str, Any]], **details: Any) -> dict[str, Any]:
    return {
        "uuid": title,
        "state": "active",
        "categoryUuid": category,
        "overview": {"title": title, "tags": []},
        "details": {"loginFields": [], "notesPlain": "", "sections": [{"title": "", "fields": fields}], **details},
    }


def _1pux(path: Path) -> None:
    items = [
        _item(
            "110",
            "Web server",
            [
                _field("URL", {"string": "ssh://web.example"}, "url"),
                _field("username", {"string": "deploy"}, "username"),
                _field("password", {"concealed": "op-server-canary"}, "password"),
                _field("admin console password", {"concealed": "op-admin-canary"}, "admin_console_password"),
            ],
            passwordHistory=[{"value": "op-server-old-canary", "time": 1700000000}],
        ),
        _item(
            "102",
            "Orders DB",
            [
                _field("server", {"string": "db.example"}, "hostname"),
                _field("port", {"string": "5432"}),
                _field("username", {"string": "orders"}, "username"),
                _field("password", {"concealed": "op-db-canary"}, "password"),
            ],
        ),
        _item("112", "Stripe key", [_field("credential", {"concealed": "op-api-canary"}, "credential")]),
        _item(
            "109",
            "Home Wi-Fi",
            [
                _field("network name", {"string": "home"}, "network_name"),
                _field("wireless network password", {"concealed": "op-wifi-canary"}, "wireless_password"),
            ],
        ),
        _item(
            "111",
            "Work mail",
            [
                _field("username", {"string": "li@example.cn"}, "pop_username"),
                _field("password", {"concealed": "op-mail-canary"}, "pop_password"),
            ],
        ),
        _item("101", "Bank", [_field("PIN", {"concealed": "op-bank-pin-canary"}, "pin")]),
        _item(
            "002",
            "Visa",
            [
                _field("cardholder name", {"string": "Li Si"}, "cardholder"),
                _field("number", {"creditCardNumber": "4111111111111111"}, "ccnum"),
                _field("verification number", {"concealed": "737"}, "cvv"),
                _field("expiry date", {"monthYear": 202712}, "expiry"),
            ],
        ),
        _item(
            "114",
            "Deploy key",
            [
                _field(
                    "private key",
                    {
                        "sshKey": {
                            "privateKey": "-----BEGIN OPENSSH PRIVATE KEY-----\nop-ssh-canary\n-----END OPENSSH PRIVATE KEY-----",
                            "metadata": {
                                "publicKey": "ssh-ed25519 AAAAC3Nz deploy",
                                "fingerprint": "SHA256:abc",
                                "keyType": "ed25519",
                            },
                        }
                    },
                    "private_key",
                )
            ],
        ),
        _item("004", "Me", [_field("first name", {"string": "Li"}, "firstname")]),
    ]
    doc = {"accounts": [{"attrs": {"name": "t"}, "vaults": [{"attrs": {"name": "Work"}, "items": items}]}]}
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("export.data", json.dumps(doc))
    path.write_bytes(buffer.getvalue())


def _logins(vault: Cli) -> dict[str, dict[str, Any]]:
    return {item["title"]: item for item in vault.ok("login", "list")["items"]}


def test_im2_1pux_credential_items_become_logins(vault: Cli, tmp_path: Path, xdisplay: str) -> None:
    """IM-2: 1Password Server, Database, API Credential, Wi-Fi, Email and a PIN come in with their fields."""
    path = tmp_path / "export.1pux"
    _1pux(path)
    done = vault.ok("import", "1password", str(path))
    assert done["created"] == 8, done
    assert any("Me" in s and "identity" in s for s in done["skipped"])
    logins = _logins(vault)
    server = logins["Web server"]
    assert server["username"] == "deploy" and server["urls"] == ["ssh://web.example"]
    assert "1Password server" in server["tags"] and "Work" in server["tags"]
    shown = vault.ok("login", "show", server["id"])
    assert shown["protected"]["fields"] == ["admin console password"]
    # Password history is history (issue 33): an earlier revision of the credential, dated as 1Password says.
    history = vault.ok("login", "history", server["id"])
    assert [(row["number"], row["replaced"]) for row in history["earlier"]] == [(1, "2023-11-14T22:13:20Z")]
    assert "op-server-old-canary" not in json.dumps(history) + json.dumps(shown)
    db = vault.ok("login", "show", logins["Orders DB"]["id"])
    assert db["meta"]["urls"] == "db.example" and db["meta"]["x_port"] == "5432"
    assert logins["Orders DB"]["features"] == ["password"]
    assert logins["Work mail"]["username"] == "li@example.cn"
    assert logins["Home Wi-Fi"]["features"] == ["password"]
    assert vault.ok("login", "show", logins["Bank"]["id"])["protected"]["fields"] == ["PIN"]
    # A credit card and an SSH key are credentials too: their secrets protected, the rest visible.
    visa = vault.ok("login", "show", logins["Visa"]["id"])
    assert visa["protected"]["fields"] == ["number", "verification number"]
    assert visa["meta"]["x_cardholder_name"] == "Li Si" and visa["meta"]["x_expiry_date"] == "2027-12"
    assert "1Password credit card" in visa["tags"]
    ssh = vault.ok("login", "show", logins["Deploy key"]["id"])
    assert ssh["protected"]["fields"] == ["private key"]
    assert ssh["meta"]["x_public_key"] == "ssh-ed25519 AAAAC3Nz deploy" and ssh["meta"]["x_fingerprint"] == "SHA256:abc"
    assert "4111111111111111" not in json.dumps(visa) and "op-ssh-canary" not in json.dumps(ssh)
    assert vault.ok("search", "4111111111111111")["results"] == [] and vault.ok("search", "op-ssh-canary")["results"] == []
    vault.env.update({"DISPLAY": xdisplay, "MEMORIES_CLIPBOARD": "xclip"})
    vault.sudo()
    expected = {
        ("Stripe key", None): "op-api-canary",
        ("Home Wi-Fi", None): "op-wifi-canary",
        ("Bank", "PIN"): "op-bank-pin-canary",
        ("Visa", "number"): "4111111111111111",
        ("Visa", "verification number"): "737",
    }
    for (title, name), value in expected.items():
        ref = logins[title]["id"] + (f":{name}" if name else "")
        vault.ok("copy", ref, "--clear-after", READ_BACK)
        assert clipboard(xdisplay) == value, title
    vault.ok("login", "copy-password", server["id"], "--previous", "1", "--clear-after", READ_BACK)
    assert clipboard(xdisplay) == "op-server-old-canary"
    vault.ok("login", "copy-password", server["id"], "--clear-after", READ_BACK)
    assert clipboard(xdisplay) == "op-server-canary"
    missing = vault.err("login", "copy-password", server["id"], "--previous", "2")
    assert missing["code"] == "nothing_to_copy" and "only 1 earlier password" in missing["message"]


def test_im2_bitwarden_org_collections_history_passkeys_reprompt(vault: Cli, xdisplay: str) -> None:
    """IM-2: collections as tags, password history as history, passkeys listed as skipped, reprompt kept."""
    done = vault.ok("import", "bitwarden", str(DATA / "bitwarden-org.json"))
    assert done["created"] == 1
    assert any("passkey 1 for 'db.example'" in s for s in done["skipped"])
    login = _logins(vault)["Prod DB"]
    assert set(login["tags"]) == {"Engineering/Databases", "On-call"}
    assert "reprompt" in login["features"]
    shown = vault.ok("login", "show", login["id"])
    assert "fields" not in shown["protected"]
    history = vault.ok("login", "history", login["id"])["earlier"]
    assert [row["replaced"] for row in history] == ["2025-09-01T00:00:00.000Z", "2025-06-01T00:00:00.000Z"]
    assert "bw-passkey-canary" not in json.dumps(done) + json.dumps(shown)
    assert "bw-org-canary-old" not in json.dumps(history)
    vault.env.update({"DISPLAY": xdisplay, "MEMORIES_CLIPBOARD": "xclip"})
    # Re-prompt: each read of its secrets spends a fresh `sudo`; ordinary elevation is not enough.
    for number, value in ((1, "bw-org-canary-old2"), (2, "bw-org-canary-old1")):
        vault.sudo()
        vault.ok("login", "copy-password", login["id"], "--previous", str(number), "--clear-after", READ_BACK)
        assert clipboard(xdisplay) == value
        again = vault.err("login", "copy-password", login["id"], "--clear-after", READ_BACK)
        assert again["code"] == "reprompt_required" and "memories sudo" in again["message"]
        assert "bw-org-canary" not in json.dumps(again)


def test_im2_1password7_mac_csv_backslash_quotes(vault: Cli, tmp_path: Path, xdisplay: str) -> None:
    """IM-2: 1Password 7 for Mac's \\" escapes are read as quotes, not mangled into one entry."""
    done = vault.ok("import", "1password", str(DATA / "1password7-mac.csv"))
    assert done["created"] == 2
    logins = _logins(vault)
    assert set(logins) == {'Router "home"', "Mail"}
    assert vault.ok("login", "show", logins['Router "home"']["id"])["body"] == 'said "reset" twice'
    vault.env.update({"DISPLAY": xdisplay, "MEMORIES_CLIPBOARD": "xclip"})
    vault.sudo()
    vault.ok("copy", logins['Router "home"']["id"], "--clear-after", READ_BACK)
    assert clipboard(xdisplay) == 'op7-mac-"canary"-19'


def test_im2_1password7_windows_csv_keeps_extra_columns(vault: Cli) -> None:
    """IM-2: the Windows variant's extra columns (Secret Key among them) are kept; secret ones protected."""
    done = vault.ok("import", "1password", str(DATA / "1password7-windows.csv"))
    assert done["created"] == 1
    login = next(iter(_logins(vault).values()))
    shown = vault.ok("login", "show", login["id"])
    assert shown["meta"]["x_member_name"] == "Li Si"
    assert shown["protected"]["fields"] == ["pin", "secret key"]
    assert "op7win-secretkey" not in json.dumps(shown)


def test_im2_csv_that_fits_no_quoting_is_refused(vault: Cli, tmp_path: Path) -> None:
    """IM-2: a CSV whose rows do not fit the header is refused with the reason, never imported mangled."""
    path = tmp_path / "bad.csv"
    path.write_text('title,username,password\n"a \\"b",u,p,extra,more\n', "utf-8")
    error = vault.err("import", "1password", str(path))
    assert error["code"] == "invalid_input" and "Nothing was imported" in error["message"]
    assert _logins(vault) == {}


def test_im2_keepassxc_csv_matches_the_xml_path(vault: Cli) -> None:
    """IM-2: KeePassXC CSV: recycle-bin entries are skipped, root entries get no database-name tag."""
    done = vault.ok("import", "keepassxc", str(DATA / "keepassxc.csv"))
    assert done["created"] == 2
    assert any("Old bank" in s and "recycle bin" in s for s in done["skipped"])
    logins = _logins(vault)
    assert logins["Root entry"]["tags"] == [] and logins["Forum"]["tags"] == ["Internet"]


def test_im2_kdbx_entry_history_becomes_password_history(vault: Cli, tmp_path: Path) -> None:
    """IM-2: a KeePass entry's earlier versions bring their passwords as the login's history, newest first."""
    from pykeepass import create_database

    db = tmp_path / "history.kdbx"
    kp = create_database(str(db), password="kdbx-pass")
    entry = kp.add_entry(kp.root_group, "Router", "admin", "kp-old-1-canary")
    for password in ("kp-old-2-canary", "kp-old-2-canary", "kp-current-canary"):
        entry.save_history()  # KeePass keeps the whole entry before each change; one change here was not a password's
        entry.password = password
    kp.save()
    done = vault.ok("import", "keepassxc", str(db), "--kdbx-password-stdin", input="kdbx-pass\n")
    assert done["created"] == 1
    login = _logins(vault)["Router"]
    history = vault.ok("login", "history", login["id"])["earlier"]
    assert [row["number"] for row in history] == [1, 2]  # the unchanged version is not a second entry
    assert all(row["replaced"] and row["replaced"][:2] == "20" for row in history), history
    assert "canary" not in json.dumps(history)
    raw(vault, {"op": "sudo", "password": PASSWORD})
    read = [raw(vault, {"op": "login_secret", "id": login["id"], "what": "password", "previous": n})["secret"] for n in (0, 1, 2)]
    assert read == ["kp-current-canary", "kp-old-2-canary", "kp-old-1-canary"]
    refused = raw_error(vault, {"op": "login_secret", "id": login["id"], "what": "otp", "previous": 1})
    assert refused.code == "invalid_input"


def test_im2_reprompt_login_asks_before_every_read_on_every_path(vault: Cli) -> None:
    """IM-2: a Bitwarden re-prompt login needs a fresh `sudo` for each read: copy, `run --env`, and
    the login's own password; an ordinary login is read on the same elevation as often as needed."""
    vault.ok("import", "bitwarden", str(DATA / "bitwarden-org.json"))
    prod = _logins(vault)["Prod DB"]["id"]
    plain = vault.ok("login", "new", "--title", "Plain", "--username", "u", "--password-stdin", input="plain-canary\n")["id"]
    raw(vault, {"op": "sudo", "password": PASSWORD})  # this process's elevation: the reads below are its own
    reads = [
        {"op": "login_secret", "id": prod, "what": "password"},
        {"op": "credential_copy", "ref": prod},
        {"op": "run_bound_prepare", "env": {"DB": f"card:{prod}"}},
    ]
    assert raw(vault, reads[0])["secret"] == "bw-org-canary-now"  # the first read spends the fresh `sudo`
    for body in reads:
        refused = raw_error(vault, body)
        assert refused.code == "reprompt_required", body["op"]
        assert "bw-org-canary" not in refused.message
    for _ in range(3):
        assert raw(vault, {"op": "login_secret", "id": plain, "what": "password"})["secret"] == "plain-canary"
    for body in reads:
        raw(vault, {"op": "sudo", "password": PASSWORD})
        answer = raw(vault, body)
        assert answer, body["op"]
        assert raw_error(vault, body).code == "reprompt_required", body["op"]
