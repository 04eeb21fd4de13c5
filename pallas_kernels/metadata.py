"""Batch metadata shared by the kernel wrappers, computed with jnp from traced int32 arrays.

Data flow: (page_table, cu_q_lens, q_offsets, kv_lens) of the contract ->
- `pad_page_table`: page ids clipped into [0, N) and the table padded to whole KV blocks, so every
  in-kernel page read is in bounds (interpret mode would silently clamp; a GPU would not);
- `clamp_kv_lens`: kv_lens capped by the table's capacity P * page_size;
- `token_sequences`: per token its sequence, local index and whether it is a real token.
Static shapes only: nothing here depends on the values of the lengths.
"""

from __future__ import annotations

import jax.numpy as jnp

from pallas_kernels import kv_quant


def cdiv(a, b):
    """Ceil division of non-negative ints (jnp or Python)."""
    return (a + b - 1) // b


def check_shapes(q, k_pages, v_pages, k_scales=None, v_scales=None):
    """Shapes the Triton kernels accept (H a multiple of KVH, power-of-two head dim) -> the kernel's
    KV inputs: (k_pages, v_pages), plus (k_scales, v_scales) for fp8 pages."""
    T, H, Dh = q.shape
    N, page, KVH, Dk = k_pages.shape
    if v_pages.shape != k_pages.shape or Dk != Dh or H % KVH:
        raise ValueError(f"q {q.shape}, k_pages {k_pages.shape}, v_pages {v_pages.shape}: need "
                         "k/v pages [N, page, KVH, Dh] with H a multiple of KVH")
    if Dh & (Dh - 1) or Dh < 16:
        raise ValueError(f"head dim {Dh} must be a power of two >= 16 (Triton block shapes)")
    kv_quant.check_scales(k_pages, k_scales, v_scales)
    return (k_pages, v_pages) if k_scales is None else (k_pages, v_pages, k_scales, v_scales)


def pad_page_table(page_table, *, num_pages: int, block_pages: int):
    """i32[S, P] -> i32[S, P'] with P' a multiple of block_pages and every id in [0, num_pages)."""
    S, P = page_table.shape
    width = max(block_pages, cdiv(P, block_pages) * block_pages)
    table = jnp.clip(page_table.astype(jnp.int32), 0, num_pages - 1)
    return jnp.pad(table, ((0, 0), (0, width - P)))


def clamp_kv_lens(kv_lens, *, max_pages: int, page_size: int):
    return jnp.clip(kv_lens.astype(jnp.int32), 0, max_pages * page_size)


def seq_lengths(cu_q_lens):
    return (cu_q_lens[1:] - cu_q_lens[:-1]).astype(jnp.int32)  # q_len: i32[S]


def token_sequences(cu_q_lens, num_tokens: int):
    """Per token t: (seq i32[T], local index i32[T], valid bool[T]) with t in [cu[seq], cu[seq+1])."""
    S = cu_q_lens.shape[0] - 1
    tok = jnp.arange(num_tokens, dtype=jnp.int32)
    seq = jnp.clip(jnp.searchsorted(cu_q_lens, tok, side="right").astype(jnp.int32) - 1, 0, S - 1)
    valid = (tok >= cu_q_lens[0]) & (tok < cu_q_lens[S])
    return seq, tok - cu_q_lens[seq], valid
