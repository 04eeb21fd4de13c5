"""A per-step attention plan (`attention_plan`: the work lists built once from the metadata) used
for every layer of a flattened multi-layer cache gives each layer's attention, for the serial
kernels and the fused POD kernel alike (interpret mode off-GPU); a plan the backend cannot use is
refused by name."""

import jax
import jax.numpy as jnp
import pytest

from pallas_kernels.api import attention_plan, paged_attention
from pallas_kernels.config import KernelConfig
from pallas_kernels.reference import paged_attention_reference

LAYERS = 3


@pytest.mark.parametrize("fuse", [False, True])
def test_one_plan_serves_every_layer(make_batch, seqs, check, run, fuse, interpret):
    q, k, v, table, cu, qoff, kvl = make_batch(seqs(8), H=8, KVH=2, Dh=64, page=8)
    N = k.shape[0]
    keys = jax.random.split(jax.random.key(0), 2 * LAYERS)
    # every layer its own pages: k_all, v_all [L, N, page, KVH, Dh], flattened as a model's cache is
    k_all = jnp.stack([k] + [jax.random.normal(keys[i], k.shape) for i in range(LAYERS - 1)])
    v_all = jnp.stack([v] + [jax.random.normal(keys[LAYERS + i], v.shape) for i in range(LAYERS - 1)])
    k_flat, v_flat = (a.reshape((LAYERS * N,) + a.shape[2:]) for a in (k_all, v_all))
    cfg = KernelConfig(prefill_rows=32, block_kv=32, num_sms=4, programs_per_sm=1, fuse_hybrid=fuse)

    def layers(q, k_flat, v_flat, table, cu, qoff, kvl, *, scale):
        plan = attention_plan(table, cu, qoff, kvl, num_tokens=q.shape[0], num_heads=q.shape[1],
                              kv_heads=k_flat.shape[2], page_size=k_flat.shape[1], num_pages=N, config=cfg)
        return [paged_attention(q, k_flat, v_flat, table + layer * N, cu, qoff, kvl, scale=scale, backend="pallas",
                                config=cfg, interpret=interpret, plan=plan.with_first_page(layer * N))
                for layer in range(LAYERS)]

    got = run(layers, (q, k_flat, v_flat, table, cu, qoff, kvl))
    for layer in range(LAYERS):
        want = run(paged_attention_reference, (q, k_all[layer], v_all[layer], table, cu, qoff, kvl))
        check(got[layer], want, jnp.float32)


def test_a_plan_the_backend_cannot_use_is_refused(make_batch, seqs):
    q, k, v, table, cu, qoff, kvl = make_batch(seqs(8), H=8, KVH=2, Dh=64, page=8)
    serial = KernelConfig(prefill_rows=32, block_kv=32, num_sms=4, programs_per_sm=1)
    fused = KernelConfig(prefill_rows=32, block_kv=32, num_sms=4, programs_per_sm=1, fuse_hybrid=True)
    shapes = dict(num_tokens=q.shape[0], num_heads=8, kv_heads=2, page_size=8, num_pages=k.shape[0])
    plan = attention_plan(table, cu, qoff, kvl, config=serial, **shapes)
    with pytest.raises(ValueError, match="SerialPlan; fuse_hybrid=True needs a PodPlan"):
        paged_attention(q, k, v, table, cu, qoff, kvl, scale=0.125, backend="pallas", config=fused, plan=plan)
    with pytest.raises(ValueError, match="xla backend takes no plan"):
        paged_attention(q, k, v, table, cu, qoff, kvl, scale=0.125, backend="xla", plan=plan)
