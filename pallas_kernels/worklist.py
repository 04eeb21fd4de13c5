"""Work lists: which (tile, kv head, KV split) each kernel program computes, built with jnp.

Data flow, all under `jit` with static shapes (the sizes below depend only on T, S, KVH and the
config, never on the lengths in the batch, so changing lengths never recompiles):

  (cu_q_lens, q_offsets, kv_lens)          traced int32 metadata
   -> items: prefill tiles (BQ tokens of one sequence with q_len >= min_len) or decodes
      (sequences with q_len == 1), each with its causal frontier in KV blocks
   -> KV splits per item: flash-decoding style, only while the kind has fewer than
      `target_rows` programs (POD-Attention 4.2.4: prefill splits fill at most two waves)
   -> rows i32[R, NCOL], one per (item, kv head, split), in *slot order*: a row writes its
      partial (o, lse) to slot `SLOT` of its kind's output buffer; rows past the real ones
      are NOOP. `row_item` tells the combine step which item each slot belongs to and
      `tok_item`/`tok_row` which item and row each query token reads back.
   -> `order_rows` (one kind) or `interleave` (POD: prefill and decode rows mixed in
      proportion, longest work first) permutes rows for launch and pads them with NOOP
      rows to a power-of-two length.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from pallas_kernels.config import KernelConfig, Tiles, next_pow2
from pallas_kernels.metadata import cdiv, seq_lengths, token_sequences

# Row columns.
KIND, SEQ, KVH, TOK0, NTOK, BASE, KV_LO, KV_HI, SLOT = range(9)
NCOL = 9
# Row kinds.
NOOP, PREFILL, DECODE = 0, 1, 2


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class Work:
    """One kind's work list: a pytree (num_items static), so it can cross a jit boundary."""

    rows: jax.Array  # i32[R, NCOL], slot order
    row_item: jax.Array  # i32[R]: item of the slot (tile * KVH + kv head); num_items if none
    work: jax.Array  # i32[R]: KV blocks the row walks (for launch order)
    tok_item: jax.Array  # i32[T]: the token's tile (prefill) or sequence (decode); -1 if other kind
    tok_row: jax.Array  # i32[T]: first row of the token inside its tile (local index * G)
    item_first: jax.Array  # i32[I*KVH]: the item's first slot (its splits are the next item_splits)
    item_splits: jax.Array  # i32[I*KVH]: the item's slots, 0 for no item
    num_items: int = dataclasses.field(metadata=dict(static=True))  # tiles * KVH
    max_splits: int = dataclasses.field(metadata=dict(static=True))  # most slots of one item


def _expand(kind, valid, seq, tok0, ntok, base, hi, kv_lens, *, kv_heads, tiles: Tiles,
            target_rows: int, max_splits: int, min_blocks: int):
    """Per-tile arrays [I] -> rows (tile, kv head, split) in slot order."""
    I = valid.shape[0]
    BK = tiles.BK
    nb = jnp.where(valid, cdiv(hi, BK), 0)  # nb: i32[I], KV blocks up to the causal frontier
    n_items = jnp.sum(valid.astype(jnp.int32)) * kv_heads
    budget = target_rows - n_items
    split_len = jnp.where(
        budget > 0,
        jnp.maximum(min_blocks, cdiv(jnp.sum(nb) * kv_heads, jnp.maximum(budget, 1))),
        jnp.maximum(jnp.max(nb), 1),  # enough programs already: one split per item
    )
    L = jnp.maximum(jnp.maximum(split_len, cdiv(nb, max_splits)), 1)  # L: i32[I] blocks per split
    splits = jnp.where(valid, jnp.maximum(cdiv(nb, L), 1), 0)  # splits: i32[I]
    per_item = jnp.repeat(splits, kv_heads)  # item = tile * KVH + kv head
    end = jnp.cumsum(per_item)
    start = end - per_item
    # sum(splits) * KVH <= n_items + sum(nb) * KVH / split_len <= target_rows when splitting.
    R = max(1, min(I * kv_heads * max_splits, max(I * kv_heads, target_rows)))
    r = jnp.arange(R, dtype=jnp.int32)
    item = jnp.clip(jnp.searchsorted(end, r, side="right").astype(jnp.int32), 0, I * kv_heads - 1)
    live = r < end[-1]
    tile = item // kv_heads
    split = r - start[item]
    kv_lo = split * L[tile] * BK
    kv_hi = jnp.maximum(jnp.minimum(kv_lo + L[tile] * BK, kv_lens[seq[tile]]), kv_lo)
    rows = jnp.stack(
        [
            jnp.where(live, kind, NOOP),
            seq[tile],
            item % kv_heads,
            tok0[tile],
            ntok[tile],
            base[tile],
            kv_lo,
            kv_hi,
            r,
        ],
        axis=1,
    ).astype(jnp.int32)
    work = jnp.where(live, jnp.clip(nb[tile] - split * L[tile], 0, L[tile]), -1)
    row_item = jnp.where(live, item, I * kv_heads)
    return rows, row_item, work, I * kv_heads, start, per_item


def prefill_work(cu_q_lens, q_offsets, kv_lens, *, num_tokens: int, kv_heads: int, tiles: Tiles,
                 config: KernelConfig, min_len: int = 2) -> Work:
    """Rows for every sequence with q_len >= min_len, cut into tiles of BQ tokens."""
    S = q_offsets.shape[0]
    T, BQ = num_tokens, tiles.BQ
    q_len = seq_lengths(cu_q_lens)
    is_pre = q_len >= min_len
    n_tiles = jnp.where(is_pre, cdiv(q_len, BQ), 0)  # n_tiles: i32[S]
    t_end = jnp.cumsum(n_tiles)
    t_start = t_end - n_tiles
    I = max(1, min(T, T // BQ + min(S, T // min_len)))  # static bound on the number of tiles
    i = jnp.arange(I, dtype=jnp.int32)
    seq = jnp.clip(jnp.searchsorted(t_end, i, side="right").astype(jnp.int32), 0, S - 1)
    valid = i < t_end[-1]
    kq = (i - t_start[seq]) * BQ  # local index of the tile's first token
    ntok = jnp.clip(q_len[seq] - kq, 0, BQ)
    base = q_offsets[seq] + kq + 1  # token k of the tile sees keys < base + k
    hi = jnp.clip(base + ntok - 1, 0, kv_lens[seq])
    rows, row_item, work, num_items, first, n_slots = _expand(
        PREFILL, valid, seq, cu_q_lens[seq] + kq, ntok, base, hi, kv_lens, kv_heads=kv_heads,
        tiles=tiles, target_rows=config.prefill_waves * config.wave,
        max_splits=config.max_prefill_splits, min_blocks=config.min_split_blocks)
    tseq, loc, tvalid = token_sequences(cu_q_lens, T)
    mine = tvalid & is_pre[tseq]
    tok_item = jnp.where(mine, t_start[tseq] + loc // BQ, -1)
    return Work(rows, row_item, work, tok_item, (loc % BQ) * tiles.G, first, n_slots, num_items,
                config.max_prefill_splits)


def decode_work(cu_q_lens, q_offsets, kv_lens, *, num_tokens: int, kv_heads: int, tiles: Tiles,
                config: KernelConfig) -> Work:
    """Rows for every sequence with exactly one query token (one item per sequence)."""
    q_len = seq_lengths(cu_q_lens)
    valid = q_len == 1
    base = q_offsets + 1
    hi = jnp.clip(base, 0, kv_lens)
    seq = jnp.arange(q_len.shape[0], dtype=jnp.int32)
    rows, row_item, work, num_items, first, n_slots = _expand(
        DECODE, valid, seq, cu_q_lens[:-1], jnp.ones_like(q_len), base, hi, kv_lens,
        kv_heads=kv_heads, tiles=tiles, target_rows=config.decode_waves * config.wave,
        max_splits=config.max_decode_splits, min_blocks=config.min_split_blocks)
    tseq, _, tvalid = token_sequences(cu_q_lens, num_tokens)
    tok_item = jnp.where(tvalid & valid[tseq], tseq, -1)
    return Work(rows, row_item, work, tok_item, jnp.zeros_like(tok_item), first, n_slots, num_items,
                config.max_decode_splits)


def _longest_first(w: Work):
    """Rows sorted by descending work (NOOP rows last) and each row's rank key in [0, 1)."""
    live = w.rows[:, KIND] != NOOP
    order = jnp.argsort(jnp.where(live, -w.work, jnp.iinfo(jnp.int32).max), stable=True)
    n = jnp.maximum(jnp.sum(live.astype(jnp.int32)), 1)
    rank = jnp.arange(w.rows.shape[0], dtype=jnp.float32)
    key = jnp.where(rank < n, (rank + 0.5) / n.astype(jnp.float32), 2.0)
    return w.rows[order], key


def _pad_pow2(rows):
    R = rows.shape[0]
    pad = next_pow2(R) - R
    return jnp.pad(rows, ((0, pad), (0, 0)))  # zero rows are NOOP (KIND == 0)


def order_rows(w: Work):
    """Launch order for a one-kind kernel: longest first, padded to a power of two."""
    rows, _ = _longest_first(w)
    return _pad_pow2(rows)


def interleave(pre: Work, dec: Work):
    """POD launch order: prefill and decode rows interleaved in proportion, longest first.

    Programs launched together then mix compute-bound prefill tiles with memory-bound decode
    splits (CTA-parallel fusion; the hardware scheduler places them, no %smid binding here).
    """
    rp, kp = _longest_first(pre)
    rd, kd = _longest_first(dec)
    rows = jnp.concatenate([rp, rd])
    order = jnp.argsort(jnp.concatenate([kp, kd]), stable=True)
    return _pad_pow2(rows[order])
