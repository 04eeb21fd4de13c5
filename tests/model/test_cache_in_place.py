"""The KV cache is updated in place: the compiled step holds no copy of a cache-sized array.

A copy would cost a full pass over the cache per layer and step (it did, once, when the cache
was reshaped for the scatter: decode on a 134 MB cache took ~1 s instead of ~1 ms).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

from medha_jax.demo_model import DEMO_CONFIG, load_demo
from medha_jax.mesh import make_mesh
from medha_jax.model import init_kv_cache, make_forward, make_inputs
from pallas_kernels.reference import paged_attention_xla

PAGES = 1000  # a page count no other dimension has, to find cache-sized arrays in the HLO


@pytest.mark.parametrize("tp,dtype", [(1, jnp.float32), (2, jnp.float32), (2, jnp.float8_e4m3fn)],
                         ids=["tp1", "tp2", "tp2-fp8"])
def test_compiled_step_does_not_copy_the_cache(tp, dtype):
    """fp8: neither the values nor their scales [L, PAGES, 1, K, 1] are copied, nor converted whole
    (XLA's CPU backend converts a float8 array around every scatter and gather: the reason the
    cache holds uint8 bits)."""
    mesh = make_mesh({"tp": tp}, devices=jax.devices()[:tp])
    _, params, _ = load_demo(mesh)
    k, v = init_kv_cache(DEMO_CONFIG, mesh, PAGES, 16, dtype)
    fwd = jax.jit(make_forward(DEMO_CONFIG, mesh, paged_attention_xla), donate_argnums=(1, 2))
    inp = make_inputs([([5] * 20, 40, [3, 4, 7, 9])], 16)
    hlo = fwd.lower(params, k, v, inp).compile().as_text()
    copies = [ln.strip()[:160] for ln in hlo.splitlines()
              if (" copy(" in ln or " convert(" in ln) and f",{PAGES}," in ln]
    assert not copies, "cache copied or converted:\n" + "\n".join(copies)
    # Nor is one layer of it sliced out per layer (the step would then cost a pass over the
    # cache: 30 ms instead of 6 ms at 2048 pages). Per device the cache is [L, PAGES, ...].
    layer_slices = [ln.strip()[:160] for ln in hlo.splitlines()
                    if " dynamic-slice(" in ln and f"[1,{PAGES},16," in ln]
    assert not layer_slices, "a layer of the cache is sliced out:\n" + "\n".join(layer_slices)
