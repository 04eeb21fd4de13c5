"""Plain jax.numpy paged attention: the contract every kernel in this package implements.

Data flow: a flattened ragged token batch `q` (prefill chunks and decodes of S sequences,
sequence s owning tokens [cu_q_lens[s], cu_q_lens[s+1])) attends to KV stored in pages
`k_pages/v_pages` through `page_table`. Query i of sequence s sees local key j iff
`j < kv_lens[s]` and `j <= q_offsets[s] + i`. With `q_offsets = kv_lens - q_lens` that is
bottom-right causal attention of a chunk over its cached context; a KVP shard that holds only
earlier tokens of the sequence passes a large q_offset so every local key is visible.

Every function returns `(out, lse)`: lse is float32 natural-log sum-exp of the scaled scores
per (token, head), `-inf` where a row sees no key (then out is 0), so partial results over
KV splits or KVP shards merge exactly with `merge.merge_attention`.

Two implementations with the same signature:
- `paged_attention_reference`: gathers every page of every token's sequence and does dense
  masked softmax. Obviously right; memory grows with T * P * page_size. For tests.
- `paged_attention_xla`: the engine's XLA backend. Walks KV in blocks of pages with an online
  softmax, so memory stays at T * block and the loop stops at the longest visible context.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

NEG_INF = float("-inf")


def _token_rows(cu_q_lens, q_offsets, kv_lens, num_tokens):
    """Per token: its sequence index and the number of local keys it may see."""
    num_seqs = kv_lens.shape[0]
    tok = jnp.arange(num_tokens, dtype=jnp.int32)  # tok: i32[T]
    seq = jnp.searchsorted(cu_q_lens, tok, side="right").astype(jnp.int32) - 1
    seq = jnp.clip(seq, 0, num_seqs - 1)  # seq: i32[T]
    valid = tok < cu_q_lens[num_seqs]
    qi = tok - cu_q_lens[seq]
    limit = jnp.minimum(q_offsets[seq] + qi + 1, kv_lens[seq])
    limit = jnp.where(valid, jnp.maximum(limit, 0), 0)  # limit: i32[T], keys [0, limit) visible
    return seq, limit


def paged_attention_reference(q, k_pages, v_pages, page_table, cu_q_lens, q_offsets, kv_lens, *, scale):
    """Dense reference. q: [T, H, Dh]; k/v_pages: [N, page, KVH, Dh]; returns (out [T, H, Dh], lse f32[T, H])."""
    T, H, Dh = q.shape
    _, page, KVH, _ = k_pages.shape
    G = H // KVH
    P = page_table.shape[1]
    seq, limit = _token_rows(cu_q_lens, q_offsets, kv_lens, T)
    pages = page_table[seq]  # pages: i32[T, P]
    k = k_pages[pages].reshape(T, P * page, KVH, Dh).astype(jnp.float32)  # k: f32[T, L, KVH, Dh]
    v = v_pages[pages].reshape(T, P * page, KVH, Dh).astype(jnp.float32)
    qg = q.reshape(T, KVH, G, Dh).astype(jnp.float32) * scale  # qg: f32[T, KVH, G, Dh]
    s = jnp.einsum("tkgd,tjkd->tkgj", qg, k)  # s: f32[T, KVH, G, L]
    mask = jnp.arange(P * page)[None, :] < limit[:, None]  # mask: bool[T, L]
    s = jnp.where(mask[:, None, None, :], s, NEG_INF)
    lse = jax.nn.logsumexp(s, axis=-1)  # lse: f32[T, KVH, G]
    p = jnp.where(mask[:, None, None, :], jnp.exp(s - jnp.where(jnp.isfinite(lse), lse, 0.0)[..., None]), 0.0)
    out = jnp.einsum("tkgj,tjkd->tkgd", p, v)
    return out.reshape(T, H, Dh).astype(q.dtype), lse.reshape(T, H)


def paged_attention_xla(
    q, k_pages, v_pages, page_table, cu_q_lens, q_offsets, kv_lens, *, scale, block_pages: int = 8
):
    """Online-softmax paged attention over blocks of `block_pages` pages (same contract as the reference)."""
    T, H, Dh = q.shape
    _, page, KVH, _ = k_pages.shape
    G = H // KVH
    S, P = page_table.shape
    bp = min(block_pages, P)
    n_cols = -(-P // bp) * bp
    table = jnp.pad(page_table, ((0, 0), (0, n_cols - P)))  # table: i32[S, nb*bp] (pad pages masked out)
    block = bp * page
    seq, limit = _token_rows(cu_q_lens, q_offsets, kv_lens, T)
    qg = q.reshape(T, KVH, G, Dh).astype(jnp.float32) * scale  # qg: f32[T, KVH, G, Dh]
    n_blocks = (jnp.max(limit) + block - 1) // block  # stop at the longest visible context

    def body(b, carry):
        m, l, acc = carry  # m, l: f32[T, KVH, G]; acc: f32[T, KVH, G, Dh]
        cols = jax.lax.dynamic_slice_in_dim(table, b * bp, bp, axis=1)  # cols: i32[S, bp]
        tok_pages = cols[seq]  # tok_pages: i32[T, bp]
        k = k_pages[tok_pages].reshape(T, block, KVH, Dh).astype(jnp.float32)  # k: f32[T, block, KVH, Dh]
        v = v_pages[tok_pages].reshape(T, block, KVH, Dh).astype(jnp.float32)
        s = jnp.einsum("tkgd,tjkd->tkgj", qg, k)  # s: f32[T, KVH, G, block]
        mask = (b * block + jnp.arange(block))[None, :] < limit[:, None]  # mask: bool[T, block]
        s = jnp.where(mask[:, None, None, :], s, NEG_INF)
        m_new = jnp.maximum(m, jnp.max(s, axis=-1))
        m_safe = jnp.where(jnp.isfinite(m_new), m_new, 0.0)
        p = jnp.exp(s - m_safe[..., None])  # masked scores give exp(-inf) = 0
        alpha = jnp.exp(jnp.where(jnp.isfinite(m), m - m_safe, NEG_INF))
        l = alpha * l + jnp.sum(p, axis=-1)
        acc = alpha[..., None] * acc + jnp.einsum("tkgj,tjkd->tkgd", p, v)
        return m_new, l, acc

    init = (
        jnp.full((T, KVH, G), NEG_INF, jnp.float32),
        jnp.zeros((T, KVH, G), jnp.float32),
        jnp.zeros((T, KVH, G, Dh), jnp.float32),
    )
    m, l, acc = jax.lax.fori_loop(0, n_blocks, body, init)
    seen = l > 0.0
    out = jnp.where(seen[..., None], acc / jnp.where(seen, l, 1.0)[..., None], 0.0)
    lse = jnp.where(seen, m + jnp.log(jnp.where(seen, l, 1.0)), NEG_INF)
    return out.reshape(T, H, Dh).astype(q.dtype), lse.reshape(T, H)
