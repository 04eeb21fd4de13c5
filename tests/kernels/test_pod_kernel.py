"""Fused POD kernel (interpret mode) vs the dense reference on hybrid batches."""

import jax.numpy as jnp
import pytest

from pallas_kernels.config import KernelConfig
from pallas_kernels.pod import pod_attention
from pallas_kernels.reference import paged_attention_reference

SMALL = KernelConfig(prefill_rows=32, block_kv=32, num_sms=4, programs_per_sm=1)
SPLIT = KernelConfig(prefill_rows=16, block_kv=16, num_sms=64, max_prefill_splits=4, max_decode_splits=3)


@pytest.mark.parametrize(
    "G,KVH,Dh,page,dtype",
    [
        (1, 2, 64, 8, jnp.float32),
        (4, 2, 128, 16, jnp.float32),
        (8, 1, 64, 16, jnp.bfloat16),
        (8, 2, 128, 8, jnp.float32),
        (4, 1, 64, 8, jnp.bfloat16),
        (1, 1, 128, 16, jnp.bfloat16),
    ],
)
def test_pod_matches_reference(make_batch, seqs, check, run, G, KVH, Dh, page, dtype, interpret):
    args = make_batch(seqs(page), H=G * KVH, KVH=KVH, Dh=Dh, page=page, dtype=dtype)
    want = run(paged_attention_reference, args)
    check(run(pod_attention, args, config=SMALL, interpret=interpret), want, dtype)


@pytest.mark.parametrize("page", [8, 16])
def test_pod_with_kv_splits(make_batch, seqs, check, run, page, interpret):
    """A large wave target splits prefill tiles and decodes over KV; the merge must be exact."""
    args = make_batch(seqs(page), H=8, KVH=2, Dh=64, page=page)
    check(run(pod_attention, args, config=SPLIT, interpret=interpret), run(paged_attention_reference, args),
          jnp.float32)


@pytest.mark.parametrize("kind", ["decodes", "prefills"])
def test_pod_single_kind_batches(make_batch, Seq, check, run, kind, interpret):
    """A batch of one kind leaves the other kind's work list empty (only NOOP rows)."""
    if kind == "decodes":
        batch = [Seq(1, c) for c in (0, 7, 8, 9, 40)]
    else:
        batch = [Seq(9, 0), Seq(17, 30)]
    args = make_batch(batch, H=8, KVH=2, Dh=64, page=8)
    check(run(pod_attention, args, config=SMALL, interpret=interpret), run(paged_attention_reference, args),
          jnp.float32)
