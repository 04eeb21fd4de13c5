"""Orbax params checkpoints: exact round trip into the mesh's shardings, and the layout guard."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from medha_jax.checkpoint import load_hf_config, load_safetensors_params, restore_params, save_params
from medha_jax.model import param_shardings


def test_round_trip_onto_another_mesh_with_the_same_layout(data_dir, tp_mesh, tmp_path):
    cfg = load_hf_config(data_dir / "tiny-llama3")
    mesh = tp_mesh(2)
    params = load_safetensors_params(data_dir / "tiny-llama3", cfg, mesh, "float32")
    save_params(tmp_path / "ckpt", cfg, params, mesh)

    other = tp_mesh(2, spp=2)  # same kv heads / vocab padding, different devices and sharding
    cfg2, restored = restore_params(tmp_path / "ckpt", other)
    assert cfg2 == cfg and cfg2.rope_scaling == cfg.rope_scaling
    assert jax.tree.map(lambda a: a.sharding, restored) == param_shardings(cfg, other)
    jax.tree.map(lambda a, b: np.testing.assert_array_equal(np.asarray(a), np.asarray(b)), params, restored)

    _, bf16 = restore_params(tmp_path / "ckpt", mesh, dtype=jnp.bfloat16)
    assert bf16["layers"]["wq"].dtype == jnp.bfloat16
    np.testing.assert_array_equal(np.asarray(bf16["embed"]), np.asarray(params["embed"]).astype(jnp.bfloat16))


def test_layout_mismatch_and_bad_paths(data_dir, tp_mesh, tmp_path):
    cfg = load_hf_config(data_dir / "tiny-llama3")
    mesh = tp_mesh(1)
    params = load_safetensors_params(data_dir / "tiny-llama3", cfg, mesh, "float32")
    save_params(tmp_path / "ckpt", cfg, params, mesh)
    with pytest.raises(FileExistsError, match="already exists"):
        save_params(tmp_path / "ckpt", cfg, params, mesh)
    with pytest.raises(ValueError, match="saved with 2 kv heads .* this mesh needs 4"):
        restore_params(tmp_path / "ckpt", tp_mesh(4))  # tp=4 copies the 2 kv heads
    with pytest.raises(FileNotFoundError, match="not a medha-jax params checkpoint"):
        restore_params(data_dir / "tiny-llama3", mesh)


def test_a_checkpoint_saved_with_in_out_weights_restores_transposed(data_dir, tp_mesh, tmp_path):
    """Checkpoints written before linear weights were stored [out, in] say nothing of their weight
    layout and hold them [in, out]: they restore transposed, into this mesh's shardings."""
    import json

    from medha_jax.checkpoint.orbax_io import META_FILE

    cfg = load_hf_config(data_dir / "tiny-llama3")
    params = load_safetensors_params(data_dir / "tiny-llama3", cfg, tp_mesh(2), "float32")
    to_in_out = {"wq": (0, 3, 1, 2), "wk": (0, 3, 1, 2), "wv": (0, 3, 1, 2), "wo": (0, 2, 3, 1),
                 "w_gate": (0, 2, 1), "w_up": (0, 2, 1), "w_down": (0, 2, 1)}  # the layout before
    old = {**params, "layers": {k: a.transpose(to_in_out[k]) if k in to_in_out else a
                                for k, a in params["layers"].items()}}
    save_params(tmp_path / "ckpt", cfg, old, tp_mesh(2))
    meta_path = tmp_path / "ckpt" / META_FILE
    meta = json.loads(meta_path.read_text())
    assert meta["weight_layout"] == "out_in"
    del meta["weight_layout"]  # as the earlier release wrote it
    meta_path.write_text(json.dumps(meta))
    other = tp_mesh(2, spp=2)
    _, restored = restore_params(tmp_path / "ckpt", other)
    assert jax.tree.map(lambda a: a.sharding, restored) == param_shardings(cfg, other)
    jax.tree.map(lambda a, b: np.testing.assert_array_equal(np.asarray(a), np.asarray(b)), params, restored)

    meta["weight_layout"] = "blocked_8x8"
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(ValueError, match="'blocked_8x8', which this release does not know"):
        restore_params(tmp_path / "ckpt", other)
