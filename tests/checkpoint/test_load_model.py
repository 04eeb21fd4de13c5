"""load_model: the one entry point for "demo", HF directories and converted Orbax checkpoints."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from medha_jax.checkpoint import convert_hf_to_orbax, load_model
from medha_jax.tokenizer import Tokenizer


def test_hf_dir_then_converted_orbax_dir(data_dir, tp_mesh, tmp_path):
    mesh = tp_mesh(2)
    cfg, params, tok = load_model(data_dir / "tiny-llama3", mesh, "float32")
    assert isinstance(tok, Tokenizer) and set(tok.eos_token_ids) == {1, 2} and tok.bos_token_id == 0
    convert_hf_to_orbax(data_dir / "tiny-llama3", tmp_path / "conv", mesh, "float32")
    assert (tmp_path / "conv" / "tokenizer.json").is_file()
    cfg2, params2, tok2 = load_model(tmp_path / "conv", mesh, "float32")
    assert cfg2 == cfg and tok2.encode("hello") == tok.encode("hello")
    jax.tree.map(lambda a, b: np.testing.assert_array_equal(np.asarray(a), np.asarray(b)), params, params2)


def test_tokenizer_requirement_and_errors(data_dir, tp_mesh, tmp_path):
    mesh = tp_mesh(1)
    with pytest.raises(FileNotFoundError, match="no tokenizer.json in"):
        load_model(data_dir / "tiny-llama2", mesh)
    cfg, params, tok = load_model(data_dir / "tiny-llama2", mesh, require_tokenizer=False)
    assert tok is None and params["embed"].dtype == "bfloat16"
    with pytest.raises(FileNotFoundError, match="neither 'demo' nor an existing directory"):
        load_model(tmp_path / "missing", mesh)
    with pytest.raises(ValueError, match="unsupported dtype 'float16'"):
        load_model("demo", mesh, "float16")


def test_dummy_load_format_needs_only_config_json(data_dir, tp_mesh, tmp_path):
    """Random weights of the real checkpoint's shapes and shardings, from config.json + tokenizer alone."""
    mesh = tp_mesh(2)
    cfg, real, _ = load_model(data_dir / "tiny-llama3", mesh, "bfloat16")
    d = tmp_path / "config-only"
    d.mkdir()
    for f in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        (d / f).write_bytes((data_dir / "tiny-llama3" / f).read_bytes())
    with pytest.raises(FileNotFoundError):
        load_model(d, mesh, "bfloat16")  # no weight files: only "dummy" can serve it
    cfg2, dummy, tok = load_model(d, mesh, "bfloat16", seed=3, load_format="dummy")
    assert cfg2 == cfg and tok is not None
    jax.tree.map(lambda a, b: (a.shape, a.dtype, a.sharding) == (b.shape, b.dtype, b.sharding) or pytest.fail("layout"),
                 real, dummy)
    assert not np.array_equal(np.asarray(real["layers"]["wq"]), np.asarray(dummy["layers"]["wq"]))
    _, again, _ = load_model(d, mesh, "bfloat16", seed=3, load_format="dummy")
    np.testing.assert_array_equal(np.asarray(again["layers"]["wq"]), np.asarray(dummy["layers"]["wq"]))
    with pytest.raises(ValueError, match="load_format"):
        load_model(d, mesh, load_format="npz")
