"""The Llama decoder, written per device: runs inside `jax.shard_map` over Mesh(kvp, spp, tp).

Data flow of `forward` (shapes per device; T tokens, S sequences, D width, H/tp query heads,
K = KVHr/tp kv heads, Dh head width, F/tp MLP columns, V/tp vocab rows):

    token_ids -> vocab-parallel embedding lookup, psum(tp)            x: [T, D]
    per local layer (lax.scan over the [L/spp, ...] stack):
        RMSNorm -> q [T, H/tp, Dh], k/v [T, K, Dh] -> RoPE(q, k)
        -> write k/v at slot_mapping into this layer's pages (slot -1 dropped)
        -> attention_fn over the pages -> wo, psum(tp) -> residual
        -> RMSNorm -> SwiGLU gate/up [T, F/tp] -> down, psum(tp) -> residual
    rows logits_indices -> final RMSNorm -> lm_head [S, V/tp] -> all_gather(tp) -> [S, V] f32

The KV cache travels through the layer scan as the full local [L/spp, N, page, K, Dh] arrays in
the carry and is updated in place at [layer, slot]; attention reads layer l's pages.
Sharding decisions live in `medha_jax.model.sharding`; this file only uses the collectives they
imply.
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp
from jax import lax

from medha_jax.model.config import LlamaConfig
from medha_jax.model.inputs import ModelInputs
from medha_jax.model.rope import apply_rope, inv_freq

AttentionFn = Callable[..., tuple[jnp.ndarray, jnp.ndarray]]


def rms_norm(x: jnp.ndarray, w: jnp.ndarray, eps: float) -> jnp.ndarray:
    """HF LlamaRMSNorm: normalise in f32, cast back, then scale. x: [..., D], w: [D]."""
    xf = x.astype(jnp.float32)
    xf = xf * lax.rsqrt(jnp.mean(xf * xf, axis=-1, keepdims=True) + eps)
    return w * xf.astype(x.dtype)


def embed_lookup(embed: jnp.ndarray, token_ids: jnp.ndarray) -> jnp.ndarray:
    """Vocab-parallel lookup. embed: [V/tp, D] rows of this device; token_ids: i32[T] -> [T, D]."""
    rows = embed.shape[0]
    local = token_ids - lax.axis_index("tp") * rows  # local: i32[T]
    mine = (local >= 0) & (local < rows)
    x = jnp.where(mine[:, None], embed[jnp.clip(local, 0, rows - 1)], 0)  # x: [T, D]
    return lax.psum(x, "tp")


def _write_kv(cache: jnp.ndarray, layer: jnp.ndarray, slots: jnp.ndarray, new: jnp.ndarray) -> jnp.ndarray:
    """cache: [Ll, N, page, K, Dh]; new: [T, K, Dh] written at flat slots i32[T] (-1: skipped)."""
    _, N, page, _, _ = cache.shape
    pages = jnp.where(slots < 0, N, slots // page)  # out of range -> dropped by mode="drop"
    # Indexing [layer, page, offset] (no reshape of the cache) keeps the update in place.
    return cache.at[layer, pages, slots % page].set(new.astype(cache.dtype), mode="drop")


def _layer(cfg: LlamaConfig, freq, inp: ModelInputs, attention_fn: AttentionFn, carry, xs):
    x, kv_k, kv_v = carry  # x: [T, D]; kv_k, kv_v: [Ll, N, page, K, Dh]
    lp, layer = xs  # lp: this layer's weights (leading layer axis removed)
    y = rms_norm(x, lp["attn_norm"], cfg.rms_norm_eps)
    q = jnp.einsum("td,dhk->thk", y, lp["wq"])  # q: [T, H/tp, Dh]
    k = jnp.einsum("td,dhk->thk", y, lp["wk"])  # k: [T, K, Dh]
    v = jnp.einsum("td,dhk->thk", y, lp["wv"])  # v: [T, K, Dh]
    q = apply_rope(q, inp.positions, freq)
    k = apply_rope(k, inp.positions, freq)
    kv_k = _write_kv(kv_k, layer, inp.slot_mapping, k)
    kv_v = _write_kv(kv_v, layer, inp.slot_mapping, v)
    attn, _ = attention_fn(
        q, kv_k[layer], kv_v[layer], inp.page_table, inp.cu_q_lens, inp.q_offsets, inp.kv_lens,
        scale=cfg.head_dim ** -0.5,
    )  # attn: [T, H/tp, Dh]
    o = jnp.einsum("thk,hkd->td", attn.astype(x.dtype), lp["wo"])  # o: [T, D] partial sum
    x = x + lax.psum(o, "tp")
    y = rms_norm(x, lp["mlp_norm"], cfg.rms_norm_eps)
    g = jnp.einsum("td,df->tf", y, lp["w_gate"])  # g: [T, F/tp]
    u = jnp.einsum("td,df->tf", y, lp["w_up"])
    m = jnp.einsum("tf,fd->td", jax.nn.silu(g) * u, lp["w_down"])  # m: [T, D] partial sum
    x = x + lax.psum(m, "tp")
    return (x, kv_k, kv_v), None


def forward(params, kv_k, kv_v, inp: ModelInputs, cfg: LlamaConfig, attention_fn: AttentionFn):
    """Per-device forward. Returns (logits f32[S, vocab_size], kv_k, kv_v) with the new K/V written.

    params: per-device slices of the tree in `sharding.PARAM_AXES`; kv_k, kv_v: [L/spp, N/kvp,
    page, K, Dh]; inp: replicated `ModelInputs`; attention_fn: the paged-attention contract of
    `pallas_kernels.reference`.
    """
    if lax.axis_size("spp") != 1:
        raise NotImplementedError("spp>1 needs the pipeline tick (parallelism issue)")
    if lax.axis_size("kvp") != 1:
        raise NotImplementedError("kvp>1 needs the KVP attention merge (parallelism issue)")
    dtype = params["embed"].dtype
    x = embed_lookup(params["embed"], inp.token_ids).astype(dtype)  # x: [T, D]
    n_local = params["layers"]["wq"].shape[0]
    body = lambda carry, xs: _layer(cfg, inv_freq(cfg), inp, attention_fn, carry, xs)
    (x, kv_k, kv_v), _ = lax.scan(
        body, (x, kv_k, kv_v), (params["layers"], jnp.arange(n_local, dtype=jnp.int32)))
    h = rms_norm(x[inp.logits_indices], params["final_norm"], cfg.rms_norm_eps)  # h: [S, D]
    head = params["embed"] if cfg.tie_word_embeddings else params["lm_head"]  # head: [V/tp, D]
    logits = jnp.einsum("sd,vd->sv", h, head, preferred_element_type=jnp.float32)  # [S, V/tp]
    logits = lax.all_gather(logits, "tp", axis=1, tiled=True)[:, : cfg.vocab_size]  # f32[S, V]
    return logits.astype(jnp.float32), kv_k, kv_v
