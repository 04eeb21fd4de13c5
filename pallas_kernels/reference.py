"""Plain jax.numpy paged attention: the contract every kernel in this package implements.

Data flow: a flattened ragged token batch `q` (prefill chunks and decodes of S sequences,
sequence s owning tokens [cu_q_lens[s], cu_q_lens[s+1])) attends to KV stored in pages
`k_pages/v_pages` through `page_table`. Query i of sequence s sees local key j iff
`j < kv_lens[s]` and `j <= q_offsets[s] + i`. With `q_offsets = kv_lens - q_lens` that is
bottom-right causal attention of a chunk over its cached context; a KVP shard that holds only
earlier tokens of the sequence passes a large q_offset so every local key is visible.

fp8 pages (`kv_quant`): both functions also take `k_scales` / `v_scales` f32[N, KVH], one scale
per page and kv head; the reference dequantises whole pages, the XLA path scales score and
probability columns.

Every function returns `(out, lse)`: lse is float32 natural-log sum-exp of the scaled scores
per (token, head), `-inf` where a row sees no key (then out is 0), so partial results over
KV splits or KVP shards merge exactly with `merge.merge_attention`.

Two implementations with the same signature:
- `paged_attention_reference`: gathers every page of every token's sequence and does dense
  masked softmax. Obviously right; memory grows with T * P * page_size. For tests.
- `paged_attention_xla`: the engine's XLA backend. Walks KV in blocks of pages with an online
  softmax. Prefill chunks go tile by tile (256 tokens of one sequence share each gathered block
  of 16 pages, two of them at a time where a 256-token tile sees both whole, a 128-token tile and
  32-token tiles take what is left of a chunk, a tile stops at its own causal frontier, and the
  blocks below its first row's frontier skip the causal mask);
  decodes go together (one gathered block per sequence per step, up to the longest decode
  frontier; on AVX-512 hosts whole big blocks first, then small ones, `decode_big_pages`), except the longest when
  walking its keys alone in a one-query tile is less work (`decode_alone`). No per-token KV gathers.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from pallas_kernels import kv_quant

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


def paged_attention_reference(q, k_pages, v_pages, page_table, cu_q_lens, q_offsets, kv_lens, *, scale,
                              k_scales=None, v_scales=None):
    """Dense reference. q: [T, H, Dh]; k/v_pages: [N, page, KVH, Dh]; returns (out [T, H, Dh], lse f32[T, H])."""
    kv_quant.check_scales(k_pages, k_scales, v_scales)
    if k_scales is not None:
        k_pages, v_pages = kv_quant.dequantize_pages(k_pages, k_scales), kv_quant.dequantize_pages(v_pages, v_scales)
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
    q, k_pages, v_pages, page_table, cu_q_lens, q_offsets, kv_lens, *, scale, block_pages: int | None = None,
    prefill_block_pages: int = 16, block_q: int | None = None, mid_block_q: int | None = None,
    small_block_q: int | None = None, split_q: int | None = None, decode_big_block_bytes: int | None = None,
    prefill_big_blocks: int | None = None, k_scales=None, v_scales=None,
):
    """Online-softmax paged attention over blocks of pages (same contract as the reference).

    Prefill sequences (q_len >= 2) run tile by tile, each tile gathering a block of
    `prefill_block_pages` pages at a time up to its own causal frontier: tiles of `block_q` tokens
    (default XLA_BLOCK_Q) over the whole multiples of block_q, then tiles of `mid_block_q` (default
    XLA_MID_BLOCK_Q, half of block_q: at most one) over the whole multiples of it in what is left,
    then tiles of `small_block_q` (default XLA_SMALL_BLOCK_Q) over the rest, so a short chunk pays
    for at most small_block_q - 1 padding rows, not block_q - 1, and a 200-token one runs a
    128-query tile, not seven 32-query ones (each walking every key). Decodes (q_len == 1) run
    together, one gathered block of `block_pages` pages per sequence per step (default:
    XLA_DECODE_BLOCK_KEYS keys' worth, at least one page), up to the longest decode frontier,
    unless the longest runs alone in a one-query tile (`decode_alone`: when that is less work);
    the whole big blocks below that frontier go first, `decode_big_pages` pages a step (sized by
    `decode_big_block_bytes`, default XLA_DECODE_BIG_BLOCK_BYTES; 0: no big blocks), and the widest
    prefill tiles walk their whole unmasked key blocks `prefill_big_blocks` at a time as one block
    first (default XLA_PREFILL_BIG_BLOCKS; 1: one block a step). The
    defaults are the fastest measured on a CPU (`benchmarks/results/xla_attention_tiles_cpu.md`,
    `decode_block_keys_cpu_run1.md`, `xla_attention_ab_tiles256.md`): large tiles
    amortise each loop step's gather and bookkeeping (narrower tiles walk `key_splits` blocks per
    step for the same reason), while decodes keep small blocks because every
    sequence slot walks up to the longest decode and a small block's gathered keys stay in cache
    for the two dots that read them.
    """
    kv_quant.check_scales(k_pages, k_scales, v_scales)
    kv = _Pages(k_pages, v_pages, k_scales, v_scales)
    T, H, Dh = q.shape
    _, page, KVH, _ = k_pages.shape
    S, P = page_table.shape
    kv_lens = jnp.clip(kv_lens, 0, P * page)
    G = H // KVH
    qg = q.reshape(T, KVH, G, Dh).astype(jnp.float32) * scale  # qg: f32[T, KVH, G, Dh]
    q_len = cu_q_lens[1:] - cu_q_lens[:-1]
    seq, _ = _token_rows(cu_q_lens, q_offsets, kv_lens, T)
    if block_pages is None:
        block_pages = max(1, XLA_DECODE_BLOCK_KEYS // page)
    bpp, bpd = min(prefill_block_pages, P), min(block_pages, P)
    sizes = tile_sizes(block_q, mid_block_q, small_block_q)  # largest first
    big = sizes[0]
    table_p = _pad_table(page_table, bpp)
    lim_d = jnp.where(q_len == 1, jnp.clip(q_offsets + 1, 0, kv_lens), 0)  # lim_d: i32[S], keys each decode sees
    alone = decode_alone(lim_d, bpd * page, bpp * page)  # alone: bool[S], at most one decode
    pre_len = jnp.where(q_len >= 2, q_len, 0)  # pre_len: i32[S], tokens of the prefill sequences
    q_pad = jnp.pad(qg, ((0, big), (0, 0), (0, 0), (0, 0)))  # a tile may run past T
    acc = (jnp.zeros((T + big, KVH, G, Dh), jnp.float32), jnp.full((T + big, KVH, G), NEG_INF, jnp.float32))
    tiles = functools.partial(_xla_prefill_tiles, q_pad, kv, table_p, cu_q_lens, q_offsets, kv_lens, bpp)
    lo = jnp.zeros_like(pre_len)  # lo: i32[S], tokens the larger tiles already cover
    big_blocks = XLA_PREFILL_BIG_BLOCKS if prefill_big_blocks is None else prefill_big_blocks
    for n, size in enumerate(sizes):
        hi = pre_len if n == len(sizes) - 1 else lo + (pre_len - lo) // size * size  # hi: i32[S]
        acc = tiles(size, lo, hi, acc, key_splits(size, split_q, big), big_blocks if n == 0 else 1)
        lo = hi
    acc = tiles(1, jnp.zeros_like(pre_len), alone.astype(jnp.int32), acc)  # the decode walking alone: one query
    out_p, lse_p = acc[0][:T], acc[1][:T]
    big_d = decode_big_pages(S, P, page, KVH, Dh, bpd, decode_big_block_bytes)
    out_d, lse_d = _xla_decodes(qg, kv, _pad_table(page_table, bpd), cu_q_lens, jnp.where(alone, 0, lim_d), bpd, big_d)
    real = jnp.arange(T) < cu_q_lens[S]
    pre = (real & ((q_len[seq] >= 2) | alone[seq]))[:, None, None]  # pre: bool[T, 1, 1], rows the tiles wrote
    dec = (real & (q_len[seq] == 1) & ~alone[seq])[:, None, None]
    out = jnp.where(pre[..., None], out_p, jnp.where(dec[..., None], out_d[seq], 0.0))
    lse = jnp.where(pre, lse_p, jnp.where(dec, lse_d[seq], NEG_INF))
    return out.reshape(T, H, Dh).astype(q.dtype), lse.reshape(T, H)


def _pad_table(page_table, bp: int):
    """i32[S, P] -> i32[S, nb*bp]: whole blocks of bp pages (pad pages lie past kv_len, masked out)."""
    P = page_table.shape[1]
    return jnp.pad(page_table, ((0, 0), (0, -(-P // bp) * bp - P)))


class _Pages:
    """K/V pages (and their fp8 scales, or None) read a block of pages at a time."""

    def __init__(self, k_pages, v_pages, k_scales, v_scales):
        self.k, self.v, self.ks, self.vs = k_pages, v_pages, k_scales, v_scales
        self.page = k_pages.shape[1]

    def block(self, cols):
        """Pages cols i32[..., bp] -> (k, v f32[..., bp*page, KVH, Dh], key scales f32[..., bp*page, KVH]
        or None): values as stored (fp8 converted, not scaled)."""
        shape = cols.shape[:-1] + (cols.shape[-1] * self.page,) + self.k.shape[2:]
        # fp8: gathered as bytes, converted per block
        convert = (lambda a: a.astype(jnp.float32)) if self.ks is None else kv_quant.to_float  # noqa: E731
        k, v = convert(self.k[cols].reshape(shape)), convert(self.v[cols].reshape(shape))
        if self.ks is None:
            return k, v, None, None
        return k, v, kv_quant.key_scales(self.ks, cols, self.page), kv_quant.key_scales(self.vs, cols, self.page)


XLA_BLOCK_Q = 256  # query tokens per prefill tile of the XLA path (scheduler.attention_tiling.Tiling.tile_q)
XLA_MID_BLOCK_Q = 128  # ... per tile (at most one) over a chunk's last chunk_len % XLA_BLOCK_Q (Tiling.mid_tile_q)
XLA_SMALL_BLOCK_Q = 32  # ... per tile over what the larger tiles leave (Tiling.small_tile_q)
XLA_SPLIT_Q = 512  # a prefill tile narrower than XLA_BLOCK_Q walks XLA_SPLIT_Q // its queries key blocks
XLA_MAX_KEY_SPLITS = 8  # ... side by side, at most this many (`key_splits`)
XLA_DECODE_BLOCK_KEYS = 64  # keys per block of the decode loop, in whole pages (Tiling.decode_block_keys)
XLA_PREFILL_BIG_BLOCKS = 2  # blocks the widest prefill tile's unmasked steps walk as one (Tiling.prefill_big_blocks)
# On a 2-core AVX-512 Xeon, one layer (8 heads of 64, GQA 8:2, pages of 16, 256-key blocks): one 8K prompt 0.90x,
# 2K over 14K cached 0.87x, 256 over 16K 0.89x, 512 over 2K 0.90x; 16 x 512 and 4 x 200, with no whole pair of
# blocks below a tile's first row, 1.00-1.01x (`benchmarks/results/prefill_big_blocks_cpu.md`). The engine's tick
# of the demo model with pages of 64 (1,024-key blocks): 1K over 8K 0.93x, 256 over 16K 0.94x; 4 blocks as one
# gained no more with 256-key blocks and less with 1,024-key ones.


def host_has_avx512(cpuinfo: str = "/proc/cpuinfo") -> bool:
    """Whether this host's CPU has AVX-512 (`avx512f` among `cpuinfo`'s flags; False where there is
    no such file)."""
    try:
        with open(cpuinfo) as f:
            for line in f:
                if line.startswith("flags"):
                    return "avx512f" in line.split()
    except OSError:
        pass
    return False


XLA_DECODE_BIG_BLOCK_BYTES = (4 << 20) if host_has_avx512() else 0
"""Float32 key bytes a big decode block gathers over all sequence slots (0: none, every step one
64-key block). The engine's tick of the 31M Llama with 4 MB blocks against none
(`benchmarks/decode_big_blocks.py`): on a 2-core AVX-512 Xeon 16 decodes at 544 keys 0.86-0.94x,
16 at 4K 0.74x, 64 at 2K 0.93x (`decode_big_blocks_cpu.md`); on a 2-core AVX2 EPYC 1.22x, 1.47x and
1.37x (`decode_big_blocks_epyc.md`), and no smaller budget (256 KB-2 MB) gained there either (one
layer 0.97-1.09x). So they are on where the host has AVX-512 and off elsewhere."""


def key_splits(size: int, split_q: int | None = None, block_q: int | None = None) -> int:
    """Key blocks a `size`-query prefill tile walks side by side per loop step over its unmasked
    keys: split_q // size (default XLA_SPLIT_Q), at most XLA_MAX_KEY_SPLITS, and 1 for the widest
    tile (`block_q`, default XLA_BLOCK_Q), whose steps are large enough already (two side by side
    measured 0.95x at 30K keys but 1.10-1.14x at 2K, `benchmarks/results/xla_key_splits_*`)."""
    if size >= (XLA_BLOCK_Q if block_q is None else block_q):
        return 1
    return max(1, min((XLA_SPLIT_Q if split_q is None else split_q) // size, XLA_MAX_KEY_SPLITS))


def tile_sizes(block_q: int | None = None, mid_block_q: int | None = None,
               small_block_q: int | None = None) -> tuple[int, ...]:
    """The prefill tiles' query counts, largest first, each size once (None: the defaults; a
    middle or small size that is not smaller than the one before it is dropped)."""
    big = XLA_BLOCK_Q if block_q is None else block_q
    sizes = [big]
    for size in (XLA_MID_BLOCK_Q if mid_block_q is None else mid_block_q,
                 XLA_SMALL_BLOCK_Q if small_block_q is None else small_block_q):
        if size < sizes[-1]:
            sizes.append(size)
    return tuple(sizes)


def _online_step(carry, s, mask, v):
    """One KV block of online softmax. s: f32[..., J] scores, mask: bool broadcastable to s (None:
    nothing masked), v: f32[..., J, Dh] (already laid out to contract with s) -> new (m, l, acc)."""
    m, l, acc = carry
    if mask is not None:  # None: every key of the block is visible to every row
        s = jnp.where(mask, s, NEG_INF)
    m_new = jnp.maximum(m, jnp.max(s, axis=-1))
    m_safe = jnp.where(jnp.isfinite(m_new), m_new, 0.0)
    p = jnp.exp(s - m_safe[..., None])  # masked scores give exp(-inf) = 0
    alpha = jnp.exp(jnp.where(jnp.isfinite(m), m - m_safe, NEG_INF))
    return m_new, alpha * l + jnp.sum(p, axis=-1), alpha[..., None] * acc + v(p)


def _finish(m, l, acc):
    seen = l > 0.0
    out = jnp.where(seen[..., None], acc / jnp.where(seen, l, 1.0)[..., None], 0.0)
    return out, jnp.where(seen, m + jnp.log(jnp.where(seen, l, 1.0)), NEG_INF)


def _merge_splits(KVH, m, l, acc):
    """The online-softmax states of ks key blocks walked side by side -> one state: m, l
    f32[KVH*ks, R], acc f32[KVH*ks, R, Dh] (batch: KV head major, block minor) -> m, l f32[KVH, R],
    acc f32[KVH, R, Dh]."""
    m, l, acc = (x.reshape(KVH, -1, *x.shape[1:]) for x in (m, l, acc))  # m: f32[KVH, ks, R]
    m_all = jnp.max(m, axis=1)  # m_all: f32[KVH, R]
    m_safe = jnp.where(jnp.isfinite(m_all), m_all, 0.0)
    w = jnp.exp(jnp.where(jnp.isfinite(m), m - m_safe[:, None], NEG_INF))  # w: f32[KVH, ks, R]
    return m_all, jnp.sum(w * l, axis=1), jnp.sum(w[..., None] * acc, axis=1)


def _xla_prefill_tiles(q_pad, kv: _Pages, table, cu_q_lens, q_offsets, kv_lens, bp, BQ, lo, hi, acc, ks=1, big=1):
    """Tiles of BQ tokens over local tokens [lo[s], hi[s]) of every sequence s; writes their rows of
    acc = (out f32[T + pad, KVH, G, Dh], lse f32[T + pad, KVH, G]) and returns it.

    Inside a tile the G query heads sharing a KV head are folded into the rows, so each KV block
    is one batched matmul per KV head ([BQ*G, Dh] x [Dh, block], batch dimension first): on a CPU
    that halves the time of the [BQ, KVH, G] x [block, KVH] contraction it replaces
    (`benchmarks/xla_attention_tiles.py`). A tile narrower than the widest walks its unmasked keys
    `ks` blocks per loop step (`key_splits`), side by side in the batch dimension with the tile's
    queries repeated, and merges the ks softmax states before the rest (under a cond, so a short
    context pays nothing): each XLA:CPU op in the loop has a fixed cost (dispatch, thread hand-off),
    which a 32-query tile's small steps (128 rows a KV head) paid ~40% on top of their arithmetic
    (`benchmarks/xla_key_splits.py`). A tile walking one block a step (`ks` 1) walks its whole
    unmasked blocks `big` at a time as one block first (under a cond), then the rest one at a time:
    fewer, larger steps, the same keys and one softmax state (`XLA_PREFILL_BIG_BLOCKS`)."""
    _, KVH, G, Dh = q_pad.shape
    block = bp * kv.page
    ks = max(1, min(ks, table.shape[1] // bp))  # no more blocks side by side than the table holds
    big = max(1, min(big, table.shape[1] // bp))  # ... nor in one big block
    n_tiles = jnp.maximum(hi - lo + BQ - 1, 0) // BQ  # n_tiles: i32[S]
    t_end = jnp.cumsum(n_tiles)

    def tile(i, carry):
        out, lse = carry
        s = jnp.searchsorted(t_end, i, side="right")
        k0 = lo[s] + (i - (t_end[s] - n_tiles[s])) * BQ  # local index of the tile's first token
        tok0 = cu_q_lens[s] + k0
        qt = jax.lax.dynamic_slice_in_dim(q_pad, tok0, BQ)  # qt: f32[BQ, KVH, G, Dh]
        qf = qt.transpose(1, 0, 2, 3).reshape(KVH, BQ * G, Dh)  # qf: f32[KVH, BQ*G, Dh], rows (token, head)
        lim = jnp.clip(q_offsets[s] + k0 + jnp.arange(BQ) + 1, 0, kv_lens[s])  # lim: i32[BQ]
        lim_rows = jnp.repeat(lim, G)  # lim_rows: i32[BQ*G]
        row = table[s]

        def block_step(n, masked, b, c, width=1):  # n key blocks of width x block keys side by side
            w = width * block  # keys a block of this step

            def by_head(x):  # f32[n*w, KVH, ...] -> f32[KVH*n, w, ...]: batch (KV head, block)
                return jnp.moveaxis(x.reshape(n, w, KVH, *x.shape[2:]), 2, 0).reshape(KVH * n, w, *x.shape[2:])

            cols = jax.lax.dynamic_slice_in_dim(row, b * bp * width * n, bp * width * n)  # cols: i32[n*width*bp]
            k, v, kss, vs = kv.block(cols)  # k, v: f32[n*w, KVH, Dh]; kss, vs: f32[n*w, KVH] or None
            k, v = by_head(k), by_head(v)  # k: f32[KVH*n, w, Dh]
            qn = qf if n == 1 else jnp.broadcast_to(qf[:, None], (KVH, n, BQ * G, Dh)).reshape(KVH * n, BQ * G, Dh)
            sc = jnp.einsum("bmd,bjd->bmj", qn, k)  # sc: f32[KVH*n, BQ*G, w]
            if kss is not None:
                sc = sc * by_head(kss)[:, None, :]
            # mask: bool[1, BQ*G, w], or None below the tile's first row's frontier (n == 1 there)
            mask = ((b * w + jnp.arange(w))[None, :] < lim_rows[:, None])[None] if masked else None
            if vs is None:
                pv = lambda p: jnp.einsum("bmj,bjd->bmd", p, v)  # noqa: E731
            else:
                pv = lambda p: jnp.einsum("bmj,bjd->bmd", p * by_head(vs)[:, None, :], v)  # noqa: E731
            return _online_step(c, sc, mask, pv)

        def start(n):  # online-softmax state (m, l, acc) of n key blocks side by side
            return (jnp.full((KVH * n, BQ * G), NEG_INF, jnp.float32), jnp.zeros((KVH * n, BQ * G), jnp.float32),
                    jnp.zeros((KVH * n, BQ * G, Dh), jnp.float32))

        # blocks below the tile's first row's frontier are whole for every row: no mask; of them, the
        # first whole groups of ks blocks go ks at a time, their states merged before the rest
        full = jnp.min(lim) // block
        c, first = start(1), 0
        if ks > 1:  # under a cond: a tile with no whole group (a short context) pays nothing for it
            c = jax.lax.cond(full >= ks, lambda: _merge_splits(KVH, *jax.lax.fori_loop(
                0, full // ks, functools.partial(block_step, ks, False), start(ks))), lambda: start(1))
            first = full // ks * ks
        elif big > 1:  # under a cond, as above: XLA:CPU starts a loop's first step ahead of the loop
            step = functools.partial(block_step, 1, False, width=big)
            c = jax.lax.cond(full >= big, lambda c: jax.lax.fori_loop(0, full // big, step, c), lambda c: c, c)
            first = full // big * big
        c = jax.lax.fori_loop(first, full, functools.partial(block_step, 1, False), c)
        o_t, lse_t = _finish(*jax.lax.fori_loop(full, (jnp.max(lim) + block - 1) // block,
                                                functools.partial(block_step, 1, True), c))
        o_t = o_t.reshape(KVH, BQ, G, Dh).transpose(1, 0, 2, 3)  # o_t: f32[BQ, KVH, G, Dh]
        lse_t = lse_t.reshape(KVH, BQ, G).transpose(1, 0, 2)  # lse_t: f32[BQ, KVH, G]
        mine = (jnp.arange(BQ) < hi[s] - k0)[:, None, None]  # rows past the range keep old values
        o_t = jnp.where(mine[..., None], o_t, jax.lax.dynamic_slice_in_dim(out, tok0, BQ))
        lse_t = jnp.where(mine, lse_t, jax.lax.dynamic_slice_in_dim(lse, tok0, BQ))
        return (jax.lax.dynamic_update_slice_in_dim(out, o_t, tok0, 0),
                jax.lax.dynamic_update_slice_in_dim(lse, lse_t, tok0, 0))

    return jax.lax.fori_loop(0, t_end[-1], tile, acc)


def decode_alone(lim, block_d: int, block_t: int):
    """lim: i32[S], the keys each decode sees (0: not a decode) -> bool[S], the one decode (if any)
    that walks its keys alone in a one-query tile (blocks of block_t keys) instead of in the batched
    decode loop, where every one of the S slots walks up to the longest decode in blocks of block_d:
    the longest, when its own walk is shorter than the one it adds to every slot's. One 32K-key
    decode beside fifteen of 600 made the loop 42x slower (108.6 vs 2.6 ms a layer on a CPU).
    `scheduler.attention_tiling.decode_span` counts the same choice."""
    S = lim.shape[0]
    first_i = jnp.argmax(lim)
    first = lim[first_i]
    second = jnp.max(jnp.where(jnp.arange(S) == first_i, 0, lim))

    def walk(n, b):
        return (n + b - 1) // b * b

    apart = S * walk(second, block_d) + walk(first, block_t)
    return (jnp.arange(S) == first_i) & (first > 0) & (apart < S * walk(first, block_d))


def decode_big_pages(slots: int, table_pages: int, page: int, kv_heads: int, head_dim: int, small_pages: int,
                     block_bytes: int | None = None) -> int:
    """Pages per big block of the decode loop: as many whole small blocks (`small_pages`) as keep one
    step's gathered float32 keys over all `slots` sequence slots within `block_bytes` (default
    XLA_DECODE_BIG_BLOCK_BYTES, which depends on the host), at most the page table's width;
    `small_pages` when no more fit (then there are no big blocks). On a 2-core AVX-512 Xeon the engine's tick ran 16 decodes at 4K
    keys in 0.74x the time of 64-key blocks alone, 16 at 544 keys in 0.86-0.94x and 64 at 2K in 0.93x
    (`benchmarks/results/decode_big_blocks_cpu.md`); blocks of 32-64 MB a step ran 1.07-1.28x slower than 64-key ones,
    and 8 MB gives 16 slots 1,024-key blocks, which the offline job's ~550-key decodes never fill."""
    block_bytes = XLA_DECODE_BIG_BLOCK_BYTES if block_bytes is None else block_bytes
    per_page = slots * page * kv_heads * head_dim * 4
    big = min(block_bytes // per_page, table_pages) // small_pages * small_pages
    return max(big, small_pages)


def _xla_decodes(qg, kv: _Pages, table, cu_q_lens, lim, bp, big_bp):
    """The decodes, all at once: lim i32[S], keys each sequence's decode sees (0: none) -> per
    sequence (f32[S, KVH, G, Dh], f32[S, KVH, G]). The whole blocks of `big_bp` pages below the
    longest frontier go a big block a step, the rest `bp` pages a step (big_bp: a multiple of bp):
    each loop step's ops have a fixed cost that a 64-key step over few sequences pays many times,
    while the keys past the frontier are walked in small blocks, so big blocks add no work."""
    T, KVH, G, Dh = qg.shape
    S = lim.shape[0]
    block = bp * kv.page
    qd = qg[jnp.clip(cu_q_lens[:-1], 0, T - 1)]  # qd: f32[S, KVH, G, Dh]

    def block_step(n_pages, b, c):  # block b of n_pages pages
        cols = jax.lax.dynamic_slice_in_dim(table, b * n_pages, n_pages, axis=1)  # cols: i32[S, n_pages]
        k, v, ks, vs = kv.block(cols)  # k, v: f32[S, J, KVH, Dh]; ks, vs: f32[S, J, KVH] or None
        sc = jnp.sum(k[:, :, :, None, :] * qd[:, None], axis=-1)  # sc: f32[S, J, KVH, G]
        if ks is not None:
            sc = sc * ks[..., None]
        sc = sc.transpose(0, 2, 3, 1)  # sc: f32[S, KVH, G, J]
        keys = n_pages * kv.page
        mask = (b * keys + jnp.arange(keys))[None, :] < lim[:, None]  # mask: bool[S, J]

        def pv(p):  # p: f32[S, KVH, G, J] -> f32[S, KVH, G, Dh]
            pj = p.transpose(0, 3, 1, 2)  # pj: f32[S, J, KVH, G]
            if vs is not None:
                pj = pj * vs[..., None]
            return jnp.sum(pj[..., None] * v[:, :, :, None, :], axis=1)
        return _online_step(c, sc, mask[:, None, None, :], pv)

    c = (jnp.full((S, KVH, G), NEG_INF, jnp.float32), jnp.zeros((S, KVH, G), jnp.float32),
         jnp.zeros((S, KVH, G, Dh), jnp.float32))
    hi = jnp.max(lim)
    first = 0
    if big_bp > bp:
        n_big = hi // (big_bp * kv.page)  # whole big blocks, all below the longest frontier
        # under a cond: XLA:CPU starts a loop's first step ahead of the loop, so a big loop that
        # takes no step would still gather and score a big block (16 decodes at 544 keys: 1.8x)
        c = jax.lax.cond(n_big > 0, lambda c: jax.lax.fori_loop(0, n_big, functools.partial(block_step, big_bp), c),
                         lambda c: c, c)
        first = n_big * (big_bp // bp)
    return _finish(*jax.lax.fori_loop(first, (hi + block - 1) // block, functools.partial(block_step, bp), c))
