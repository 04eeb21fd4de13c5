"""In-kernel attention of one tile over a range of paged KV: the shared core of every kernel.

Runs inside a Triton-lowered `pallas_call` on whole-array refs (no BlockSpecs: the page-table
indirection happens here, an `index_map` cannot read data). Data flow for one program:

  q rows   : M rows = query tokens x the G heads of one kv head, gathered from q [T, H, Dh]
  limits   : row r may see local keys [kv_lo, lim[r]) (causal frontier, kv_len and split end)
  KV loop  : blocks of BK = block_pages * page_size keys, page ids read from the page table;
             blocks below every row's limit run unmasked, only the last blocks are masked
  fp8 KV   : with scale refs (f32[N, KVH], `kv_quant`) each key's scale multiplies its score
             column and each value's its probability column; the fp8 block is converted to q's
             dtype for the dots
  result   : (o f32[M, Dh], lse f32[M]) normalised over this key range; a row that saw no key
             gets o = 0 and lse = -inf ("safe max": never NaN), so splits merge exactly.

Triton rules kept here: one indexer per ref access (`k_ref[pages, :, h, :]`), power-of-two
block shapes, M >= 16 rows for `tl.dot`, `lax.div` on non-negative ints (no floor division).
"""

from __future__ import annotations

import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl

from pallas_kernels import kv_quant
from pallas_kernels.config import Tiles
from pallas_kernels.worklist import BASE, KV_HI, KV_LO, KVH, NTOK, SEQ, SLOT, TOK0

NEG_INF = float("-inf")
# Triton lowers DEFAULT precision to tf32 for f32 operands; HIGHEST keeps f32 exact (ieee) and
# changes nothing for bf16 operands.
EXACT = lax.Precision.HIGHEST


def _iota(n: int):
    return lax.broadcasted_iota(jnp.int32, (n,), 0)


def row_coords(rows: int, groups: int, ntok):
    """Row r of a tile -> (local token k clamped to [0, ntok), head g within the group)."""
    r = _iota(rows)  # r: i32[M]
    k = lax.div(r, jnp.int32(groups))
    g = r - k * groups
    k = jnp.maximum(jnp.minimum(k, ntok - 1), 0)  # padding rows repeat the last real token
    return k, g


def load_q_rows(q_ref, tok0, k, g, kvh, *, groups: int):
    """q rows of a tile: token tok0 + k[r], head kvh * G + g[r] -> [M, Dh] in q's dtype."""
    num_tokens = q_ref.shape[0]
    tok = jnp.minimum(tok0 + k, num_tokens - 1)  # tok: i32[M]
    head = kvh * groups + g  # head: i32[M]
    return q_ref[tok, head, :]  # q: [M, Dh]


def row_limits(base, k, kv_lo, kv_hi):
    """Exclusive key limit per row: token k sees keys < base + k, clipped to [kv_lo, kv_hi]."""
    return jnp.minimum(jnp.maximum(base + k, kv_lo), kv_hi)  # lim: i32[M]


def split_kv_refs(refs):
    """The kernel's KV refs: (k_ref, v_ref) or (k_ref, v_ref, ks_ref, vs_ref) -> four, None when unquantised."""
    return (*refs, None, None) if len(refs) == 2 else tuple(refs)


def attend(q, kv_refs, pt_ref, seq, kvh, kv_lo, lim, *, scale: float, block_pages: int):
    """Online softmax of q [M, Dh] over keys [kv_lo, lim[r]) of sequence `seq`, kv head `kvh`.

    kv_refs: (k_ref, v_ref[, ks_ref, vs_ref]). kv_lo must be a multiple of BK and every
    lim[r] >= kv_lo. Returns (o f32[M, Dh], lse f32[M]).
    """
    k_ref, v_ref, ks_ref, vs_ref = split_kv_refs(kv_refs)
    M, Dh = q.shape
    page_size = k_ref.shape[1]
    BK = block_pages * page_size
    lo_blk = lax.div(kv_lo, jnp.int32(BK))
    full_end = jnp.maximum(lax.div(jnp.min(lim), jnp.int32(BK)), lo_blk)  # blocks every row sees whole
    end = jnp.maximum(lax.div(jnp.max(lim) + (BK - 1), jnp.int32(BK)), full_end)

    def block(b, carry, masked: bool):
        o, m, l = carry  # o: f32[M, Dh]; m, l: f32[M]
        pages = pt_ref[seq, pl.ds(b * block_pages, block_pages)]  # pages: i32[bp]
        k = k_ref[pages, :, kvh, :].reshape(BK, Dh)  # k: [BK, Dh]
        v = v_ref[pages, :, kvh, :].reshape(BK, Dh)  # v: [BK, Dh]
        if ks_ref is not None:  # fp8: per-key scales from each key's page
            key_pages = pt_ref[seq, b * block_pages + lax.div(_iota(BK), jnp.int32(page_size))]  # i32[BK]
            ks, vs = ks_ref[key_pages, kvh], vs_ref[key_pages, kvh]  # ks, vs: f32[BK]
            k, v = kv_quant.to_float(k, q.dtype), kv_quant.to_float(v, q.dtype)  # fp8 bits -> q's dtype
        s = jnp.dot(q, k.T, precision=EXACT, preferred_element_type=jnp.float32) * scale  # s: f32[M, BK]
        if ks_ref is not None:
            s = s * ks[None, :]
        if masked:
            kpos = b * BK + _iota(BK)  # kpos: i32[BK]
            s = jnp.where(kpos[None, :] < lim[:, None], s, NEG_INF)
        m_new = jnp.maximum(m, jnp.max(s, axis=1))
        m_safe = jnp.where(m_new == NEG_INF, 0.0, m_new)  # a row with no key yet stays finite
        p = jnp.exp(s - m_safe[:, None])  # p: f32[M, BK]; exp(-inf) = 0 for masked keys
        alpha = jnp.exp(m - m_safe)  # 0 while m is still -inf
        l = alpha * l + jnp.sum(p, axis=1)
        if vs_ref is not None:
            p = p * vs[None, :]
        pv = jnp.dot(p.astype(v.dtype), v, precision=EXACT, preferred_element_type=jnp.float32)  # f32[M, Dh]
        return alpha[:, None] * o + pv, m_new, l

    carry = (
        jnp.zeros((M, Dh), jnp.float32),
        jnp.full((M,), NEG_INF, jnp.float32),
        jnp.zeros((M,), jnp.float32),
    )
    carry = lax.fori_loop(lo_blk, full_end, lambda b, c: block(b, c, False), carry)
    o, m, l = lax.fori_loop(full_end, end, lambda b, c: block(b, c, True), carry)
    seen = l > 0.0
    l_safe = jnp.where(seen, l, 1.0)
    return o / l_safe[:, None], jnp.where(seen, m + jnp.log(l_safe), NEG_INF)


def tile_attention(q_ref, kv_refs, pt_ref, seq, kvh, tok0, ntok, base, kv_lo, kv_hi,
                   *, rows: int, groups: int, scale: float, block_pages: int):
    """Load a tile's q rows, bound their keys and attend: (o f32[rows, Dh], lse f32[rows])."""
    k, g = row_coords(rows, groups, ntok)
    q = load_q_rows(q_ref, tok0, k, g, kvh, groups=groups)  # q: [rows, Dh]
    lim = row_limits(base, k, kv_lo, kv_hi)  # lim: i32[rows]
    return attend(q, kv_refs, pt_ref, seq, kvh, kv_lo, lim, scale=scale, block_pages=block_pages)


def run_row(rows_ref, i, pt_ref, q_ref, kv_refs, o_ref, lse_ref, *, rows: int, tiles: Tiles,
            scale: float):
    """Compute work row i (any kind) on `rows` q rows and store its partial result at its slot."""
    o, lse = tile_attention(
        q_ref, kv_refs, pt_ref,
        rows_ref[i, SEQ], rows_ref[i, KVH], rows_ref[i, TOK0], rows_ref[i, NTOK],
        rows_ref[i, BASE], rows_ref[i, KV_LO], rows_ref[i, KV_HI],
        rows=rows, groups=tiles.G, scale=scale, block_pages=tiles.block_pages)
    slot = rows_ref[i, SLOT]
    o_ref[slot] = o  # o_ref: f32[R, rows, Dh]
    lse_ref[slot] = lse  # lse_ref: f32[R, rows]
