"""fp8 KV pages: what every attention backend needs to read a quantised cache.

Layout: values [N, page, KVH, Dh] stored as uint8 holding float8_e4m3fn bit patterns, and one
float32 scale per page and kv head, scales f32[N, KVH], so that key j of page p, head h is
`to_float(values[p, j, h, :]) * scales[p, h]`. The cache holds bits, not float8 arrays, because
XLA's CPU backend has no float8 scatter or gather: it converts a whole float8 cache to f16 and
back around each one (a decode step on an fp8 cache ran 10x slower than on bf16); a uint8 array
is moved as bytes, and only gathered blocks are bitcast to float8 (free) and converted.
Scales are powers of two: the smallest 2^e >= amax / 448 of what the page holds
(`power_of_two_scale`). Dividing by one only shifts exponents, so quantising rounds nothing but
the mantissa (3 bits, the same relative precision any scale would give a normal number), and the
writer (`medha_jax.model.kv_cache`), which re-quantises a page's earlier tokens when a new token
raises its scale, changes them by an exact shift too (only values pushed into fp8's subnormals,
below 2^-6 of the page's top binade, lose bits).

The backends never materialise a dequantised page: a key's scale multiplies its score column
(q . k_j * s_j) and a value's scale multiplies its probability column ((p_j * s_j) . v_j), both
[rows, keys]-sized instead of [keys, Dh].
"""

from __future__ import annotations

import jax.numpy as jnp
from jax import lax

FP8 = jnp.float8_e4m3fn  # what kv_cache_dtype="fp8_e4m3" selects
STORAGE = jnp.uint8  # what the cache's arrays hold: FP8's bit patterns
FP8_MAX = 448.0  # largest finite float8_e4m3fn
MIN_SCALE = 1e-30  # an all-zero head still divides to 0, never 0/0


def power_of_two_scale(amax):
    """The scale for values of magnitude up to amax: the smallest power of two >= amax / 448."""
    return jnp.exp2(jnp.ceil(jnp.log2(jnp.maximum(amax / FP8_MAX, MIN_SCALE))))


def is_quantized(pages) -> bool:
    return pages.dtype == STORAGE


def encode(y):
    """f32 values already divided by their scale -> their float8_e4m3fn bits (uint8), saturating at +-448."""
    return lax.bitcast_convert_type(jnp.clip(y, -FP8_MAX, FP8_MAX).astype(FP8), STORAGE)


def to_float(bits, dtype=jnp.float32):
    """uint8 float8_e4m3fn bits -> their values in dtype (unscaled)."""
    return lax.bitcast_convert_type(bits, FP8).astype(dtype)


def quantize(x, scale):
    """x f32[..., Dh] / scale f32[...] -> fp8 bits uint8[..., Dh]."""
    return encode(x.astype(jnp.float32) / scale[..., None])


def dequantize_pages(pages, scales):
    """values [N, page, KVH, Dh] (fp8 bits) and scales f32[N, KVH] -> f32[N, page, KVH, Dh]."""
    return to_float(pages) * scales[:, None, :, None]


def key_scales(scales, cols, page: int):
    """Per key of the pages `cols` i32[..., bp]: scales f32[N, KVH] -> f32[..., bp * page, KVH]."""
    s = scales[cols]  # s: f32[..., bp, KVH]
    s = jnp.broadcast_to(s[..., None, :], s.shape[:-1] + (page, s.shape[-1]))  # [..., bp, page, KVH]
    return s.reshape(s.shape[:-3] + (s.shape[-3] * page, s.shape[-1]))


def check_scales(k_pages, k_scales, v_scales):
    """Both scale arrays given exactly when the pages are fp8, shaped [N, KVH]."""
    quantized = is_quantized(k_pages)
    if quantized != (k_scales is not None) or (k_scales is None) != (v_scales is None):
        raise ValueError(f"k/v pages of dtype {k_pages.dtype} need k_scales and v_scales "
                         f"{'f32[N, KVH]' if quantized else 'None'}")
    if quantized:
        want = (k_pages.shape[0], k_pages.shape[2])
        if k_scales.shape != want or v_scales.shape != want:
            raise ValueError(f"k_scales {k_scales.shape} / v_scales {v_scales.shape}: expected {want} "
                             "(one scale per page and kv head)")
