"""`paged_attention_xla` (the engine's CPU backend) vs the dense reference, and the scheduler's
restatement of its tiles (`attention_tiling`, which imports no JAX) vs its defaults."""

import inspect

import jax.numpy as jnp
import pytest

import pallas_kernels.reference as ref
from medha_jax.config import EngineConfig
from medha_jax.scheduler.attention_tiling import Tiling, decode_span
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


@pytest.mark.parametrize("block_q,mid_block_q,small_block_q,prefill_block_pages",
                         [(None, None, None, 16), (32, None, 32, 8), (16, None, 4, 3), (64, 16, 4, 3)])
def test_xla_long_chunks_span_several_tiles(make_batch, Seq, check, run, block_q, mid_block_q, small_block_q,
                                            prefill_block_pages):
    """Chunks longer than one tile, ending mid-tile (in big tiles, then middle and small ones),
    next to decodes; None: the engine's tiles."""
    batch = [Seq(300, 13), Seq(70, 13), Seq(33, 0), Seq(64, 64), Seq(1, 100), Seq(1, 0), Seq(129, 250)]
    args = make_batch(batch, H=4, KVH=2, Dh=64, page=8, pad_tokens=5)
    check(run(paged_attention_xla, args, block_q=block_q, mid_block_q=mid_block_q, small_block_q=small_block_q,
              prefill_block_pages=prefill_block_pages),
          run(paged_attention_reference, args), jnp.float32)


def test_the_default_tiling_is_the_xla_backends_and_the_engines():
    """attention_tiling restates the backend's tile sizes and key blocks and the engine's default
    page size and smallest buckets (the scheduler imports no JAX): they must agree with the code
    that runs."""
    xla = inspect.signature(ref.paged_attention_xla).parameters
    cfg = EngineConfig()
    t = Tiling()
    assert t == Tiling.for_engine(cfg.page_size, cfg.min_page_bucket, cfg.min_seq_bucket)
    assert (t.tile_q, t.mid_tile_q, t.small_tile_q) == (ref.XLA_BLOCK_Q, ref.XLA_MID_BLOCK_Q, ref.XLA_SMALL_BLOCK_Q)
    assert ref.tile_sizes() == (t.tile_q, t.mid_tile_q, t.small_tile_q)
    assert (t.mid_key_splits, t.small_key_splits) == (ref.key_splits(t.mid_tile_q), ref.key_splits(t.small_tile_q))
    assert t.prefill_big_blocks == ref.XLA_PREFILL_BIG_BLOCKS and xla["prefill_big_blocks"].default is None
    assert t.prefill_block_keys == xla["prefill_block_pages"].default * cfg.page_size
    assert xla["block_pages"].default is None  # then XLA_DECODE_BLOCK_KEYS, in whole pages
    assert t.decode_block_keys == max(1, ref.XLA_DECODE_BLOCK_KEYS // cfg.page_size) * cfg.page_size
    assert Tiling.for_engine(64, 8, 4).decode_block_keys == 64 == ref.XLA_DECODE_BLOCK_KEYS  # one page
    assert Tiling.for_engine(128, 8, 4).decode_block_keys == 128  # never less than a page


def test_the_longest_decode_walks_alone(make_batch, Seq, check, run):
    """One long decode beside short ones and a prefill chunk: `decode_alone` sends it to a
    one-query tile (every slot of the batched loop would otherwise walk its 700 keys) and the rest
    to the batched loop; the outputs are the reference's either way. Equal decodes stay together."""
    batch = [Seq(1, 40), Seq(1, 700), Seq(1, 33), Seq(20, 10), Seq(1, 50)]
    args = make_batch(batch, H=8, KVH=2, Dh=64, page=8)
    check(run(paged_attention_xla, args), run(paged_attention_reference, args), jnp.float32)
    lim = jnp.array([41, 701, 34, 0, 51])  # keys each decode sees (0: the prefill chunk)
    # together: 5 slots x 704 keys; apart: 5 x 64 for the rest plus 768 in tile blocks of 128
    assert ref.decode_alone(lim, 64, 128).tolist() == [False, True, False, False, False]
    assert not ref.decode_alone(jnp.array([600, 600, 600, 600]), 64, 128).any()
    assert not ref.decode_alone(jnp.zeros(4, jnp.int32), 64, 128).any()  # no decodes


@pytest.mark.parametrize("budget", [0, 24 * 1024, 48 * 1024, None, 1 << 30],
                         ids=["off", "one-small-block", "two-small-blocks", "default", "whole-table"])
def test_decodes_walk_whole_big_blocks_then_small_ones(make_batch, Seq, check, run, budget):
    """Decodes in 6 slots x 2 KV heads x 32 dims x 8-key pages (12 KB of keys a page over all slots)
    with 2-page small blocks: a 24 KB budget fits one small block (no big blocks), 48 KB a big block
    of 4 pages, the default and 1 GB the 13-page table rounded down to whole small blocks (12).
    Lengths below, at and past the block edges, a decode of no keys and a prefill chunk: the outputs
    are the reference's whatever the budget."""
    batch = [Seq(1, 15), Seq(1, 16), Seq(1, 31), Seq(1, 97), Seq(1, 0), Seq(9, 40)]
    args = make_batch(batch, H=8, KVH=2, Dh=32, page=8, cols=13)
    check(run(paged_attention_xla, args, block_pages=2, decode_big_block_bytes=budget),
          run(paged_attention_reference, args), jnp.float32)
    assert [ref.decode_big_pages(6, 13, 8, 2, 32, 2, b) for b in (0, 24 * 1024, 48 * 1024, 1 << 30)] == [2, 2, 4, 12]
    # the default budget: 4 MB on an AVX-512 host (the whole table here), none elsewhere
    assert ref.decode_big_pages(6, 13, 8, 2, 32, 2) == (12 if ref.host_has_avx512() else 2)
    # 4 MB for the offline job's decodes (16 slots, 2 KV heads x 64 dims, 16-key pages, a 64-page table):
    # 512-key big blocks; 64 slots: 128 keys
    assert ref.decode_big_pages(16, 64, 16, 2, 64, 4, 4 << 20) * 16 == 512
    assert ref.decode_big_pages(64, 64, 16, 2, 64, 4, 4 << 20) * 16 == 128


def test_decode_big_blocks_follow_the_host(tmp_path):
    """Big decode blocks are the default only where the CPU flags list avx512f (they made the engine's
    decode tick 1.2-1.5x slower on an AVX2 EPYC, 0.74-0.94x on an AVX-512 Xeon)."""
    info = tmp_path / "cpuinfo"
    for flags, want in (("fpu sse2 avx2 fma", False), ("fpu avx2 avx512f avx512bw", True), ("fpu avx512fp16", False)):
        info.write_text(f"processor\t: 0\nflags\t\t: {flags}\n")
        assert ref.host_has_avx512(str(info)) is want
    assert ref.host_has_avx512(str(tmp_path / "missing")) is False
    assert ref.XLA_DECODE_BIG_BLOCK_BYTES == ((4 << 20) if ref.host_has_avx512() else 0)


@pytest.mark.parametrize("big", [1, 2, 3, None], ids=["off", "two", "three", "default"])
def test_the_widest_tiles_walk_whole_big_blocks_first(make_batch, Seq, check, run, big):
    """256-query tiles (blocks of 2 pages of 8 keys) whose first row sees 0, 1, 2, 3, 5 and 6 whole
    blocks, on and off the block edges, walk those `big` at a time as one block, then the rest
    one at a time (`prefill_big_blocks`); beside them a 128-query tile and decodes, which do not:
    the outputs are the reference's whatever the grouping."""
    batch = [Seq(256, 0), Seq(256, 16), Seq(256, 33), Seq(256, 48), Seq(300, 80), Seq(256, 101), Seq(128, 60),
             Seq(1, 90)]
    args = make_batch(batch, H=8, KVH=2, Dh=32, page=8)
    check(run(paged_attention_xla, args, prefill_block_pages=2, prefill_big_blocks=big),
          run(paged_attention_reference, args), jnp.float32)


@pytest.mark.parametrize("split_q", [1, None, 1024], ids=["off", "default", "wide"])
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16], ids=["f32", "bf16"])
def test_narrow_tiles_walk_key_blocks_side_by_side(make_batch, Seq, check, run, split_q, dtype):
    """Chunks far into their context, in blocks of 16 keys: a 128-query tile walks 4 of its whole
    key blocks per loop step (`key_splits` by default), a 32-query tile 8, then merges
    the blocks' softmax states and walks the rest (whole groups stop short of the frontier; the
    masked blocks go one at a time). Beside them a 256-token chunk (one block per step), a KVP
    shard holding only earlier keys, a chunk whose context is under one group, and decodes; 1:
    one block per step everywhere (the loop before key splits)."""
    batch = [Seq(128, 700), Seq(32, 509), Seq(96, 333), Seq(256, 300), Seq(40, 900, 37), Seq(32, 20),
             Seq(1, 650), Seq(1, 40)]
    assert ref.key_splits(128) == 4 and ref.key_splits(32) == 8 and ref.key_splits(256) == 1
    args = make_batch(batch, H=8, KVH=2, Dh=32, page=8, dtype=dtype)
    check(run(paged_attention_xla, args, prefill_block_pages=2, split_q=split_q),
          run(paged_attention_reference, args), dtype)


@pytest.mark.parametrize("page", [16, 64])
def test_the_predictor_counts_the_decode_walk_the_backend_takes(page):
    """`attention_tiling.decode_span` (the scheduler, no JAX) restates `decode_alone`'s choice and
    the keys the chosen walk covers; on a grid of decode batches laid out as the engine buckets
    them (sequence slots and page-table width in powers of two, the smallest buckets of
    `Tiling.for_engine`), both choose alike and count the same keys. A decode sees its cached keys
    plus its own (lim = kv + 1); lengths sit off the block edges, where the two count alike."""
    t = Tiling.for_engine(page, 8, 4)
    block_d = t.decode_block_keys
    chosen = []
    for num_seqs in (1, 2, 3, 16, 40):
        for first in (100, 700, 5000, 40000):
            for second in (0, 50, 600, 3000):
                if second >= first or (num_seqs == 1) != (second == 0):  # second: 0 iff one decode
                    continue
                slots = max(t.min_seq_slots, 1 << (num_seqs - 1).bit_length())
                lens = [first, second] + [min(second, 40)] * (num_seqs - 2) if num_seqs > 1 else [first]
                lim = jnp.array([n + 1 for n in lens] + [0] * (slots - len(lens)), jnp.int32)
                pages = -(-(first + 1) // page)  # the longest decode's pages -> the table's width bucket
                table_keys = max(8, 1 << (pages - 1).bit_length()) * page
                block_t = min(t.prefill_block_keys, table_keys)
                alone = bool(ref.decode_alone(lim, block_d, block_t)[0])

                def walk(n, b):
                    return -(-n // b) * b

                second_lim = second + 1 if num_seqs > 1 else 0  # the other slots: padding, no keys
                kernel_keys = (slots * walk(second_lim, block_d) + walk(first + 1, block_t) if alone
                               else slots * walk(first + 1, block_d))
                span = decode_span(t, num_seqs, (first, second))
                assert (span < slots * walk(first, block_d)) == alone, (num_seqs, first, second)
                assert span == kernel_keys, (num_seqs, first, second, span, kernel_keys)
                chosen.append(alone)
    assert len(chosen) == 40 and 0 < sum(chosen) < 40  # both walks are on the grid
