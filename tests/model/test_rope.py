"""RoPE: frequencies of each scaling type, and the rotation's defining properties."""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np

from medha_jax.model.config import LlamaConfig
from medha_jax.model.rope import apply_rope, inv_freq

BASE = dict(vocab_size=64, hidden_size=64, intermediate_size=64, num_layers=1, num_heads=4,
            num_kv_heads=4, head_dim=32, rope_theta=500000.0)
LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 8192}


def test_default_and_linear_frequencies():
    plain = inv_freq(LlamaConfig(**BASE))
    expect = 1.0 / 500000.0 ** (np.arange(0, 32, 2) / 32)
    np.testing.assert_allclose(plain, expect, rtol=1e-6)
    lin = inv_freq(LlamaConfig(**BASE, rope_scaling={"rope_type": "linear", "factor": 4.0}))
    np.testing.assert_allclose(lin, expect / 4.0, rtol=1e-6)


def test_llama3_frequencies_keep_high_scale_low_and_blend_between():
    base = inv_freq(LlamaConfig(**BASE)).astype(np.float64)
    scaled = inv_freq(LlamaConfig(**BASE, rope_scaling=LLAMA3)).astype(np.float64)
    wavelen = 2 * math.pi / base
    high = wavelen < 8192 / 4.0  # short wavelengths: untouched
    low = wavelen > 8192 / 1.0  # long wavelengths: divided by the factor
    mid = ~high & ~low
    assert high.any() and low.any() and mid.any()
    np.testing.assert_allclose(scaled[high], base[high], rtol=1e-6)
    np.testing.assert_allclose(scaled[low], base[low] / 8.0, rtol=1e-6)
    smooth = (8192 / wavelen[mid] - 1.0) / 3.0
    np.testing.assert_allclose(scaled[mid], (1 - smooth) * base[mid] / 8 + smooth * base[mid], rtol=1e-5)


def test_rotation_keeps_norms_and_depends_only_on_relative_position():
    freq = inv_freq(LlamaConfig(**BASE, rope_scaling=LLAMA3))
    rng = np.random.default_rng(0)
    q = jnp.asarray(rng.normal(size=(4, 32, 1)), jnp.float32)  # [heads, Dh, tokens]
    k = jnp.asarray(rng.normal(size=(4, 32, 1)), jnp.float32)

    def score(pq, pk):
        rq = apply_rope(q, jnp.array([pq]), freq)
        rk = apply_rope(k, jnp.array([pk]), freq)
        return np.asarray(jnp.sum(rq * rk, axis=-2))

    np.testing.assert_allclose(score(10, 3), score(1010, 1003), rtol=2e-4, atol=2e-4)
    rq = apply_rope(q, jnp.array([777]), freq)
    np.testing.assert_allclose(jnp.linalg.norm(rq, axis=-2), jnp.linalg.norm(q, axis=-2), rtol=1e-5)
    np.testing.assert_allclose(apply_rope(q, jnp.array([0]), freq), q)  # position 0: identity
