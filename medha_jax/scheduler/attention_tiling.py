"""The XLA attention backend's loop shapes on one engine, and the work its loops do.

  engine (page size, smallest page-table and sequence buckets) --Tiling.for_engine--> Tiling
  Tiling + a prefill chunk (q tokens over kv cached) --tile_walks--> (wide-, mid-, small-tile) key walks
                                                      and the key-loop steps of its tiles (`tile_work`,
                                                      `tile_steps`: either part alone)
  Tiling + the decodes of a batch --decode_span--> key slots the decode loops walk

`pallas_kernels.reference.paged_attention_xla` runs a prefill chunk in tiles of `tile_q` query
tokens, then at most one tile of `mid_tile_q`, then tiles of `small_tile_q` over what is left; each
tile steps over a block of keys at a time up to its own causal frontier. Decodes run together:
every sequence slot of the batch's bucket steps one block at a time up to the longest decode
(or the second longest, when the longest walks alone in a one-query tile: `decode_span`); the
whole big blocks below that frontier go first (`reference.decode_big_pages`), whole multiples of the
small block, so the keys walked are the small blocks' and only the cost per key differs. How
many keys a block holds and how many slots a bucket has depend on the engine's page size and
smallest buckets, which is why these are parameters and not constants: a profile measured with
64-token pages and a 16-slot sequence bucket walks 4x larger blocks and never fewer than 16 slots
(with the default shapes assumed instead, its held-out error was 23.5%, with them 10.0%, and 8.5%
with the two tile kinds apart; `benchmarks/results/predictor_cpu.md`). A 128- or 256-query tile
costs less per query than a 32-query one (each walks the same keys), so the three tile kinds are
counted apart and a 128-token chunk can cost less than a 96-token one (over 16K keys: 62 vs 74 ms).
A tile narrower than the widest walks its whole unmasked key blocks several per loop step
(`reference.key_splits`: 4 for the 128-query tile, 8 for the 32-query one), and every step of the
loop has a fixed cost whatever it holds, so the key-query pairs alone misprice the narrow tiles:
after key splits the engine's tick runs the 128-query tile at 1.02-1.03x the 256-query one's time
per query over 8K-24K keys and 0.98x at 30K, but dearer where the context holds no whole group,
and one pair coefficient per tile kind fitted both as 1.21-1.27x. `tile_steps` counts the loop's
steps, so a profile prices the steps and the pairs apart (`predictor.DEFAULT_FEATURES`). Pure Python.
"""

from __future__ import annotations

from dataclasses import dataclass

# The XLA backend's defaults, restated here so the scheduler stays free of JAX imports
# (tests/kernels/test_xla_backend.py checks they agree with pallas_kernels.reference)
PREFILL_BLOCK_PAGES = 16  # pages per key block of a prefill tile (paged_attention_xla prefill_block_pages)
DECODE_BLOCK_KEYS = 64  # keys per block of the decode loop, whole pages (reference.XLA_DECODE_BLOCK_KEYS)
MID_KEY_SPLITS = 4  # key blocks the 128-query tile walks per step (reference.key_splits(128))
SMALL_KEY_SPLITS = 8  # ... the 32-query tile (reference.key_splits(32))
PREFILL_BIG_BLOCKS = 2  # whole unmasked key blocks the widest tile walks as one (reference.XLA_PREFILL_BIG_BLOCKS)


@dataclass(frozen=True, slots=True)
class Tiling:
    """Defaults: the engine's defaults (16-token pages, 8-page and 4-sequence smallest buckets)."""

    tile_q: int = 256
    """Query tokens per prefill tile (pallas_kernels.reference.XLA_BLOCK_Q)."""
    mid_tile_q: int = 128
    """... per tile, at most one, over a chunk's last q % tile_q tokens (reference.XLA_MID_BLOCK_Q)."""
    small_tile_q: int = 32
    """... per tile over what the wider tiles leave (reference.XLA_SMALL_BLOCK_Q)."""
    prefill_block_keys: int = PREFILL_BLOCK_PAGES * 16
    decode_block_keys: int = DECODE_BLOCK_KEYS
    min_table_keys: int = 8 * 16
    """Keys of the narrowest page table (smallest page bucket x page size): a block is no wider."""
    min_seq_slots: int = 4
    """Sequence slots of the smallest sequence bucket."""
    mid_key_splits: int = MID_KEY_SPLITS
    """Whole unmasked key blocks the mid tile walks per loop step (1: one at a time)."""
    small_key_splits: int = SMALL_KEY_SPLITS
    """... the small tiles."""
    prefill_big_blocks: int = PREFILL_BIG_BLOCKS
    """Whole unmasked key blocks the widest tile walks as one block per loop step (1: one at a time)."""

    @classmethod
    def for_engine(cls, page_size: int, min_pages: int, min_seqs: int) -> "Tiling":
        """min_pages / min_seqs: the smallest page-table and sequence buckets (executor.ladders)."""
        decode_pages = max(1, DECODE_BLOCK_KEYS // page_size)  # as the backend rounds it
        return cls(prefill_block_keys=PREFILL_BLOCK_PAGES * page_size, decode_block_keys=decode_pages * page_size,
                   min_table_keys=min_pages * page_size, min_seq_slots=min_seqs)

    @classmethod
    def for_executor(cls, executor) -> "Tiling":
        ladders = executor.ladders
        return cls.for_engine(executor.page_size, ladders.pages[0], ladders.seqs[0])


DEFAULT_TILING = Tiling()


def tile_walks(t: Tiling, q: int, kv: int, new: int | None = None) -> tuple[float, float, float, float]:
    """A prefill chunk's tiles in one pass: (`tile_work`'s three pair counts, `tile_steps`). The
    predictor needs both for every chunk it prices, so the tiles are walked once.

    Pairs: a tile ending at local token e steps a block of keys at a time up to its causal frontier
    kv + min(e, new), over kv cached keys and `new` keys written by the chunk itself (default q;
    fewer on a kvp group that holds only part of the chunk). The block is t.prefill_block_keys, or
    the whole page table when that is narrower (assumed just wide enough for this sequence: the
    smallest power-of-two bucket holding kv + new, at least t.min_table_keys). Steps: once per
    block, except that a narrow tile walks the whole blocks below its first row's frontier
    `*_key_splits` at a time (not more than the page table holds) when at least one whole group
    fits, and the widest tile `prefill_big_blocks` at a time as one block, then the rest of them
    one at a time."""
    new = q if new is None else new
    table = max(t.min_table_keys, 1 << max(kv + new - 1, 0).bit_length())
    block = min(t.prefill_block_keys, table)

    def walk(size: int, splits: int, lo: int, hi: int, merged: int = 1) -> tuple[int, int]:  # tiles over [lo, hi)
        ks = max(1, min(splits, table // block))
        group = ks if ks > 1 else max(1, min(merged, table // block))  # whole blocks a step below the frontier
        blocks = steps = 0
        for end in range(lo + size, hi + 1, size):
            total = -(-(kv + min(end, new)) // block)
            full = (kv + min(end - size + 1, new)) // block  # whole blocks below the first row's frontier
            blocks += total
            steps += total - full + full // group + full % group if group > 1 and full >= group else total
        return size * blocks * block, steps

    big, mid, small = t.tile_q, t.mid_tile_q, t.small_tile_q
    split = q // big * big
    mid_end = split + (q - split) // mid * mid
    (b, sb), (m, sm), (n, sn) = (walk(big, 1, 0, split, t.prefill_big_blocks),
                                 walk(mid, t.mid_key_splits, split, mid_end),
                                 walk(small, t.small_key_splits, mid_end, mid_end + -(-(q - mid_end) // small) * small))
    return float(b), float(m), float(n), float(sb + sm + sn)


def tile_work(t: Tiling, q: int, kv: int, new: int | None = None) -> tuple[float, float, float]:
    """Key-query pairs a prefill chunk's tiles walk: (its t.tile_q-query tiles, its t.mid_tile_q-query
    tile (at most one), its t.small_tile_q-query tiles over the rest); blocks and frontiers as in
    `tile_walks`. A 16-token chunk over 300 keys walks one 32-query tile over two whole blocks of
    the default tiling."""
    return tile_walks(t, q, kv, new)[:3]


def tile_steps(t: Tiling, q: int, kv: int, new: int | None = None) -> float:
    """Key-loop steps a prefill chunk's tiles take (`tile_walks`). 128 tokens over 30,000 keys: one
    mid tile, 29 whole blocks of 1,024 in 7 groups of 4 + 1, then the diagonal block: 9 steps (the
    widest tile would take 16: its 29 whole blocks 2 at a time, then the diagonal)."""
    return tile_walks(t, q, kv, new)[3]


def decode_span(t: Tiling, num_seqs: int, longest: tuple[int, int]) -> int:
    """Key slots the decode loops walk: every sequence slot of the batch's bucket (a power of two, at
    least t.min_seq_slots) up to the longest decode, in whole blocks, unless the longest walks alone
    (`pallas_kernels.reference.decode_alone`, when that is less work): then every slot up to the
    second longest, plus the longest's own keys in a one-query tile's blocks. longest: the two
    largest cached lengths among the decodes (0 where there are fewer; `top_two`)."""
    first, second = longest
    if first <= 0:
        return 0
    slots = max(t.min_seq_slots, 1 << (num_seqs - 1).bit_length())
    block = t.decode_block_keys
    together = slots * -(-first // block) * block
    tile_block = min(t.prefill_block_keys, max(t.min_table_keys, 1 << first.bit_length()))  # as tile_work's
    apart = slots * -(-second // block) * block + -(-first // tile_block) * tile_block
    return min(together, apart)


def top_two(longest: tuple[int, int], kv: int) -> tuple[int, int]:
    """The two largest of longest and kv, largest first."""
    first, second = longest
    if kv > first:
        return kv, first
    return (first, kv) if kv > second else longest
