"""Which handler serves which request, and what each op requires before dispatch."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from engine.service.requests import Request

if TYPE_CHECKING:
    from engine.service.caller import Caller
    from engine.service.service import Service

__all__ = ["OpSpec", "OPS", "op", "Handler"]

Handler = Callable[["Service", Any, "Caller"], dict[str, Any]]
R = TypeVar("R", bound=Request)


@dataclass(frozen=True)
class OpSpec:
    request: type[Request]
    handler: Handler
    needs_unlock: bool = True
    needs_elevation: bool = False
    # Ops that must answer while another op holds the service lock (status, info).
    lock_free: bool = False
    touches_idle: bool = True
    # The MCP allowlist: ops an agent may ever reach (AG-2); default closed.
    mcp_allowed: bool = False


OPS: dict[str, OpSpec] = {}


def op(
    request: type[R],
    *,
    needs_unlock: bool = True,
    needs_elevation: bool = False,
    lock_free: bool = False,
    touches_idle: bool = True,
    mcp_allowed: bool = False,
) -> Callable[[Callable[[Service, R, Caller], dict[str, Any]]], Callable[[Service, R, Caller], dict[str, Any]]]:
    def register(fn: Callable[[Service, R, Caller], dict[str, Any]]) -> Callable[[Service, R, Caller], dict[str, Any]]:
        tag = request.__struct_config__.tag
        assert isinstance(tag, str)
        if tag in OPS:
            raise RuntimeError(f"op {tag} registered twice")
        OPS[tag] = OpSpec(
            request=request,
            handler=fn,
            needs_unlock=needs_unlock,
            needs_elevation=needs_elevation,
            lock_free=lock_free,
            touches_idle=touches_idle,
            mcp_allowed=mcp_allowed,
        )
        return fn

    return register
