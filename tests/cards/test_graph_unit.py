"""The adjacency index and graph walks (CD-2), with recording visibility: bounded work, no dangling edges."""

from __future__ import annotations

from engine.cards.graph import full_projection, neighbourhood, spread_activation
from engine.cards.links import PPM, LinkIndex, add_record, remove_record

V = b"v" * 16


def node(n: int) -> bytes:
    return n.to_bytes(16, "big")


def link(index: LinkIndex, a: int, b: int, conf: float = 1.0, till: int | None = None, rel: str = "") -> bytes:
    record = add_record(vault_id=V, src=node(a), dst=node(b), rel=rel, confidence_ppm=int(conf * PPM), valid_till_ms=till)
    index.apply(record)
    return bytes(record["id"])


class Recorder:
    """A visibility predicate that records which nodes were asked about."""

    def __init__(self, hidden: set[bytes] | None = None) -> None:
        self.asked: set[bytes] = set()
        self.hidden = hidden or set()

    def __call__(self, n: bytes) -> bool:
        self.asked.add(n)
        return n not in self.hidden


def test_neighbourhood_touches_only_the_walked_nodes() -> None:
    """CD-2 / bench guarantee: a depth-2 walk never consults nodes outside its neighbourhood."""
    index = LinkIndex()
    for i in range(1000):
        link(index, i, i + 1)
    seen = Recorder()
    hood = neighbourhood(index, node(500), depth=2, visible=seen, at_ms=0)
    assert set(hood.distance) == {node(i) for i in (498, 499, 500, 501, 502)}
    assert len(seen.asked) <= 7


def test_expired_edges_and_hidden_nodes_are_not_projected() -> None:
    """CD-2: an expired edge is ignored; an edge to a hidden (deleted/conflicted) node is never shown."""
    index = LinkIndex()
    link(index, 1, 2, till=1000)
    link(index, 1, 3)
    link(index, 3, 4)
    hidden = Recorder({node(3)})
    hood = neighbourhood(index, node(1), depth=3, visible=hidden, at_ms=999)
    assert set(hood.distance) == {node(1), node(2)}
    later = neighbourhood(index, node(1), depth=3, visible=Recorder(), at_ms=1000)
    assert set(later.distance) == {node(1), node(3), node(4)}
    edges = full_projection(index, [node(i) for i in range(1, 5)], visible=hidden, at_ms=1000)
    assert edges == []  # 1->2 expired, 1->3 and 3->4 touch the hidden node


def test_remove_record_drops_the_edge_from_both_sides() -> None:
    index = LinkIndex()
    link_id = link(index, 1, 2)
    (only,) = index.edges(node(1), "out")
    index.apply(remove_record(only))
    assert link_id not in index.by_id
    assert list(index.edges(node(2), "in")) == [] and not index.outgoing and not index.incoming


def test_spreading_activation_decays_by_confidence_and_respects_hops() -> None:
    index = LinkIndex()
    link(index, 1, 2, conf=1.0)
    link(index, 2, 3, conf=0.5)
    link(index, 3, 4, conf=1.0)
    link(index, 1, 5, conf=0.2)
    ranked = spread_activation(index, [node(1)], hops=2, decay=0.5, visible=Recorder(), at_ms=0)
    got = {a.node: (round(a.activation, 4), a.hops) for a in ranked}
    assert got == {node(2): (0.5, 1), node(3): (0.125, 2), node(5): (0.1, 1)}
    assert [a.node for a in ranked] == [node(2), node(3), node(5)]


def test_spreading_activation_sums_parallel_paths_and_ignores_expired() -> None:
    index = LinkIndex()
    link(index, 1, 2)
    link(index, 1, 3)
    link(index, 2, 4, conf=0.5)
    link(index, 3, 4, conf=0.5)
    link(index, 1, 4, till=10)
    ranked = spread_activation(index, [node(1)], hops=2, decay=1.0, visible=Recorder(), at_ms=10)
    assert {a.node: a.activation for a in ranked}[node(4)] == 1.0  # 0.5 + 0.5, the direct edge expired
    assert all(a.hops == 2 for a in ranked if a.node == node(4))
