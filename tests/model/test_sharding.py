"""The sharding table and the layouts it implies: specs, kv-head copies, vocab padding, errors."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from medha_jax.mesh import make_mesh
from medha_jax.model import init_kv_cache, init_params, param_shardings
from medha_jax.model import sharding
from medha_jax.model.config import LlamaConfig

CFG = LlamaConfig(vocab_size=500, hidden_size=32, intermediate_size=64, num_layers=2, num_heads=8,
                  num_kv_heads=2, head_dim=8)


def test_specs_come_from_the_table():
    specs = sharding.param_specs(CFG)
    assert specs["embed"] == P("tp", None) and specs["lm_head"] == P("tp", None)
    assert specs["layers"]["wq"] == P("spp", "tp", None, None)  # [L, H, Dh, D]: [out, in]
    assert specs["layers"]["wo"] == P("spp", None, "tp", None)  # [L, D, H, Dh]
    assert specs["layers"]["w_gate"] == P("spp", "tp", None)  # [L, F, D]
    assert specs["layers"]["w_down"] == P("spp", None, "tp")  # [L, D, F]
    assert specs["final_norm"] == P(None)
    assert sharding.KV_CACHE_SPEC == P("spp", "kvp", None, "tp", None)
    tied = dataclasses.replace(CFG, tie_word_embeddings=True)
    assert "lm_head" not in sharding.param_specs(tied)


@pytest.mark.parametrize("tp,kv_heads,repeat,vocab", [(1, 2, 1, 500), (2, 2, 1, 500), (4, 4, 2, 500), (8, 8, 4, 504)])
def test_layout_kv_copies_and_vocab_padding(tp, kv_heads, repeat, vocab):
    lay = sharding.layout(CFG, {"tp": tp})
    assert (lay.kv_heads, lay.kv_repeat, lay.vocab_padded) == (kv_heads, repeat, vocab)


@pytest.mark.parametrize("mesh,needle", [
    ({"tp": 3}, "num_heads=8 is not divisible by tp=3"),
    ({"spp": 4}, "num_layers=2 is not divisible by spp=4"),
    ({"tp": 16}, "num_heads=8"),
    ({"dp": 2}, "unknown axes"),
])
def test_layout_errors(mesh, needle):
    with pytest.raises(ValueError, match=needle):
        sharding.layout(CFG, mesh)


def test_kv_heads_that_neither_split_nor_replicate():
    cfg = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_layers=1,
                      num_heads=12, num_kv_heads=6, head_dim=8)
    with pytest.raises(ValueError, match="num_kv_heads=6 and tp=4"):
        sharding.layout(cfg, {"tp": 4})


def test_cache_and_params_per_device_shapes():
    mesh = make_mesh("kvp=2,spp=2,tp=2")
    k, v = init_kv_cache(CFG, mesh, total_pages=6, page_size=4, dtype=jnp.bfloat16)
    assert k.shape == (2, 6, 4, 2, 8) and k.dtype == jnp.bfloat16
    assert {s.data.shape for s in k.addressable_shards} == {(1, 3, 4, 1, 8)}
    params = init_params(CFG, mesh, seed=0)
    wq = params["layers"]["wq"]
    assert wq.shape == (2, 8, 8, 32) and {s.data.shape for s in wq.addressable_shards} == {(1, 4, 8, 32)}
    assert jax.tree.map(lambda a: a.sharding, params) == param_shardings(CFG, mesh)
    with pytest.raises(ValueError, match="total_pages=5 is not divisible by kvp=2"):
        init_kv_cache(CFG, mesh, total_pages=5, page_size=4)


def test_random_params_do_not_depend_on_the_mesh():
    """init_params on tp=1 and tp=8: same canonical weights (kv-head copies, padding aside)."""
    p1 = init_params(CFG, make_mesh("tp=1", devices=jax.devices()[:1]), seed=3)
    p8 = init_params(CFG, make_mesh("tp=8"), seed=3)
    np.testing.assert_array_equal(np.asarray(p8["layers"]["wq"]), np.asarray(p1["layers"]["wq"]))
    wk8 = np.asarray(p8["layers"]["wk"])  # 8 copies-heads: head g is checkpoint head g // 4
    np.testing.assert_array_equal(wk8, np.repeat(np.asarray(p1["layers"]["wk"]), 4, axis=1))
    e8 = np.asarray(p8["embed"])
    np.testing.assert_array_equal(e8[:500], np.asarray(p1["embed"]))
    assert not e8[500:].any()
