"""The fastembed-style local provider (issue 18): model files placed in a directory, never downloaded.

Uses the tiny model the ONNX test builds, laid out as a fastembed/Hugging Face export
(onnx/model.onnx, tokenizer.json, tokenizer_config.json, config.json).
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from tests.helpers import Cli, require
from tests.search.conftest import Engine
from tests.search.test_search_onnx import _write_model


def _fastembed_dir(root: Path) -> Path:
    root.mkdir()
    _write_model(root)
    (root / "onnx").mkdir()
    (root / "model.onnx").rename(root / "onnx" / "model.onnx")
    (root / "tokenizer_config.json").write_text(json.dumps({"model_max_length": 128, "pad_token": "[PAD]"}))
    (root / "config.json").write_text(json.dumps({"pad_token_id": 0}))
    return root


def test_fastembed_provider_embeds_from_a_local_directory(cli: Cli, tmp_path: Path) -> None:
    """Issue 18: kind = "fastembed" finds onnx/model.onnx and the tokenizer files, pools and normalizes;
    a query word that no note contains still finds its topic by vector."""
    for module in ("onnxruntime", "tokenizers", "onnx"):
        require(importlib.util.find_spec(module) is not None, f"python package {module} (the dev extra)")
    model_dir = _fastembed_dir(tmp_path / "model")
    cli.home.mkdir(parents=True, exist_ok=True)
    config = f'[rag.embedding]\nkind = "fastembed"\nmodel_dir = "{model_dir}"\npooling = "mean"\n'
    (cli.home / "config.toml").write_text(config, "utf-8")
    cli.init()
    engine = Engine(cli)
    try:
        engine("put", title="Morning", body="espresso beans")
        engine("put", title="Afternoon", body="green tea honey")
        engine("put", title="Weekend", body="kite beach wind")
        engine.wait_ready()
        assert engine.search_titles("coffee", mode="lexical") == []
        assert engine.search_titles("coffee", mode="vector")[0] == "Morning"
        assert engine.search_titles("wind", mode="vector")[0] == "Weekend"
        assert engine("rag_status")["providers"]["embedding"]["kind"] == "fastembed"
    finally:
        engine.close()


def test_fastembed_directory_without_a_model_is_a_typed_error(cli: Cli, tmp_path: Path) -> None:
    """Issue 18: a model directory without model files is invalid_config at the first vector search, not a crash."""
    empty = tmp_path / "empty"
    empty.mkdir()
    cli.home.mkdir(parents=True, exist_ok=True)
    (cli.home / "config.toml").write_text(f'[rag.embedding]\nkind = "fastembed"\nmodel_dir = "{empty}"\n', "utf-8")
    cli.init()
    cli.put("Morning", "espresso beans")
    error = cli.err("search", "coffee", "--mode", "vector")
    assert error["code"] in ("invalid_config", "provider_not_configured")
    assert "model_dir" in error["message"] or "pip install" in error["message"]
    (cli.home / "config.toml").write_text(
        f'[rag.embedding]\nkind = "fastembed"\nmodel_dir = "{empty}"\npooling = "max"\n', "utf-8"
    )
    assert cli.err("search", "coffee", "--mode", "vector")["code"] == "invalid_config"
