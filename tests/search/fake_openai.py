"""A loopback aiohttp server speaking the OpenAI-compatible embeddings and chat wire format.

Deterministic: embeddings are hashed bags of words (so texts sharing words are
close), answers are scripted by the test. It records every request and can fail,
stall or hold an answer until the test releases it.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import re
import threading
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

DIMS = 64
_WORD = re.compile(r"\w+", re.UNICODE)


def embed_text(text: str) -> list[float]:
    vec = [0.0] * DIMS
    words = _WORD.findall(text.lower())
    # CJK text has no spaces: hash character bigrams as well.
    grams = words + [w[i : i + 2] for w in words for i in range(len(w) - 1) if not w.isascii()]
    for gram in grams:
        h = hashlib.sha256(gram.encode()).digest()
        vec[h[0] % DIMS] += 1.0 if h[1] % 2 else -1.0
    if not any(vec):
        vec[0] = 1.0
    norm = math.sqrt(sum(v * v for v in vec))
    return [v / norm for v in vec]


@dataclass
class FakeOpenAI:
    answers: list[str] = field(default_factory=list)
    fail_statuses: list[int] = field(default_factory=list)  # returned (in order) before succeeding
    delay_seconds: float = 0.0
    requests: list[tuple[str, dict[str, Any], dict[str, str]]] = field(default_factory=list)
    chat_arrived: threading.Event = field(default_factory=threading.Event)
    hold_chat: threading.Event | None = None  # when set to an Event, chat waits for it
    port: int = 0
    rerank_favourite: str = "favourite"

    def _record(self, request: web.Request, body: dict[str, Any]) -> None:
        # Host is kept: a request that came through the fake acting as a proxy names the upstream.
        self.requests.append((request.path, body, {**dict(request.headers), "X-Seen-Host": request.host}))

    async def _maybe_fail(self) -> web.Response | None:
        if self.delay_seconds:
            await asyncio.sleep(self.delay_seconds)
        if self.fail_statuses:
            status = self.fail_statuses.pop(0)
            return web.json_response({"error": {"message": "scripted failure"}}, status=status)
        return None

    async def embeddings(self, request: web.Request) -> web.Response:
        body = await request.json()
        self._record(request, body)
        failure = await self._maybe_fail()
        if failure is not None:
            return failure
        inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
        return web.json_response(
            {
                "object": "list",
                "model": body["model"],
                "data": [{"object": "embedding", "index": i, "embedding": embed_text(t)} for i, t in enumerate(inputs)],
                "usage": {"prompt_tokens": 0, "total_tokens": 0},
            }
        )

    async def chat(self, request: web.Request) -> web.Response:
        body = await request.json()
        self._record(request, body)
        self.chat_arrived.set()
        if self.hold_chat is not None:
            await asyncio.get_running_loop().run_in_executor(None, self.hold_chat.wait, 30)
        failure = await self._maybe_fail()
        if failure is not None:
            return failure
        answer = self.answers.pop(0) if self.answers else "I do not know."
        return web.json_response(
            {
                "id": "chatcmpl-test",
                "object": "chat.completion",
                "model": body["model"],
                "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": answer}}],
            }
        )

    async def gemini_embeddings(self, request: web.Request) -> web.Response:
        """Gemini ``batchEmbedContents``: {"requests": [{"model", "content": {"parts": [{"text"}]}}]}."""
        body = await request.json()
        self._record(request, body)
        texts = ["".join(p["text"] for p in r["content"]["parts"]) for r in body["requests"]]
        return web.json_response({"embeddings": [{"values": embed_text(t)} for t in texts]})

    async def rerank(self, request: web.Request) -> web.Response:
        """A /rerank endpoint: scores each document by how often it contains ``rerank_favourite``."""
        body = await request.json()
        self._record(request, body)
        results = [
            {"index": i, "relevance_score": float(doc.lower().count(self.rerank_favourite))}
            for i, doc in enumerate(body["documents"])
        ]
        results.sort(key=lambda r: r["relevance_score"], reverse=True)
        return web.json_response({"results": results[: body.get("top_n", len(results))]})

    def paths(self, path: str) -> list[dict[str, Any]]:
        return [body for p, body, _ in self.requests if p == path]


class ServerThread:
    """Runs the fake on its own event loop thread, bound to 127.0.0.1 on a free port."""

    def __init__(self, fake: FakeOpenAI) -> None:
        self.fake = fake
        self.loop = asyncio.new_event_loop()
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._runner: web.AppRunner | None = None

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        app = web.Application()
        app.router.add_post("/v1/embeddings", self.fake.embeddings)
        app.router.add_post("/v1/chat/completions", self.fake.chat)
        app.router.add_post("/v1beta/models/embed-test:batchEmbedContents", self.fake.gemini_embeddings)
        app.router.add_post("/v1/rerank", self.fake.rerank)
        self._runner = web.AppRunner(app)
        self.loop.run_until_complete(self._runner.setup())
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        self.loop.run_until_complete(site.start())
        self.fake.port = int(self._runner.addresses[0][1])
        self._started.set()
        self.loop.run_forever()

    def start(self) -> None:
        self._thread.start()
        assert self._started.wait(10)

    def stop(self) -> None:
        if self.fake.hold_chat is not None:
            self.fake.hold_chat.set()
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
