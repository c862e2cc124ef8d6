"""Turn-level recall over the shipped sample sessions (AG-8, AG-9): shared by bench/agent.py and the tests.

The questions (tests/data/agent-eval/questions.jsonl, made by tests/data/make_agent_sessions.py)
each name the turn that answers them. A question is asked the way a user asks the CLI (the
``search`` op that ``memories search --kind transcript`` sends) and the way an agent asks
(MCP ``recall_turn``: its hit, then its other hits); the answer's rank in each gives recall@5
and the reciprocal rank, per kind of question. Deterministic: no model, no clock.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parents[1] / "data" / "agent-eval" / "sessions"
QUESTIONS = DATA.parent / "questions.jsonl"
KINDS = ("exact", "chinese", "paraphrase", "corrected", "tool_noise", "long")

Request = Callable[[dict[str, Any]], dict[str, Any]]


@dataclass
class Score:
    hits: int = 0
    total: int = 0
    rr: float = 0.0
    misses: list[str] = field(default_factory=list)
    ranks: dict[str, int | None] = field(default_factory=dict)  # query -> the answer's rank (None: not in the list)

    def add(self, rank: int | None, query: str) -> None:
        self.total += 1
        self.ranks[query] = rank
        if rank is not None and rank <= 5:
            self.hits += 1
        else:
            self.misses.append(query)
        self.rr += 1.0 / rank if rank is not None else 0.0

    @property
    def recall(self) -> float:
        return self.hits / self.total if self.total else 0.0

    @property
    def mrr(self) -> float:
        return self.rr / self.total if self.total else 0.0


def questions() -> list[dict[str, Any]]:
    return [json.loads(line) for line in QUESTIONS.read_text("utf-8").splitlines() if line.strip()]


def answer_turns(owner: Request) -> dict[tuple[str, int], str]:
    """(session_key, turn number) → turn_uid of every main-thread turn the questions name."""
    out: dict[tuple[str, int], str] = {}
    sessions = owner({"op": "transcript_list", "limit": 1000})["sessions"]
    wanted = {(q["session_key"], q["seq"]) for q in questions()}
    for s in sessions:
        for key, seq in wanted:
            if key == s["session_key"]:
                shown = owner({"op": "transcript_show", "session": s["session_uid"], "turn": seq})
                out[(key, seq)] = shown["turns"][0]["turn_uid"]
    return out


def _rank(ranking: list[str], want: str) -> int | None:
    return ranking.index(want) + 1 if want in ranking else None


def run(owner: Request, agent: Request) -> dict[str, dict[str, Score]]:
    """Scores per surface ("search", "recall_turn") and kind (plus "all")."""
    answers = answer_turns(owner)
    scores: dict[str, dict[str, Score]] = {"search": {}, "recall_turn": {}}
    for q in questions():
        want = answers[(q["session_key"], q["seq"])]
        found = owner({"op": "search", "query": q["query"], "kind": "transcript", "limit": 10})["results"]
        by_search = [r["turn"]["turn_uid"] for r in found if r.get("turn")]
        recalled = agent({"op": "recall_turn", "query": q["query"], "before": 0, "after": 0})
        by_recall = [t["turn_uid"] for t in recalled["turns"][:1]] + [o["turn_uid"] for o in recalled["other_hits"]]
        for surface, ranking in (("search", by_search), ("recall_turn", by_recall)):
            rank = _rank(ranking, want)
            for kind in (q["kind"], "all"):
                scores[surface].setdefault(kind, Score()).add(rank, q["query"])
    return scores


def report(scores: dict[str, dict[str, Score]]) -> str:
    lines = [f"{'kind':<11} {'search R@5':>10} {'MRR':>6}   {'recall_turn R@5':>15} {'MRR':>6}   n"]
    for kind in (*KINDS, "all"):
        s, r = scores["search"].get(kind, Score()), scores["recall_turn"].get(kind, Score())
        lines.append(f"{kind:<11} {s.recall:>10.2f} {s.mrr:>6.2f}   {r.recall:>15.2f} {r.mrr:>6.2f}   {s.total}")
    return "\n".join(lines)
