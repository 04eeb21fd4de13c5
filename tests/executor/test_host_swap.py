"""HostSwap: whole KV pages copied device -> host -> device, checked against numpy on the same data.

The cache is the engine's own (`init_kv_cache`, sharded over a tp x spp x kvp mesh of host CPU
devices, bf16 and fp8 pages), filled with random values; pages are saved to host slots, other
pages restored from them, and the resulting cache must equal the numpy copy with the same page
moves, leaf by leaf (fp8: values and scales), with its sharding unchanged.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from medha_jax.executor.host_swap import HostSwap
from medha_jax.host_page_store import SwapOp
from medha_jax.mesh import make_mesh
from medha_jax.model.config import LlamaConfig
from medha_jax.model.sharded_forward import init_kv_cache
from pallas_kernels import kv_quant

CFG = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_layers=4, num_heads=4,
                  num_kv_heads=2, head_dim=8, max_position_embeddings=128)


def _mesh(spec):
    d = dict(item.split("=") for item in spec.split(","))
    n = int(d.get("tp", 1)) * int(d.get("spp", 1)) * int(d.get("kvp", 1))
    return make_mesh(spec, jax.devices()[:n])


def _filled(mesh, total_pages, dtype, seed):
    kv = init_kv_cache(CFG, mesh, total_pages, 4, dtype)
    rng = np.random.default_rng(seed)

    def fill(a):
        x = rng.integers(0, 120, a.shape).astype(a.dtype) if a.dtype == jnp.uint8 else \
            rng.standard_normal(a.shape).astype(a.dtype)
        return jax.device_put(x, a.sharding)

    return jax.tree.map(fill, kv)


@pytest.mark.parametrize("mesh_spec,dtype", [("tp=1", jnp.bfloat16), ("tp=2,spp=2,kvp=2", jnp.bfloat16),
                                             ("tp=2,kvp=2", kv_quant.FP8)])
def test_saved_pages_come_back_exactly_where_they_are_restored(mesh_spec, dtype):
    mesh = _mesh(mesh_spec)
    kvp = dict(item.split("=") for item in mesh_spec.split(",")).get("kvp", "1")
    per_group, groups = 6, int(kvp)
    kv_k, kv_v = _filled(mesh, per_group * groups, dtype, seed=0)
    want = [np.array(a) for a in jax.tree.leaves((kv_k, kv_v))]
    shardings = jax.tree.map(lambda a: a.sharding, (kv_k, kv_v))
    swap = HostSwap(num_slots=5, pages_per_group=per_group, kv_shardings=shardings)
    g = groups - 1
    saves = [SwapOp("out", 0, 1, 3), SwapOp("out", g, 4, 0), SwapOp("out", 0, 5, 1)]
    # Restore slot 3 into group 0's page 2, slot 0 into group g's page 0; then save page 2 (now
    # holding page 1's data) to slot 0, which the restore above read first; restore it to page 5.
    ops = saves + [SwapOp("in", 0, 2, 3), SwapOp("in", g, 0, 0), SwapOp("out", 0, 2, 0), SwapOp("in", 0, 5, 0)]
    kv_k, kv_v = swap.apply(ops, kv_k, kv_v)
    for a in want:  # the same moves on the page axis (1) of every leaf
        a[:, 0 * per_group + 2] = a[:, 0 * per_group + 1]
        a[:, g * per_group + 0] = a[:, g * per_group + 4]
        a[:, 0 * per_group + 5] = a[:, 0 * per_group + 2]
    got = jax.tree.leaves((kv_k, kv_v))
    assert len(got) == len(want) == (4 if dtype == kv_quant.FP8 else 2)
    for a, w in zip(got, want):
        np.testing.assert_array_equal(np.array(a), w)
    assert jax.tree.map(lambda a: a.sharding, (kv_k, kv_v)) == shardings


def test_many_pages_in_one_run_pad_to_a_power_of_two_and_drop_the_padding():
    mesh = _mesh("tp=1")
    kv_k, kv_v = _filled(mesh, 32, jnp.float32, seed=1)
    want = [np.array(a) for a in (kv_k, kv_v)]
    swap = HostSwap(num_slots=16, pages_per_group=32, kv_shardings=(kv_k.sharding, kv_v.sharding))
    outs = [SwapOp("out", 0, p, p - 3) for p in range(3, 14)]  # 11 pages: padded to 16
    ins = [SwapOp("in", 0, 31 - i, i) for i in range(11)]
    kv_k, kv_v = swap.apply(outs + ins, kv_k, kv_v)
    for a in want:
        a[:, 21:32] = a[:, 3:14][:, ::-1]
    for a, w in zip((kv_k, kv_v), want):
        np.testing.assert_array_equal(np.array(a), w)
