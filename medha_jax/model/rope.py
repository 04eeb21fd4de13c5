"""Rotary position embeddings (RoPE) as in HF Llama: default, `linear` and `llama3` scaling.

Data flow: `inv_freq(cfg)` (numpy, computed once at trace time, float32 like transformers)
-> `apply_rope(x, positions, inv_freq)` rotates q or k ([heads, Dh, T]) of the tokens at their
absolute positions. The rotation pairs dimension i with i + Dh/2 ("rotate half"), the layout of HF
checkpoints, so weights load without permutation.
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np

from medha_jax.model.config import LlamaConfig


def inv_freq(cfg: LlamaConfig) -> np.ndarray:
    """Inverse frequencies f32[Dh/2] after the config's rope scaling."""
    dim = cfg.head_dim
    exps = np.arange(0, dim, 2, dtype=np.int64).astype(np.float32) / np.float32(dim)
    freq = (np.float32(1.0) / (np.float32(cfg.rope_theta) ** exps)).astype(np.float32)
    rs = cfg.rope_scaling
    if rs is None:
        return freq
    if rs["rope_type"] == "linear":
        return (freq / np.float32(rs["factor"])).astype(np.float32)
    if rs["rope_type"] == "llama3":
        return _llama3(freq, rs)
    raise ValueError(f"unsupported rope_type {rs['rope_type']!r}")


def _llama3(freq: np.ndarray, rs: dict) -> np.ndarray:
    """Llama 3.1 frequency-dependent scaling: long wavelengths / factor, short ones kept, smooth between."""
    factor = float(rs["factor"])
    low, high = float(rs["low_freq_factor"]), float(rs["high_freq_factor"])
    old_len = float(rs["original_max_position_embeddings"])
    low_wavelen, high_wavelen = old_len / low, old_len / high
    wavelen = (2 * math.pi / freq).astype(np.float32)
    scaled = np.where(wavelen > low_wavelen, freq / factor, freq).astype(np.float32)
    smooth = ((old_len / wavelen - low) / (high - low)).astype(np.float32)
    smoothed = ((1 - smooth) * scaled / factor + smooth * scaled).astype(np.float32)
    medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
    return np.where(medium, smoothed, scaled).astype(np.float32)


def apply_rope(x: jnp.ndarray, positions: jnp.ndarray, freq: np.ndarray) -> jnp.ndarray:
    """Rotate x: [N, Dh, T] (N heads, feature-major as the layer loop projects them) at positions
    i32[T]; computed in f32, returned in x.dtype."""
    angles = positions.astype(jnp.float32)[None, :] * jnp.asarray(freq)[:, None]  # f32[Dh/2, T]
    cos, sin = jnp.cos(angles), jnp.sin(angles)
    xf = x.astype(jnp.float32)
    half = x.shape[-2] // 2
    x1, x2 = xf[:, :half, :], xf[:, half:, :]  # x1, x2: f32[N, Dh/2, T]
    out = jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-2)
    return out.astype(x.dtype)
