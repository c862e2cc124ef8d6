"""Windows named-pipe helpers, tested on any platform (SPEC API-2)."""

from __future__ import annotations

import asyncio
import sys

import pytest

from engine.errors import MemoriesError
from engine.ipc.windows_pipe import PIPE_PREFIX, owner_only_sddl, pipe_name, pipe_request, serve_named_pipe

SID = "S-1-5-21-3623811015-3361044348-30300820-1013"


def test_owner_only_sddl() -> None:
    """API-2: protected DACL; deny network logons first; GENERIC_ALL for the owner only."""
    sddl = owner_only_sddl(SID)
    assert sddl == f"D:P(D;;GA;;;NU)(A;;GA;;;{SID})"
    assert sddl.startswith("D:P")  # protected: nothing inherited
    aces = sddl[3:].strip("()").split(")(")
    assert aces[0] == "D;;GA;;;NU"  # deny precedes allow
    allows = [ace for ace in aces if ace.startswith("A;")]
    assert allows == [f"A;;GA;;;{SID}"]  # exactly one grantee
    for broad in ("WD", "BA", "SY", "AU", "BU", "AN", "IU"):
        assert f";;;{broad})" not in sddl


@pytest.mark.parametrize(
    "bad",
    ["", "WD", "S-1", "S-1-5", "s-1-5-21", f"{SID})(A;;GA;;;WD", f"{SID} ", "S-1-5-x", "S-1-5-21-1-2-3-4\n"],
)
def test_owner_only_sddl_rejects_non_sids(bad: str) -> None:
    """API-2: an SDDL alias or injected ACE can never widen the ACL."""
    with pytest.raises(ValueError):
        owner_only_sddl(bad)


def test_pipe_name() -> None:
    assert pipe_name("abc123") == r"\\.\pipe\memories-abc123"
    assert pipe_name("abc123").startswith(PIPE_PREFIX)


@pytest.mark.parametrize("bad", ["", "a\\b", "../x", "a b", "x" * 129, "é"])
def test_pipe_name_rejects_unsafe_digests(bad: str) -> None:
    with pytest.raises(ValueError):
        pipe_name(bad)


@pytest.mark.skipif(sys.platform == "win32", reason="checks the non-Windows fallback")
def test_pipe_transport_is_unavailable_elsewhere() -> None:
    """API-2: on POSIX the pipe entry points fail with a typed error, not an ImportError."""
    with pytest.raises(MemoriesError) as err:
        pipe_request(pipe_name("x"), {"op": "status"})
    assert err.value.code == "daemon_unavailable"

    async def go() -> None:
        async def handler(body: dict[str, object], peer: object) -> dict[str, object]:
            return {}

        await serve_named_pipe(pipe_name("x"), handler, stop=asyncio.Event())

    with pytest.raises(MemoriesError) as err:
        asyncio.run(go())
    assert err.value.code == "daemon_unavailable"
