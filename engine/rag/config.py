"""The [rag] table of config.toml: provider endpoints, models, key *names*, retries, proxy, bounds."""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.errors import MemoriesError

__all__ = ["Endpoint", "RagConfig", "load_rag_config", "IndexBounds"]

_PROVIDER_KINDS = {
    # "local" (AG-12): the model shipped in the embed-local extra's package (engine/rag/local_model.py)
    "embedding": ("openai", "gemini", "onnx", "fastembed", "local"),
    "generation": ("openai",),
    "rerank": ("openai",),
    # AG-9: the model seat of the extraction cycle (`memory cycle once`): any OpenAI-compatible
    # chat-completions endpoint (a local llama.cpp or Ollama server included) or Anthropic's Messages API.
    "extraction": ("openai", "anthropic"),
}
_SECRET_KEYS = ("api_key", "key", "token", "password", "secret")


@dataclass(frozen=True)
class Endpoint:
    # "openai" (OpenAI-compatible wire format), "anthropic", "gemini", "onnx"/"fastembed" (local
    # model directories) or "local" (the model package of the embed-local extra)
    kind: str
    url: str
    model: str
    api_key_env: str | None = None
    model_dir: str | None = None
    batch: int = 64
    pooling: str = "mean"  # fastembed: "mean" or "cls", as the model was trained

    def api_key(self) -> str | None:
        """Read the key at call time from the named variable; absent → None (no header sent)."""
        if not self.api_key_env:
            return None
        value = os.environ.get(self.api_key_env)
        return value or None

    @property
    def model_id(self) -> str:
        return f"{self.kind}:{self.model or self.model_dir}"


# Issue 28: a user's 20,000 transcript turns (each a passage or two, plus its tool output's
# low-weight passage) must all stay findable, so the defaults hold about 100,000 passages;
# a vault of notes stays far below them. Memory grows with content, not with the bounds.
DEFAULT_MAX_CHUNKS = 100_000
DEFAULT_MAX_TEXT_MIB = 128
DEFAULT_MAX_VECTOR_MIB = 96  # 64,000 passages of 384 dims (the local model's) as float32


@dataclass(frozen=True)
class IndexBounds:
    max_chunks: int = DEFAULT_MAX_CHUNKS
    max_text_mib: float = DEFAULT_MAX_TEXT_MIB
    max_vector_mib: float = DEFAULT_MAX_VECTOR_MIB


@dataclass(frozen=True)
class RagConfig:
    embedding: Endpoint | None = None
    generation: Endpoint | None = None
    rerank: Endpoint | None = None
    extraction: Endpoint | None = None
    # AG-9: with an extraction seat, the engine runs the cycle after each import that wrote turns
    # (`[rag.extraction] after_import = false` leaves it to `memory cycle once`).
    cycle_after_import: bool = True
    timeout_seconds: float = 30.0
    retries: int = 3
    backoff_seconds: float = 0.5
    proxy: str | None = None
    max_sources: int = 6
    bounds: IndexBounds = field(default_factory=IndexBounds)

    @property
    def provider_types(self) -> list[str]:
        return [f"{name}:{ep.kind}" for name, ep in self.endpoints() if ep is not None]

    def endpoints(self) -> list[tuple[str, Endpoint | None]]:
        return [
            ("embedding", self.embedding),
            ("generation", self.generation),
            ("rerank", self.rerank),
            ("extraction", self.extraction),
        ]


def _bad(sentence: str) -> MemoriesError:
    return MemoriesError("invalid_config", sentence)


def _number(table: dict[str, Any], key: str, default: float, lo: float, hi: float) -> float:
    value = table.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not lo <= value <= hi:
        raise _bad(f"[rag] {key} must be a number between {lo:g} and {hi:g}.")
    return float(value)


def _endpoint(name: str, table: object) -> Endpoint:
    if not isinstance(table, dict):
        raise _bad(f"[rag.{name}] must be a table.")
    for secret in _SECRET_KEYS:
        if secret in table:
            # Never echo the value: it may be the very key we refuse to hold.
            raise _bad(f"[rag.{name}] must not contain `{secret}`; name an environment variable in `api_key_env`.")
    kind = table.get("kind", "openai")
    if kind not in _PROVIDER_KINDS[name]:
        raise _bad(f"[rag.{name}] kind must be one of {', '.join(_PROVIDER_KINDS[name])}.")
    url = table.get("url", "")
    model = table.get("model", "")
    model_dir = table.get("model_dir")
    env = table.get("api_key_env")
    pooling = table.get("pooling", "mean")
    if kind == "local":
        from engine.rag.local_model import DEFAULT_LOCAL_MODEL, LOCAL_MODELS

        model = model or DEFAULT_LOCAL_MODEL
        if not isinstance(model, str) or model not in LOCAL_MODELS:
            raise _bad(f"[rag.{name}] kind local: model must be one of {', '.join(LOCAL_MODELS)}.")
    elif kind in ("onnx", "fastembed"):
        if not isinstance(model_dir, str) or not model_dir:
            raise _bad(f"[rag.{name}] kind {kind} needs `model_dir`.")
        if pooling not in ("mean", "cls"):
            raise _bad(f"[rag.{name}] pooling must be mean or cls.")
    else:
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise _bad(f"[rag.{name}] needs an http(s) `url`.")
        if not isinstance(model, str) or not model:
            raise _bad(f"[rag.{name}] needs a `model` name.")
    if env is not None and (not isinstance(env, str) or not env.replace("_", "").isalnum()):
        raise _bad(f"[rag.{name}] api_key_env must be an environment variable name.")
    batch = _number(table, "batch", 64, 1, 2048)
    return Endpoint(
        kind=str(kind),
        url=str(url),
        model=str(model),
        api_key_env=env,
        model_dir=model_dir if isinstance(model_dir, str) else None,
        batch=int(batch),
        pooling=str(pooling),
    )


def parse_rag_config(data: dict[str, Any]) -> RagConfig:
    rag = data.get("rag", {})
    if not isinstance(rag, dict):
        raise _bad("[rag] must be a table.")
    proxy = rag.get("proxy")
    if proxy is not None and (not isinstance(proxy, str) or not proxy.startswith(("http://", "https://"))):
        raise _bad("[rag] proxy must be an http(s) URL.")
    index = rag.get("index", {})
    if not isinstance(index, dict):
        raise _bad("[rag.index] must be a table.")
    after_import = rag["extraction"].get("after_import", True) if isinstance(rag.get("extraction"), dict) else True
    if not isinstance(after_import, bool):
        raise _bad("[rag.extraction] after_import must be true or false.")
    return RagConfig(
        cycle_after_import=after_import,
        embedding=_endpoint("embedding", rag["embedding"]) if "embedding" in rag else None,
        generation=_endpoint("generation", rag["generation"]) if "generation" in rag else None,
        rerank=_endpoint("rerank", rag["rerank"]) if "rerank" in rag else None,
        extraction=_endpoint("extraction", rag["extraction"]) if "extraction" in rag else None,
        timeout_seconds=_number(rag, "timeout_seconds", 30, 0.05, 600),
        retries=int(_number(rag, "retries", 3, 0, 10)),
        backoff_seconds=_number(rag, "backoff_seconds", 0.5, 0, 60),
        proxy=proxy,
        max_sources=int(_number(rag, "max_sources", 6, 1, 20)),
        bounds=IndexBounds(
            max_chunks=int(_number(index, "max_chunks", DEFAULT_MAX_CHUNKS, 1, 1_000_000)),
            max_text_mib=_number(index, "max_text_mib", DEFAULT_MAX_TEXT_MIB, 0.001, 4096),
            max_vector_mib=_number(index, "max_vector_mib", DEFAULT_MAX_VECTOR_MIB, 0.001, 4096),
        ),
    )


def load_rag_config(path: Path) -> RagConfig:
    """Read at each use (a small file), so a provider change needs no restart."""
    try:
        data = tomllib.loads(path.read_text("utf-8"))
    except FileNotFoundError:
        return RagConfig()
    except (tomllib.TOMLDecodeError, UnicodeDecodeError):
        raise _bad("config.toml is not valid TOML.") from None
    except OSError:
        raise MemoriesError("io_error", "config.toml could not be read.") from None
    return parse_rag_config(data)
