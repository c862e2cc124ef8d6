"""Graph projections over the link index: neighbourhoods, whole-vault view, spreading activation.

Every function takes a ``visible(node)`` predicate supplied by the service (current,
not deleted, not in conflict, a graph kind) and the time of the read: an edge is
projected only if it has not expired and both of its ends are visible (CD-2), so a
deleted node leaves no dangling edge anywhere. Work is bounded by the neighbourhood
actually walked, never by the size of the vault.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from engine.cards.links import Link, LinkIndex

__all__ = ["Neighbourhood", "neighbourhood", "full_projection", "spread_activation", "Activation"]

Visible = Callable[[bytes], bool]


@dataclass
class Neighbourhood:
    distance: dict[bytes, int] = field(default_factory=dict)
    edges: dict[bytes, Link] = field(default_factory=dict)
    truncated: bool = False


def _live(link: Link, at_ms: int, visible: Visible, rel: str | None) -> bool:
    return not link.expired(at_ms) and (rel is None or link.rel == rel) and visible(link.src) and visible(link.dst)


def neighbourhood(
    index: LinkIndex,
    start: bytes,
    *,
    depth: int,
    visible: Visible,
    at_ms: int,
    direction: str = "both",
    rel: str | None = None,
    max_nodes: int = 10_000,
) -> Neighbourhood:
    """Breadth-first walk up to ``depth`` hops; edges among the reached nodes are included."""
    result = Neighbourhood()
    if not visible(start):
        return result
    result.distance[start] = 0
    frontier = [start]
    for hop in range(1, depth + 1):
        following: list[bytes] = []
        for node in frontier:
            for link in index.edges(node, direction):
                if not _live(link, at_ms, visible, rel):
                    continue
                result.edges[link.link_id] = link
                other = link.other(node)
                if other in result.distance:
                    continue
                if len(result.distance) >= max_nodes:
                    result.truncated = True
                    continue
                result.distance[other] = hop
                following.append(other)
        frontier = following
        if not frontier:
            break
    # An edge found from one end may lead to a node past the cap; keep only edges inside.
    result.edges = {k: e for k, e in result.edges.items() if e.src in result.distance and e.dst in result.distance}
    return result


def full_projection(index: LinkIndex, nodes: Iterable[bytes], *, visible: Visible, at_ms: int) -> list[Link]:
    """Every live edge whose source is one of ``nodes`` (the visible graph nodes)."""
    edges: list[Link] = []
    for node in nodes:
        for link in index.outgoing.get(node, {}).values():
            if _live(link, at_ms, visible, None):
                edges.append(link)
    return edges


@dataclass(frozen=True)
class Activation:
    node: bytes
    activation: float
    hops: int


def spread_activation(
    index: LinkIndex,
    seeds: list[bytes],
    *,
    hops: int,
    decay: float,
    visible: Visible,
    at_ms: int,
    direction: str = "both",
    floor: float = 0.01,
    max_frontier: int = 2000,
) -> list[Activation]:
    """Activation starts at 1.0 on each seed and flows along live links for at most ``hops``.

    Each step multiplies by the link's confidence and by ``decay``; what reaches a node
    in one step is summed (several weak paths reinforce each other) and capped at 1.0.
    A node keeps its best activation; contributions below ``floor`` stop spreading, and
    the frontier is cut to its ``max_frontier`` strongest nodes, so the cost is bounded.
    """
    best: dict[bytes, Activation] = {}
    frontier: dict[bytes, float] = {s: 1.0 for s in seeds if visible(s)}
    seed_set = set(frontier)
    for hop in range(1, hops + 1):
        incoming: dict[bytes, float] = {}
        for node, energy in frontier.items():
            for link in index.edges(node, direction):
                if not _live(link, at_ms, visible, None):
                    continue
                share = energy * link.confidence * decay
                if share < floor:
                    continue
                other = link.other(node)
                incoming[other] = min(1.0, incoming.get(other, 0.0) + share)
        frontier = {}
        for node, energy in sorted(incoming.items(), key=lambda kv: -kv[1])[:max_frontier]:
            if node in seed_set:
                continue
            known = best.get(node)
            if known is None or energy > known.activation:
                best[node] = Activation(node, energy, known.hops if known else hop)
                frontier[node] = energy
        if not frontier:
            break
    return sorted(best.values(), key=lambda a: (-a.activation, a.hops, a.node))
