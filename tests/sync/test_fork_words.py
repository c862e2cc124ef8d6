"""After a policy fork is resolved, the device whose branch lost is told what happened (issue 29;
SY-3), over real daemons: its next sync succeeds at once (no failure first), the answer counts the
policy changes of this device that the Owner's resolution discarded, and the words say what to
do. Two devices of one user (both may change the policy), each changes it while apart."""

from __future__ import annotations

from tests.helpers import Cli
from tests.sync.support import B_PASSWORD, OTHER_USER, Listener, free_port, sync, sync_err, titles, token_for


def test_the_device_whose_policy_change_lost_the_fork_is_told(pair: tuple[Cli, Cli]) -> None:
    a, b = pair
    a.sudo()
    a.ok("vault", "rotate")
    b.sudo(B_PASSWORD)
    b.ok("vault", "member", "add", OTHER_USER, "--role", "reader")
    b.put("written on b's branch", "b-branch-body")
    token = token_for(a, b)
    with Listener(a, free_port()).start() as listener:
        assert sync_err(b, listener.url, token)["code"] == "policy_fork"
        [fork] = a.ok("vault", "forks")["forks"]
        a.sudo()
        resolved = a.ok("vault", "fork", "resolve", "--keep", str(fork["ours"]["head"])[:16])
        assert resolved["discarded"] == 1
        # The first sync after the resolution succeeds (exit 0, nothing refused on either side),
        # counts what was dropped, and b's write on its branch reaches a with it.
        result = sync(b, listener.url, token)
    [report] = [r for r in result["vaults"] if r.get("discarded_policies")]
    assert report["discarded_policies"] == 1 and result["synced"] is True
    assert not any("error" in r for r in [*result["vaults"], *result["peer_vaults"]]), result
    assert "written on b's branch" in titles(a)
    members = {str(m["user"]) for m in b.ok("vault", "members")["members"]}
    assert OTHER_USER not in members  # b's change is gone, as the words said
    assert a.ok("vault", "forks")["forks"] == [] and b.ok("vault", "forks")["forks"] == []


def test_the_words_after_a_resolution_name_the_discarded_change(pair: tuple[Cli, Cli]) -> None:
    a, b = pair
    a.sudo()
    a.ok("vault", "rotate")
    b.sudo(B_PASSWORD)
    b.ok("vault", "member", "add", OTHER_USER, "--role", "reader")
    token = token_for(a, b)
    with Listener(a, free_port()).start() as listener:
        sync_err(b, listener.url, token)
        [fork] = a.ok("vault", "forks")["forks"]
        a.sudo()
        a.ok("vault", "fork", "resolve", "--keep", str(fork["ours"]["head"])[:16])
        proc = b.run("sync", listener.url, "--token-stdin", input=token + "\n", timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "policy change(s) made on this device were discarded by the Owner's fork resolution" in proc.stdout
    assert "make them again if they are still wanted" in proc.stdout
