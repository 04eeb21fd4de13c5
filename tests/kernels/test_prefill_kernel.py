"""Chunked-prefill kernel (interpret mode) vs the dense reference.

The prefill kernel takes every sequence as M-row tiles (decodes become 1-token tiles), so the
hybrid batch checks it end to end: several prefill sequences, bottom-right causal alignment,
chunks that are not block multiples, context 0, KVP shards with no pages or large q_offsets.
"""

import jax.numpy as jnp
import pytest

from pallas_kernels.config import KernelConfig
from pallas_kernels.prefill import prefill_attention
from pallas_kernels.reference import paged_attention_reference

SMALL = KernelConfig(prefill_rows=32, block_kv=32, num_sms=4, programs_per_sm=1)


@pytest.mark.parametrize(
    "G,KVH,Dh,page,dtype",
    [
        (1, 2, 128, 16, jnp.float32),
        (4, 2, 64, 8, jnp.float32),
        (8, 1, 128, 8, jnp.bfloat16),
        (3, 2, 64, 16, jnp.float32),  # G not a power of two: rows padded to M
    ],
)
def test_prefill_matches_reference(make_batch, seqs, check, run, G, KVH, Dh, page, dtype, interpret):
    args = make_batch(seqs(page), H=G * KVH, KVH=KVH, Dh=Dh, page=page, dtype=dtype)
    check(run(prefill_attention, args, config=SMALL, interpret=interpret),
          run(paged_attention_reference, args), dtype)


def test_prefill_long_chunk_many_blocks_and_splits(make_batch, Seq, check, run, interpret):
    """One long chunk over a long context: unmasked interior blocks, masked diagonal, KV splits."""
    cfg = KernelConfig(prefill_rows=64, block_kv=16, num_sms=16, max_prefill_splits=3)
    args = make_batch([Seq(70, 45), Seq(33, 0)], H=4, KVH=1, Dh=64, page=8)
    check(run(prefill_attention, args, config=cfg, interpret=interpret),
          run(paged_attention_reference, args), jnp.float32)
