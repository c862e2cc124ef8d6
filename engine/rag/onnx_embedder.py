"""Local ONNX embedding model (RAG-3): loaded lazily from a configured directory, never downloaded.

The directory holds ``model.onnx`` and a Hugging Face ``tokenizer.json``. Vectors
are the attention-masked mean of the last hidden state. onnxruntime and
tokenizers are optional dependencies (the ``onnx`` extra).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from engine.errors import MemoriesError
from engine.rag.config import Endpoint

__all__ = ["embed_local"]

_lock = threading.Lock()
_loaded: dict[str, tuple[Any, Any]] = {}


def _load(model_dir: str) -> tuple[Any, Any]:
    with _lock:
        if model_dir in _loaded:
            return _loaded[model_dir]
        try:
            import onnxruntime  # type: ignore[import-not-found,import-untyped,unused-ignore]
            from tokenizers import Tokenizer  # type: ignore[import-not-found,import-untyped,unused-ignore]
        except ImportError:
            raise MemoriesError(
                "provider_not_configured", "The onnx embedding provider needs `pip install memories[onnx]`."
            ) from None
        root = Path(model_dir).expanduser()
        if not (root / "model.onnx").is_file() or not (root / "tokenizer.json").is_file():
            raise MemoriesError("invalid_config", "[rag.embedding] model_dir needs model.onnx and tokenizer.json.")
        tokenizer = Tokenizer.from_file(str(root / "tokenizer.json"))
        tokenizer.enable_truncation(max_length=512)
        tokenizer.enable_padding()
        session = onnxruntime.InferenceSession(str(root / "model.onnx"), providers=["CPUExecutionProvider"])
        _loaded[model_dir] = (tokenizer, session)
        return tokenizer, session


def embed_local(endpoint: Endpoint, texts: list[str]) -> list[list[float]]:
    import numpy as np

    assert endpoint.model_dir is not None
    tokenizer, session = _load(endpoint.model_dir)
    out: list[list[float]] = []
    names = {i.name for i in session.get_inputs()}
    for start in range(0, len(texts), endpoint.batch):
        encoded = tokenizer.encode_batch(texts[start : start + endpoint.batch])
        ids = np.array([e.ids for e in encoded], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encoded], dtype=np.int64)
        feeds = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in names:
            feeds["token_type_ids"] = np.zeros_like(ids)
        hidden = session.run(None, {k: v for k, v in feeds.items() if k in names})[0]
        weights = mask[..., None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
        out.extend(row.astype(float).tolist() for row in pooled)
    return out
