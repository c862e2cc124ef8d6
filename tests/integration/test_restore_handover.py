"""What a restore hands to the unlock that ends it (BK-2, SR-6, issue 32).

A restore opens every original head's body to check it, and builds and signs the new heads.
The unlock that follows takes those head objects for the rows that hold exactly them instead
of decoding the same bytes again, and the index build takes the opened bodies instead of
reading and opening the rows again. These tests run the real engine in this process on real
store files: the index built from the handed bodies answers as the source vault's own index
does, every handed body is the stored one, the hand-over is used (counted by the engine, not
timed), and a row that does not hold exactly the handed revision is decoded from the row.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engine.backup.envelope import BackupReader
from engine.backup.restore import Restorer
from engine.config import EngineConfig, Paths
from engine.crypto.chunks import CHUNK_BYTES
from engine.service import handlers  # noqa: F401  (registers every op)
from engine.service.caller import Caller
from engine.service.search_runtime import runtime_of
from engine.service.service import Service
from engine.vault.revision import Revision
from tests.helpers import PASSWORD

CALLER = Caller("cli:handover")
BACKUP_PW = "hand-over backup password"
WORDS = ["harbor", "lantern", "meadow", "copper", "violet", "granite", "长期记忆", "护照", "灯塔"]
QUERIES = ["harbor", "lantern meadow", "copper violet", "长期记忆", "护照 harbor", "tailmarker", "edited"]
NOTES = 40
CANARY = "handover-canary-secret-7f3a"


def _service(home: Path) -> Service:
    home.mkdir(mode=0o700, parents=True)
    return Service(Paths(home), EngineConfig())


def _answers(service: Service) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for query in QUERIES:
        result = service.dispatch({"op": "search", "query": query, "mode": "lexical", "limit": 200, "wait_ms": 120_000}, CALLER)
        assert result["partial"] is False
        out[query] = {r["id"]: round(float(r["score"]), 9) for r in result["results"]}
    return out


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, str], dict[str, dict[str, float]]]]:
    """A backup of NOTES notes, one of them with a body of three chunks, one edited, one deleted;
    the source's bodies by item ID and its search answers."""
    root = tmp_path_factory.mktemp("handover")
    service = _service(root / "source")
    try:
        service.dispatch({"op": "init", "password": PASSWORD}, CALLER)
        ids = []
        for i in range(NOTES):
            body = " ".join(WORDS[(i * k) % len(WORDS)] for k in (1, 2, 5)) + f" note{i:03d}"
            ids.append(service.dispatch({"op": "put", "title": f"note {i}", "body": body, "tags": ["h"]}, CALLER)["id"])
        # A body cut into three chunks, whose words at the end are in the last one.
        long_body = ("filler words " * (CHUNK_BYTES // 6))[: 2 * CHUNK_BYTES + 100] + " tailmarker"
        long_id = service.dispatch({"op": "put", "title": "long", "body": long_body}, CALLER)["id"]
        base = service.dispatch({"op": "get", "id": ids[0]}, CALLER)["revision"]
        service.dispatch({"op": "edit", "id": ids[0], "body": "edited harbor body", "base": base}, CALLER)
        service.dispatch({"op": "delete", "id": ids[1]}, CALLER)
        service.dispatch({"op": "login_new", "title": "bank", "password": CANARY}, CALLER)
        bodies = {item: service.dispatch({"op": "get", "id": item}, CALLER)["body"] for item in [*ids[2:], ids[0], long_id]}
        answers = _answers(service)
        service.dispatch({"op": "sudo", "password": PASSWORD}, CALLER)
        path = root / "source.backup"
        service.dispatch({"op": "backup_create", "path": str(path), "password": BACKUP_PW}, CALLER)
    finally:
        service.lock_now("test")
    yield path, bodies, answers


def test_the_index_built_from_the_handed_bodies_answers_as_the_source(
    source: tuple[Path, dict[str, str], dict[str, dict[str, float]]], tmp_path: Path
) -> None:
    """SR-6, BK-2: the restore hands every live head's body to the index build (none is read from
    the store again); the index answers every query with the same items and scores as the source
    vault's index, every body reads back as it was, and nothing handed is left after the build."""
    path, bodies, answers = source
    service = _service(tmp_path / "restored")
    try:
        answer = service.dispatch(
            {"op": "restore", "path": str(path), "backup_password": BACKUP_PW, "password": PASSWORD}, CALLER
        )
        assert answer["heads"] == NOTES + 3  # the deleted note's tombstone, the login and its credential
        assert _answers(service) == answers
        status = service.dispatch({"op": "rag_status"}, CALLER)
        assert status["build"]["bodies_from_restore"] == len(bodies)
        assert service.require_unlocked().opened_bodies == {}
        for item, body in bodies.items():
            assert service.dispatch({"op": "get", "id": item}, CALLER)["body"] == body
        # After a lock the index comes from the store (its snapshot or token streams), not a hand-over.
        service.lock_now("test")
        service.dispatch({"op": "unlock", "password": PASSWORD}, CALLER)
        assert _answers(service) == answers
        assert runtime_of(service).stats.bodies_from_restore == len(bodies)  # none more (the count is the engine's)
    finally:
        service.lock_now("test")


def _revision_rows(service: Service) -> list[tuple[int, dict[str, Any]]]:
    return [(seq, r) for seq, r in service.require_store().load().records if r.get("t") == "revision"]


def test_the_unlock_takes_a_handed_revision_only_for_the_row_that_holds_exactly_it(tmp_path: Path) -> None:
    """The decode takes a handed object only where the row's signed bytes, signature and content
    rows are its own; a row that differs in any of them is decoded from the row."""
    service = _service(tmp_path / "home")
    try:
        service.dispatch({"op": "init", "password": PASSWORD}, CALLER)
        for i in range(4):
            service.dispatch({"op": "put", "title": f"n{i}", "body": f"body {i}"}, CALLER)
        rows = _revision_rows(service)
        assert len(rows) == 4
        (_, same), (_, other_sig), (_, other_rows), (_, absent) = rows
        handed = {
            "same": Revision(same["signed"], same["sig"], list(same["body_seqs"])),
            "other_sig": Revision(other_sig["signed"], bytes(64), list(other_sig["body_seqs"])),
            "other_rows": Revision(other_rows["signed"], other_rows["sig"], [s + 1000 for s in other_rows["body_seqs"]]),
        }
        written = {rev.signed: rev for rev in handed.values()}
        decoded = service.vault.decode(service.require_store(), written=written)
        by_id = {rev.rev_id: rev for rev in decoded.revisions}
        assert by_id[handed["same"].rev_id] is handed["same"]
        for name in ("other_sig", "other_rows"):
            taken = by_id[handed[name].rev_id]
            assert taken is not handed[name]
        row_of = {seq: record for seq, record in rows}
        for rev in decoded.revisions:
            record = row_of[rev.seq]
            assert (rev.signed, rev.signature, rev.body_seqs) == (record["signed"], record["sig"], list(record["body_seqs"]))
        assert len(decoded.revisions) == 4 and absent["signed"] not in written
    finally:
        service.lock_now("test")


def test_only_bodies_of_the_kinds_named_are_handed_over(source: tuple[Path, dict[str, str], dict[str, dict[str, float]]]) -> None:
    """A credential's body (the login's password) is checked and not kept: only the kinds the
    caller names are handed over (the handler names those the index reads whole), none by default."""
    path, bodies, _answers = source
    for kinds, expected in ((frozenset(), set()), (frozenset({"memory"}), set(bodies.values()))):
        with open(path, "rb") as src:
            restorer = Restorer(BackupReader(src, BACKUP_PW), build=True, body_kinds=kinds)
            for _row in restorer.content_rows():
                pass
        assert set(restorer.opened_bodies.values()) == expected
        assert set(restorer.opened_bodies) <= {rev.rev_id for rev in restorer.new_heads}
        assert not any(CANARY in body for body in restorer.opened_bodies.values())
