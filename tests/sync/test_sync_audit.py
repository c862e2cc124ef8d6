"""`memories audit` on one device lists what the user's other devices did (issue 14; AU-1, SY-1).

Merge stores a peer device's verified audit entries as ``peer_audit`` records; the audit view
reads them with this device's own, newest first, naming the device. Two real engines.
"""

from __future__ import annotations

from pathlib import Path

from tests.helpers import PASSWORD
from tests.sync.support import B_PASSWORD, Listener, device_id, free_port, make_pair, sync, token_for


def test_audit_shows_entries_written_on_the_other_device(tmp_path: Path) -> None:
    """AU-1 across devices: B's put reaches A's audit view after a sync, attributed to B by
    name and ID, in time order with A's own entries; B's view shows A's entries likewise."""
    a, b = make_pair(tmp_path)
    try:
        note = b.put("written on B", "b")
        token = token_for(a, b)
        with Listener(a, free_port()).start() as listener:
            sync(b, listener.url, token)
        a.sudo(PASSWORD)
        entries = a.ok("audit", "--limit", "1000")["entries"]
        on_b = [e for e in entries if e["device"] == device_id(b)]
        put = [e for e in on_b if e["op"] == "put" and any(x["id"] == note["id"] for x in e["assets"])]
        assert len(put) == 1 and put[0]["who"].endswith(" on laptop"), on_b
        assert put[0]["assets"][0]["title"] == "written on B"
        assert any(e["device"] is None and e["op"] == "sync_token_new" for e in entries)
        times = [e["ts_ms"] for e in entries]
        assert times == sorted(times, reverse=True)
        b.sudo(B_PASSWORD)
        on_a = [e for e in b.ok("audit", "--limit", "1000")["entries"] if e["device"] == device_id(a)]
        assert any(e["op"] == "sync_token_new" for e in on_a)
    finally:
        a.stop()
        b.stop()
