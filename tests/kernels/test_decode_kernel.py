"""Split-K paged decode kernel (interpret mode) vs the dense reference on decode batches."""

import jax.numpy as jnp
import pytest

from pallas_kernels.config import KernelConfig
from pallas_kernels.decode import decode_attention
from pallas_kernels.reference import paged_attention_reference


def decode_batch(Seq, p):
    """Decodes at kv 1, page - 1, page, page + 1, long; one with no pages (KVP shard); one idle."""
    return [Seq(1, 0), Seq(1, p - 2), Seq(1, p - 1), Seq(1, p), Seq(1, 5 * p + 3), Seq(1, 900, 0),
            Seq(0, 4), Seq(1, 300, 2 * p + 1)]


@pytest.mark.parametrize(
    "G,KVH,Dh,page,dtype,splits",
    [
        (1, 4, 64, 8, jnp.float32, 4),
        (4, 2, 128, 16, jnp.float32, 8),  # more splits than blocks: empty splits drop out
        (8, 2, 64, 16, jnp.bfloat16, 3),
        (8, 1, 128, 8, jnp.float32, 1),
    ],
)
def test_decode_matches_reference(make_batch, Seq, check, run, G, KVH, Dh, page, dtype, splits, interpret):
    args = make_batch(decode_batch(Seq, page), H=G * KVH, KVH=KVH, Dh=Dh, page=page, dtype=dtype)
    cfg = KernelConfig(block_kv=16 if page == 8 else 32)
    check(run(decode_attention, args, config=cfg, splits=splits, interpret=interpret),
          run(paged_attention_reference, args), dtype)


def test_static_splits_fill_the_gpu_without_flooding_the_merge():
    """The serial path's decode splits: 16 for a few sequences (a long context spread over the
    SMs), fewer as the bucket's sequences fill the grid, 1 once they alone fill it; never more
    than the table's KV blocks. The grid (and the partials the merge reads) stays within a few
    waves of programs, or one program per (sequence, kv head)."""
    from pallas_kernels.decode import decode_splits

    cfg = KernelConfig(num_sms=132, programs_per_sm=2)
    got = [decode_splits(s, 8, 512, cfg) for s in (1, 4, 8, 16, 32, 64, 128, 256, 1024)]
    assert got == [16, 16, 16, 9, 5, 3, 2, 1, 1]
    assert decode_splits(1, 8, 3, cfg) == 3  # a 3-block table: at most 3 splits
    for s in (1, 7, 33, 300):
        assert s * 8 * decode_splits(s, 8, 512, cfg) <= max(s * 8, cfg.decode_grid_waves * cfg.wave) + s * 8


@pytest.mark.parametrize("knob", ["decode_grid_waves", "max_decode_splits", "decode_num_warps"])
def test_decode_knobs_below_one_are_refused_by_name(knob):
    with pytest.raises(ValueError, match=f"{knob} must be >= 1"):
        KernelConfig(**{knob: 0})
