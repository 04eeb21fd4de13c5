"""`paged_attention_xla` (the engine's CPU backend) vs the dense reference."""

import jax.numpy as jnp
import pytest

from pallas_kernels.reference import paged_attention_reference, paged_attention_xla


@pytest.mark.parametrize(
    "G,KVH,Dh,page,dtype,block_pages",
    [
        (1, 2, 64, 8, jnp.float32, 8),
        (4, 2, 128, 16, jnp.float32, 2),
        (8, 1, 64, 16, jnp.bfloat16, 1),
        (4, 1, 64, 8, jnp.float32, 3),
    ],
)
def test_xla_matches_reference(make_batch, seqs, check, run, G, KVH, Dh, page, dtype, block_pages):
    """Decode and prefill blocks of the same size (the engine's defaults differ; see the next test)."""
    args = make_batch(seqs(page), H=G * KVH, KVH=KVH, Dh=Dh, page=page, dtype=dtype)
    check(run(paged_attention_xla, args, block_pages=block_pages, prefill_block_pages=block_pages),
          run(paged_attention_reference, args), dtype)


@pytest.mark.parametrize("block_q,small_block_q,prefill_block_pages", [(None, None, 16), (32, 32, 8), (16, 4, 3)])
def test_xla_long_chunks_span_several_tiles(make_batch, Seq, check, run, block_q, small_block_q, prefill_block_pages):
    """Chunks longer than one tile, ending mid-tile (in big tiles, then small ones), next to
    decodes; None: the engine's tiles."""
    batch = [Seq(300, 13), Seq(70, 13), Seq(33, 0), Seq(64, 64), Seq(1, 100), Seq(1, 0), Seq(129, 250)]
    args = make_batch(batch, H=4, KVH=2, Dh=64, page=8, pad_tokens=5)
    check(run(paged_attention_xla, args, block_q=block_q, small_block_q=small_block_q,
              prefill_block_pages=prefill_block_pages),
          run(paged_attention_reference, args), jnp.float32)

