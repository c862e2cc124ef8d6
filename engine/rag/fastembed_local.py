"""A fastembed-style local embedding provider (issue 18): model files the user placed in a directory.

``kind = "fastembed"`` reads a directory laid out as fastembed and Hugging Face ONNX exports
are (for example what ``fastembed`` caches, or ``optimum-cli export onnx`` writes): the
first of ``model_optimized.onnx``, ``model.onnx``, ``onnx/model.onnx``,
``onnx/model_quantized.onnx``; ``tokenizer.json``; and optionally ``tokenizer_config.json``
(``model_max_length``, ``pad_token``) and ``config.json`` (``pad_token_id``). Nothing is
ever downloaded. Like fastembed it pools the last hidden state (``pooling = "mean"``,
attention-masked, or ``"cls"``, the first token, as BGE models want; a model whose output
is already one vector per text is used as it is) and L2-normalizes the result.

It runs on onnxruntime and tokenizers (the ``onnx`` extra), as the ``onnx`` provider does;
the difference is the directory layout, the tokenizer settings read from the model's own
files, pooling and normalization.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from engine.errors import MemoriesError
from engine.rag.config import Endpoint

__all__ = ["embed_fastembed", "MODEL_FILES"]

MODEL_FILES = ("model_optimized.onnx", "model.onnx", "onnx/model.onnx", "onnx/model_quantized.onnx")
MAX_TOKENS = 512

_lock = threading.Lock()
_loaded: dict[str, tuple[Any, Any]] = {}


def _json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except ValueError:
        raise MemoriesError("invalid_config", f"[rag.embedding] {path.name} in model_dir is not valid JSON.") from None
    return data if isinstance(data, dict) else {}


def _load(model_dir: str) -> tuple[Any, Any]:
    with _lock:
        if model_dir in _loaded:
            return _loaded[model_dir]
        try:
            import onnxruntime  # type: ignore[import-not-found,import-untyped,unused-ignore]
            from tokenizers import Tokenizer  # type: ignore[import-not-found,import-untyped,unused-ignore]
        except ImportError:
            raise MemoriesError(
                "provider_not_configured", "The fastembed embedding provider needs `pip install memories[onnx]`."
            ) from None
        root = Path(model_dir).expanduser()
        model = next((root / name for name in MODEL_FILES if (root / name).is_file()), None)
        if model is None or not (root / "tokenizer.json").is_file():
            raise MemoriesError(
                "invalid_config", "[rag.embedding] model_dir needs tokenizer.json and model.onnx (or onnx/model.onnx)."
            )
        settings = _json(root / "tokenizer_config.json")
        config = _json(root / "config.json")
        tokenizer = Tokenizer.from_file(str(root / "tokenizer.json"))
        limit = settings.get("model_max_length", MAX_TOKENS)
        tokenizer.enable_truncation(max_length=min(int(limit), MAX_TOKENS) if isinstance(limit, int) else MAX_TOKENS)
        pad_token = settings.get("pad_token")
        pad_token = pad_token.get("content") if isinstance(pad_token, dict) else pad_token
        pad_id = config.get("pad_token_id")
        if isinstance(pad_token, str) and isinstance(pad_id, int):
            tokenizer.enable_padding(pad_id=pad_id, pad_token=pad_token)
        else:
            tokenizer.enable_padding()
        session = onnxruntime.InferenceSession(str(model), providers=["CPUExecutionProvider"])
        _loaded[model_dir] = (tokenizer, session)
        return tokenizer, session


def embed_fastembed(endpoint: Endpoint, texts: list[str]) -> list[list[float]]:
    import numpy as np

    assert endpoint.model_dir is not None
    tokenizer, session = _load(endpoint.model_dir)
    names = {i.name for i in session.get_inputs()}
    out: list[list[float]] = []
    for start in range(0, len(texts), endpoint.batch):
        encoded = tokenizer.encode_batch(texts[start : start + endpoint.batch])
        ids = np.array([e.ids for e in encoded], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encoded], dtype=np.int64)
        feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        hidden = np.asarray(session.run(None, {k: v for k, v in feeds.items() if k in names})[0], dtype=np.float32)
        if hidden.ndim == 2:
            pooled = hidden
        elif endpoint.pooling == "cls":
            pooled = hidden[:, 0]
        else:
            weights = mask[..., None].astype(np.float32)
            pooled = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
        norms = np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
        out.extend(row.astype(float).tolist() for row in pooled / norms)
    return out
