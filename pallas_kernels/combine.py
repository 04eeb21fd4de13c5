"""From per-program partial results back to the contract's (out [T, H, Dh], lse f32[T, H]).

Data flow:
  partial rows  o f32[R, rows, Dh], lse f32[R, rows] (slot order; slots no row wrote hold garbage)
  -> `merge_slots`: log-sum-exp merge of the KV splits of each item (segment ops over `row_item`;
     unwritten slots are masked out before any arithmetic, so garbage never reaches the result)
  -> `gather_tokens`: item rows -> tokens: out[t, h*G + g] = o_item[tok_item[t]*KVH + h, tok_row[t] + g]
  -> `assemble`: each token takes the part that owns it; tokens no part owns get (0, -inf).
`finish` does the first two, or `merge_tokens` instead (each token's own slots gathered and
merged) when that reads less.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from pallas_kernels.merge import merge_attention

NEG_INF = float("-inf")


def merge_slots(o_rows, lse_rows, row_item, num_items: int):
    """o_rows f32[R, M, Dh], lse_rows f32[R, M], row_item i32[R] -> (f32[I, M, Dh], f32[I, M])."""
    live = row_item < num_items
    lse = jnp.where(live[:, None], lse_rows, NEG_INF)  # lse: f32[R, M]
    o = jnp.where(live[:, None, None], o_rows, 0.0)
    seg = dict(num_segments=num_items, indices_are_sorted=True)
    m = jax.ops.segment_max(lse, row_item, **seg)  # m: f32[I, M]; -inf for items with no key
    m_safe = jnp.where(jnp.isfinite(m), m, 0.0)
    w = jnp.exp(lse - m_safe[jnp.minimum(row_item, num_items - 1)])  # w: f32[R, M]
    den = jax.ops.segment_sum(w, row_item, **seg)  # den: f32[I, M]
    num = jax.ops.segment_sum(w[..., None] * o, row_item, **seg)  # num: f32[I, M, Dh]
    seen = den > 0.0
    den_safe = jnp.where(seen, den, 1.0)
    return num / den_safe[..., None], jnp.where(seen, m_safe + jnp.log(den_safe), NEG_INF)


def gather_tokens(o_items, lse_items, tok_item, tok_row, *, kv_heads: int, groups: int):
    """Item rows [I*KVH, M, ...] -> per token (out f32[T, H, Dh], lse f32[T, H])."""
    T = tok_item.shape[0]
    item = jnp.maximum(tok_item, 0)[:, None, None] * kv_heads + jnp.arange(kv_heads)[None, :, None]
    row = tok_row[:, None, None] + jnp.arange(groups)[None, None, :]  # row: i32[T, 1, G]
    out = o_items[item, row]  # out: f32[T, KVH, G, Dh]
    lse = lse_items[item, row]  # lse: f32[T, KVH, G]
    return out.reshape(T, kv_heads * groups, -1), lse.reshape(T, kv_heads * groups)


def assemble(parts, dtype):
    """parts: [(out f32[T, H, Dh], lse f32[T, H], owned bool[T])] with disjoint owners."""
    out0, lse0, _ = parts[0]
    out = jnp.zeros(out0.shape, jnp.float32)
    lse = jnp.full(lse0.shape, NEG_INF, jnp.float32)
    for o, l, owned in parts:
        out = jnp.where(owned[:, None, None], o, out)
        lse = jnp.where(owned[:, None], l, lse)
    return out.astype(dtype), lse


def merge_tokens(work, o_rows, lse_rows, *, kv_heads: int, groups: int):
    """The same result as `merge_slots` then `gather_tokens`, reading only each token's slots:
    per (token, kv head) up to work.max_splits slots of its item, G rows each -> merged by LSE.
    Reads T * KVH * max_splits * G rows where the slot merge passes over all R * M."""
    T = work.tok_item.shape[0]
    R = o_rows.shape[0]
    item = jnp.maximum(work.tok_item, 0)[:, None] * kv_heads + jnp.arange(kv_heads)[None, :]  # item: i32[T, KVH]
    split = jnp.arange(work.max_splits)
    slot = jnp.minimum(work.item_first[item][..., None] + split, R - 1)  # slot: i32[T, KVH, splits]
    live = split < work.item_splits[item][..., None]  # live: bool[T, KVH, splits]
    row = work.tok_row[:, None, None, None] + jnp.arange(groups)  # row: i32[T, 1, 1, G]
    o = jnp.where(live[..., None, None], o_rows[slot[..., None], row], 0.0)  # o: f32[T, KVH, splits, G, Dh]
    lse = jnp.where(live[..., None], lse_rows[slot[..., None], row], NEG_INF)  # lse: f32[T, KVH, splits, G]
    out, lse = merge_attention(jnp.moveaxis(o, 2, 0), jnp.moveaxis(lse, 2, 0))  # [T, KVH, G, Dh], [T, KVH, G]
    return out.reshape(T, kv_heads * groups, -1), lse.reshape(T, kv_heads * groups)


def finish(work, o_rows, lse_rows, *, kv_heads: int, groups: int):
    """Partial slots of one `worklist.Work` -> (out f32[T, H, Dh], lse f32[T, H], owned bool[T]).

    Whichever merge reads less, decided from static shapes: the tokens' own slots (`merge_tokens`:
    few tokens, e.g. the prefill kernel's empty half of a decode batch, whose >= 2 waves of
    [M, Dh] f32 slots the slot merge would pass over in every layer) or every slot once
    (`merge_slots`: many tokens)."""
    T = work.tok_item.shape[0]
    R, M = lse_rows.shape
    if T * kv_heads * work.max_splits * groups <= R * M:
        out, lse = merge_tokens(work, o_rows, lse_rows, kv_heads=kv_heads, groups=groups)
    else:
        o_items, lse_items = merge_slots(o_rows, lse_rows, work.row_item, work.num_items)
        out, lse = gather_tokens(o_items, lse_items, work.tok_item, work.tok_row, kv_heads=kv_heads, groups=groups)
    return out, lse, work.tok_item >= 0
