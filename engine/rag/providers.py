"""Embedding, generation and rerank calls in the OpenAI-compatible (and Gemini) wire formats (RAG-3)."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Coroutine
from typing import Any, TypeVar

from engine.errors import MemoriesError
from engine.rag.config import Endpoint, RagConfig
from engine.rag.http import post_json

__all__ = ["embed", "chat", "complete", "rerank_scores", "run_sync"]

T = TypeVar("T")


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Handlers run in worker threads without a loop; each model call gets its own short loop."""
    return asyncio.run(coro)


def _malformed(what: str) -> MemoriesError:
    return MemoriesError("provider_error", f"The provider's {what} answer has an unexpected shape.")


def _vector(values: object) -> list[float]:
    if not isinstance(values, list) or not values:
        raise _malformed("embedding")
    out: list[float] = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise _malformed("embedding")
        out.append(float(v))
    return out


async def _embed_openai(config: RagConfig, ep: Endpoint, texts: list[str]) -> list[list[float]]:
    answer = await post_json(config, ep, ep.url, {"model": ep.model, "input": texts})
    data = answer.get("data") if isinstance(answer, dict) else None
    if not isinstance(data, list) or len(data) != len(texts):
        raise _malformed("embedding")
    try:
        ordered = sorted(data, key=lambda d: int(d.get("index", 0)))
        return [_vector(item["embedding"]) for item in ordered]
    except (AttributeError, KeyError, TypeError, ValueError):
        raise _malformed("embedding") from None


async def _embed_gemini(config: RagConfig, ep: Endpoint, texts: list[str]) -> list[list[float]]:
    model = ep.model if ep.model.startswith("models/") else f"models/{ep.model}"
    payload = {"requests": [{"model": model, "content": {"parts": [{"text": t}]}} for t in texts]}
    answer = await post_json(config, ep, ep.url, payload)
    items = answer.get("embeddings") if isinstance(answer, dict) else None
    if not isinstance(items, list) or len(items) != len(texts):
        raise _malformed("embedding")
    try:
        return [_vector(item["values"]) for item in items]
    except (KeyError, TypeError):
        raise _malformed("embedding") from None


async def embed(config: RagConfig, texts: list[str], *, queries: int = 0) -> list[list[float]]:
    """Vectors for ``texts`` in order, in batches of the endpoint's ``batch`` size. The first
    ``queries`` texts are search queries (a model trained with query/passage prefixes gets them)."""
    ep = config.embedding
    if ep is None:
        raise MemoriesError(
            "provider_not_configured",
            "Vector search needs an embedding provider: add [rag.embedding] (url, model) to config.toml.",
        )
    if ep.kind == "onnx":
        from engine.rag.onnx_embedder import embed_local  # lazy: onnxruntime is optional and heavy

        return await asyncio.to_thread(embed_local, ep, texts)
    if ep.kind == "local":
        from engine.rag.local_model import embed_packaged  # lazy: the model package is an optional extra

        return await asyncio.to_thread(embed_packaged, ep, texts, queries)
    if ep.kind == "fastembed":
        from engine.rag.fastembed_local import embed_fastembed  # lazy, like onnx

        return await asyncio.to_thread(embed_fastembed, ep, texts)
    call = _embed_gemini if ep.kind == "gemini" else _embed_openai
    out: list[list[float]] = []
    for i in range(0, len(texts), ep.batch):
        out.extend(await call(config, ep, texts[i : i + ep.batch]))
    return out


async def _openai_chat(config: RagConfig, ep: Endpoint, messages: list[dict[str, str]]) -> str:
    """One OpenAI-compatible chat completion at temperature 0: the first choice's text."""
    answer = await post_json(config, ep, ep.url, {"model": ep.model, "messages": messages, "temperature": 0})
    try:
        content = answer["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError):
        raise _malformed("chat") from None
    if not isinstance(content, str):
        raise _malformed("chat")
    return content


async def chat(config: RagConfig, messages: list[dict[str, str]]) -> str:
    ep = config.generation
    if ep is None:
        raise MemoriesError(
            "provider_not_configured",
            "`ask` needs a generation provider: add [rag.generation] (url, model) to config.toml.",
        )
    return await _openai_chat(config, ep, messages)


async def complete(config: RagConfig, ep: Endpoint, system: str, user: str, max_tokens: int = 2048) -> str:
    """One reply of a model seat (AG-9): OpenAI-compatible chat completions, or Anthropic's Messages API."""
    if ep.kind == "anthropic":
        payload: dict[str, Any] = {
            "model": ep.model,
            "max_tokens": max_tokens,
            "system": system,
            "messages": [{"role": "user", "content": user}],
            "temperature": 0,
        }
        answer = await post_json(config, ep, ep.url, payload)
        try:
            parts = [b["text"] for b in answer["content"] if isinstance(b, dict) and b.get("type") == "text"]
        except (KeyError, TypeError):
            raise _malformed("messages") from None
        if not parts or not all(isinstance(p, str) for p in parts):
            raise _malformed("messages")
        return "".join(parts)
    messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
    return await _openai_chat(config, ep, messages)


async def rerank_scores(config: RagConfig, query: str, documents: list[str]) -> list[float]:
    """A /rerank endpoint (Cohere/Jina/vLLM shape): relevance per document, in input order."""
    ep = config.rerank
    if ep is None:
        raise MemoriesError("provider_not_configured", "No rerank provider is configured.")
    answer = await post_json(
        config, ep, ep.url, {"model": ep.model, "query": query, "documents": documents, "top_n": len(documents)}
    )
    results = answer.get("results") if isinstance(answer, dict) else None
    if not isinstance(results, list):
        raise _malformed("rerank")
    scores = [float("-inf")] * len(documents)
    try:
        for item in results:
            index = int(item["index"])
            score = item.get("relevance_score", item.get("score"))
            if not 0 <= index < len(documents) or isinstance(score, bool) or not isinstance(score, (int, float)):
                raise _malformed("rerank")
            scores[index] = float(score)
    except (KeyError, TypeError, ValueError, AttributeError):
        raise _malformed("rerank") from None
    return scores
