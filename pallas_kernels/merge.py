"""Exact merge of partial attention results (KV splits, KVP shards) by log-sum-exp.

Each part g computed softmax attention over a disjoint subset of the keys and returned
`(o_g, lse_g)`; the whole is `o = sum_g exp(lse_g - m) o_g / sum_g exp(lse_g - m)` with
`m = max_g lse_g` and `lse = m + log(sum_g exp(lse_g - m))`. A part that saw no key has
`lse_g = -inf` and drops out; if every part is empty the result is (0, -inf), never NaN.
"""

from __future__ import annotations

import jax.numpy as jnp


def merge_attention(outs, lses):
    """outs: [G, T, H, Dh]; lses: f32[G, T, H] -> (out [T, H, Dh], lse f32[T, H])."""
    m = jnp.max(lses, axis=0)  # m: f32[T, H]
    m_safe = jnp.where(jnp.isfinite(m), m, 0.0)
    w = jnp.exp(lses - m_safe[None])  # w: f32[G, T, H]; exp(-inf) = 0 for empty parts
    denom = jnp.sum(w, axis=0)
    seen = denom > 0.0
    out = jnp.sum(w[..., None] * outs.astype(jnp.float32), axis=0) / jnp.where(seen, denom, 1.0)[..., None]
    lse = jnp.where(seen, m_safe + jnp.log(jnp.where(seen, denom, 1.0)), float("-inf"))
    return out.astype(outs.dtype), lse
