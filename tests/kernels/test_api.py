"""`api.paged_attention`: both backends under jit with traced metadata, no recompilation when the
lengths change inside one shape bucket."""

import jax
import jax.numpy as jnp
import pytest

from pallas_kernels import api
from pallas_kernels.config import KernelConfig

SMALL = KernelConfig(prefill_rows=32, block_kv=32, num_sms=4, programs_per_sm=1)


def test_unknown_backend_is_an_error(make_batch, Seq):
    args = make_batch([Seq(1, 3)], H=4, KVH=1, Dh=64, page=8)
    with pytest.raises(ValueError, match="backend"):
        api.paged_attention(*args, scale=1.0, backend="cuda")


def test_pallas_backend_compiles_once_per_shape_bucket(make_batch, Seq, check, run):
    traces = []

    @jax.jit
    def step(*args):
        traces.append(1)
        return api.paged_attention(*args, scale=0.125, backend="pallas", config=SMALL)

    # same shapes (T=27 tokens incl. padding, S=5, P=7), different lengths every step
    batches = [
        [Seq(9, 0), Seq(7, 20), Seq(1, 3), Seq(1, 40), Seq(1, 9)],
        [Seq(20, 16), Seq(0, 4), Seq(1, 0), Seq(1, 15), Seq(1, 47)],
        [Seq(2, 30), Seq(2, 2), Seq(1, 1), Seq(1, 7), Seq(1, 8)],
    ]
    for batch in batches:
        n = sum(s.q_len for s in batch)
        args = make_batch(batch, H=8, KVH=2, Dh=64, page=8, pad_tokens=27 - n, cols=7, pages=48)
        check(step(*args), run(api.paged_attention_reference, args, scale=0.125), jnp.float32)
    assert len(traces) == 1


def test_xla_backend_matches_reference(make_batch, seqs, check, run):
    args = make_batch(seqs(16), H=8, KVH=2, Dh=64, page=16, dtype=jnp.bfloat16)
    check(run(api.paged_attention, args, backend="xla"), run(api.paged_attention_reference, args),
          jnp.bfloat16)


def test_plan_built_once_serves_every_layer(make_batch, seqs, check, run):
    """A model builds the plan once per step (it depends only on metadata) and reuses it in every
    layer; the plan also crosses a jit boundary as an argument (SMALL: the serial kernels' plan)."""
    args = make_batch(seqs(8), H=8, KVH=2, Dh=64, page=8)
    q, k, v, table, cu, qoff, kv = args
    k2, v2 = k[::-1], v * 0.5  # a second layer's cache
    N, page, KVH, _ = k.shape

    plan = jax.jit(lambda table, cu, qoff, kv: api.attention_plan(
        table, cu, qoff, kv, num_tokens=q.shape[0], num_heads=q.shape[1], kv_heads=KVH,
        page_size=page, num_pages=N, config=SMALL))(table, cu, qoff, kv)

    def two_layers(plan, q, k, v, k2, v2, table, cu, qoff, kv, scale):
        one = api.paged_attention(q, k, v, table, cu, qoff, kv, scale=scale, backend="pallas",
                                  config=SMALL, plan=plan)
        two = api.paged_attention(q, k2, v2, table, cu, qoff, kv, scale=scale, backend="pallas",
                                  config=SMALL, plan=plan)
        return one, two

    one, two = run(two_layers, (plan, q, k, v, k2, v2, table, cu, qoff, kv), scale=0.125)
    check(one, run(api.paged_attention_reference, args, scale=0.125), jnp.float32)
    check(two, run(api.paged_attention_reference, (q, k2, v2, table, cu, qoff, kv), scale=0.125),
          jnp.float32)


def test_shapes_the_kernels_cannot_take_are_rejected(make_batch, Seq):
    q, k, v, *meta = make_batch([Seq(3, 2)], H=6, KVH=4, Dh=64, page=8)
    with pytest.raises(ValueError, match="multiple of KVH"):
        api.pod_attention(q, k, v, *meta, scale=1.0, interpret=True)
    q, k, v, *meta = make_batch([Seq(3, 2)], H=4, KVH=2, Dh=48, page=8)
    with pytest.raises(ValueError, match="power of two"):
        api.prefill_attention(q, k, v, *meta, scale=1.0, interpret=True)
