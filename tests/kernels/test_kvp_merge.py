"""KVP: attention over two shards of the page table (split by page ranges), merged by LSE,
equals attention over the whole. The second shard sees keys shifted by the cut, so its
q_offsets shrink by the cut; sequences whose keys all sit in one shard get lse = -inf from the other."""

import functools

import jax.numpy as jnp
import numpy as np
import pytest

from pallas_kernels.config import KernelConfig
from pallas_kernels.merge import merge_attention
from pallas_kernels.pod import pod_attention
from pallas_kernels.reference import paged_attention_reference, paged_attention_xla

SMALL = KernelConfig(prefill_rows=32, block_kv=16, num_sms=4, programs_per_sm=1)


def shards(args, cut_pages):
    q, k, v, table, cu, ctx, kv = args
    page = k.shape[1]
    cut = cut_pages * page
    P = table.shape[1]
    first = jnp.pad(table[:, :cut_pages], ((0, 0), (0, P - cut_pages)))  # same shapes: one compile
    second = jnp.pad(table[:, cut_pages:], ((0, 0), (0, cut_pages)))
    a = (q, k, v, first, cu, ctx, jnp.minimum(kv, cut))
    b = (q, k, v, second, cu, ctx - cut, jnp.maximum(kv - cut, 0))
    return a, b


@pytest.mark.parametrize("backend", ["pallas", "xla"])
def test_two_shards_merge_to_whole(make_batch, Seq, check, run, backend, interpret):
    page = 8
    batch = [Seq(12, 5), Seq(9, 30), Seq(3, 0), Seq(1, 2), Seq(1, 17), Seq(1, 40), Seq(1, 8)]
    args = make_batch(batch, H=8, KVH=2, Dh=64, page=page)
    a, b = shards(args, cut_pages=2)
    fn = paged_attention_xla
    if backend == "pallas":
        fn = functools.partial(pod_attention, config=SMALL, interpret=interpret)
    both = run(lambda *ab, scale: [fn(*ab[:7], scale=scale), fn(*ab[7:], scale=scale)], (*a, *b))
    parts = [both[0], both[1]]
    lse_b = np.asarray(parts[1][1])
    assert np.isneginf(lse_b[3]).all(), "seq 3 (kv 3) has no key in the second shard"
    merged = merge_attention(jnp.stack([p[0] for p in parts]), jnp.stack([p[1] for p in parts]))
    check(merged, run(paged_attention_reference, args), jnp.float32)
