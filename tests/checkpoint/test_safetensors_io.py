"""safetensors loading: HF layout -> ours, sharded files with an index, bf16, and clear errors."""

from __future__ import annotations

import json

import jax
import ml_dtypes
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P
from safetensors import safe_open
from safetensors.numpy import save_file

from medha_jax.checkpoint import load_hf_config, load_safetensors_params


def _hf_tensors(model_dir) -> dict[str, np.ndarray]:
    with safe_open(model_dir / "model.safetensors", framework="numpy") as f:
        return {k: f.get_tensor(k) for k in f.keys()}


def _split(model_dir, n_files: int, dtype=None) -> None:
    """Replace model.safetensors by n shards + model.safetensors.index.json (HF's naming)."""
    tensors = _hf_tensors(model_dir)
    if dtype is not None:
        tensors = {k: v.astype(dtype) for k, v in tensors.items()}
    (model_dir / "model.safetensors").unlink()
    names = sorted(tensors)
    weight_map = {}
    for i in range(n_files):
        fname = f"model-{i + 1:05d}-of-{n_files:05d}.safetensors"
        part = names[i::n_files]
        save_file({k: tensors[k] for k in part}, model_dir / fname)
        weight_map.update({k: fname for k in part})
    (model_dir / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": 0}, "weight_map": weight_map}))


def _np(params):
    return {k: _np(v) if isinstance(v, dict) else np.asarray(v) for k, v in params.items()}


@pytest.mark.parametrize("variant,tp", [("tiny-llama3", 8), ("tiny-llama-tied", 4)])
def test_hf_layout_is_converted(variant, tp, data_dir, tp_mesh):
    """Each of our arrays holds exactly the HF tensor it came from (kv heads copied for tp=8,
    vocab padded for 510 over tp=4)."""
    cfg = load_hf_config(data_dir / variant)
    p = _np(load_safetensors_params(data_dir / variant, cfg, tp_mesh(tp), "float32"))
    hf = _hf_tensors(data_dir / variant)
    H, K, Dh, V = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, cfg.vocab_size
    rep = p["layers"]["wk"].shape[1] // K
    for i in range(cfg.num_layers):
        L = lambda s: hf[f"model.layers.{i}.{s}.weight"]
        lay = {k: v[i] for k, v in p["layers"].items()}
        # ours are [out, in] like HF's: heads split out of the output features, kv heads copied
        np.testing.assert_array_equal(lay["wq"].reshape(H * Dh, -1), L("self_attn.q_proj"))
        wk = L("self_attn.k_proj").reshape(K, Dh, -1)  # [K, Dh, D]
        np.testing.assert_array_equal(lay["wk"], np.repeat(wk, rep, axis=0))
        np.testing.assert_array_equal(lay["wo"].reshape(-1, H * Dh), L("self_attn.o_proj"))
        np.testing.assert_array_equal(lay["w_gate"], L("mlp.gate_proj"))
        np.testing.assert_array_equal(lay["w_up"], L("mlp.up_proj"))
        np.testing.assert_array_equal(lay["w_down"], L("mlp.down_proj"))
        np.testing.assert_array_equal(lay["attn_norm"], L("input_layernorm"))
        np.testing.assert_array_equal(lay["mlp_norm"], L("post_attention_layernorm"))
    np.testing.assert_array_equal(p["embed"][:V], hf["model.embed_tokens.weight"])
    assert not p["embed"][V:].any()
    assert ("lm_head" in p) == (not cfg.tie_word_embeddings)
    np.testing.assert_array_equal(p["final_norm"], hf["model.norm.weight"])


def test_sharded_checkpoint_with_index_loads_the_same_params(data_dir, model_copy, tp_mesh):
    mesh = tp_mesh(2)
    cfg = load_hf_config(data_dir / "tiny-llama3")
    single = _np(load_safetensors_params(data_dir / "tiny-llama3", cfg, mesh, "float32"))
    d = model_copy("tiny-llama3")
    _split(d, 3)
    assert not (d / "model.safetensors").exists()
    sharded = load_safetensors_params(d, cfg, mesh, "float32")
    assert sharded["layers"]["wq"].sharding.spec == P("spp", "tp", None, None)
    jax.tree.map(np.testing.assert_array_equal, single, _np(sharded))


def test_bf16_checkpoint_loads_as_either_dtype(data_dir, model_copy, tp_mesh):
    d = model_copy("tiny-llama3")
    _split(d, 2, dtype=ml_dtypes.bfloat16)
    cfg = load_hf_config(d)
    mesh = tp_mesh(2)
    p32 = load_safetensors_params(d, cfg, mesh, "float32")
    p16 = load_safetensors_params(d, cfg, mesh, "bfloat16")
    ref = _hf_tensors(data_dir / "tiny-llama3")["model.norm.weight"].astype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(np.asarray(p32["final_norm"]), ref.astype(np.float32))
    assert p16["embed"].dtype == ml_dtypes.bfloat16 and p32["embed"].dtype == np.float32


def test_errors_name_the_problem(data_dir, model_copy, tp_mesh, tmp_path):
    mesh = tp_mesh(1)
    cfg = load_hf_config(data_dir / "tiny-llama3")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_safetensors_params(tmp_path / "nope", cfg, mesh)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(FileNotFoundError, match="no model.safetensors or model.safetensors.index.json"):
        load_safetensors_params(empty, cfg, mesh)

    d = model_copy("tiny-llama3")
    _split(d, 2)
    (d / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match="names shard 'model-00002-of-00002.safetensors'"):
        load_safetensors_params(d, cfg, mesh)

    d2 = model_copy("tiny-llama2")
    t = _hf_tensors(d2)
    del t["model.layers.1.mlp.up_proj.weight"]
    save_file(t, d2 / "model.safetensors")
    with pytest.raises(KeyError, match="lacks tensor 'model.layers.1.mlp.up_proj.weight'"):
        load_safetensors_params(d2, load_hf_config(d2), mesh)

    d3 = model_copy("tiny-llama-tied")  # no lm_head in the file, but the config says untied
    untied = {**json.loads((d3 / "config.json").read_text()), "tie_word_embeddings": False}
    (d3 / "config.json").write_text(json.dumps(untied))
    with pytest.raises(KeyError, match="lacks tensor 'lm_head.weight'.*tie_word_embeddings=false"):
        load_safetensors_params(d3, load_hf_config(d3), mesh)

    wrong = {**untied, "tie_word_embeddings": True, "intermediate_size": 128}
    (d3 / "config.json").write_text(json.dumps(wrong))
    with pytest.raises(ValueError, match=r"'model.layers.0.mlp.gate_proj.weight' has shape \[96, 64\], "
                                         r"config.json implies \[128, 64\]"):
        load_safetensors_params(d3, load_hf_config(d3), mesh)
