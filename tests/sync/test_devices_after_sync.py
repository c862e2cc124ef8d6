"""`devices` after sync, and device names that stay distinct (issue 29).

"last seen" is the last completed sync with a device, not its last write; a device approved
under a name another device has is given a suffixed name and the approver is warned.
"""

from __future__ import annotations

from tests.helpers import PASSWORD, Cli
from tests.sync.support import C_PASSWORD, Listener, device_id, free_port, sync, token_for


def test_last_seen_is_the_last_sync_and_duplicate_names_are_suffixed(pair: tuple[Cli, Cli]) -> None:
    a, b = pair
    c = Cli(home=b.home.parent / "c")
    try:
        request = c.ok(
            "device", "request", "--approver", device_id(a), "--name", "laptop", "--password-stdin", input=C_PASSWORD + "\n"
        )
        a.sudo(PASSWORD)
        approved = a.ok("device", "approve", request["request"], "--yes")
        assert approved["name"] == "laptop (2)" and "laptop" in approved["warning"]
        joined = c.ok("device", "join", approved["approval"], "--password-stdin", input=C_PASSWORD + "\n")
        assert joined["name"] == "laptop"  # the name it asked for; the approver's list keeps them apart
        assert c.ok("whoami")["device_name"] == "laptop (2)"
        rows = {row["name"]: row for row in a.ok("devices")["devices"]}
        assert {"laptop", "laptop (2)"} <= set(rows)
        assert rows["laptop"]["last_seen_ms"] is None
        b.put("a write on B", "x")
        token = token_for(a, b)
        with Listener(a, free_port()).start() as listener:
            sync(b, listener.url, token)
        rows = {row["name"]: row for row in a.ok("devices")["devices"]}
        assert rows["laptop"]["last_seen_ms"] is not None and rows["laptop"]["last_write_ms"] is not None
        assert rows["laptop (2)"]["last_seen_ms"] is None
    finally:
        c.stop()
