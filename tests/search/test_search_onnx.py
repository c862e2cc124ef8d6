"""Local ONNX embeddings (RAG-3): a tiny model and tokenizer written by the test, loaded lazily by the daemon."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np

from tests.helpers import Cli, require
from tests.search.conftest import Engine

WORDS = ["coffee", "espresso", "beans", "tea", "green", "honey", "kite", "beach", "wind"]
TOPIC = {"coffee": 0, "espresso": 0, "beans": 0, "tea": 1, "green": 1, "honey": 1, "kite": 2, "beach": 2, "wind": 2}


def _write_model(directory: Path) -> None:
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace

    vocab = {"[PAD]": 0, "[UNK]": 1, **{w: i + 2 for i, w in enumerate(WORDS)}}
    tokenizer = Tokenizer(WordLevel(vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = Whitespace()
    tokenizer.save(str(directory / "tokenizer.json"))
    # Embedding table: each word points along its topic axis (plus a small word-specific part).
    table = np.zeros((len(vocab), 4), dtype=np.float32)
    table[1] = [0, 0, 0, 1]
    for word, row in vocab.items():
        if word in TOPIC:
            table[row, TOPIC[word]] = 1.0
            table[row, 3] = 0.1 * row
    graph = helper.make_graph(
        [helper.make_node("Gather", ["table", "input_ids"], ["last_hidden_state"], axis=0)],
        "tiny-embedder",
        [
            helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"]),
            helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "seq"]),
        ],
        [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, ["batch", "seq", 4])],
        initializer=[numpy_helper.from_array(table, "table")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, str(directory / "model.onnx"))


def test_local_onnx_embedding_model(cli: Cli, tmp_path: Path) -> None:
    """RAG-3: kind = "onnx" embeds with onnxruntime + tokenizers from a configured directory."""
    for module in ("onnxruntime", "tokenizers", "onnx"):
        require(importlib.util.find_spec(module) is not None, f"python package {module} (the dev extra)")
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    _write_model(model_dir)
    cli.home.mkdir(parents=True, exist_ok=True)
    (cli.home / "config.toml").write_text(f'[rag.embedding]\nkind = "onnx"\nmodel_dir = "{model_dir}"\n', "utf-8")
    cli.init()
    engine = Engine(cli)
    try:
        engine("put", title="Morning", body="espresso beans")
        engine("put", title="Afternoon", body="green tea honey")
        engine("put", title="Weekend", body="kite beach wind")
        engine.wait_ready()
        # "coffee" occurs in no memory: only the embedding (topic axis) connects it to espresso.
        assert engine.search_titles("coffee", mode="lexical") == []
        assert engine.search_titles("coffee", mode="vector")[0] == "Morning"
        assert engine.search_titles("honey", mode="vector")[0] == "Afternoon"
        assert engine("rag_status")["providers"]["embedding"]["kind"] == "onnx"
    finally:
        engine.close()
