"""The pipeline tick updates its state in place: no copy of a cache-sized array (per device:
PAGES/kvp pages) and none of the activation state ([1, 1, T_max, D] per stage and group) in the compiled
step of a (spp=2, kvp=2, tp=2) executor."""

import jax.numpy as jnp

from medha_jax.demo_model import DEMO_CONFIG, load_demo
from medha_jax.executor.buckets import Bucket, BucketLadders
from medha_jax.executor.executor import Executor
from medha_jax.mesh import make_mesh
from pallas_kernels.reference import paged_attention_xla

PAGES, T_MAX = 1000, 96  # sizes no other dimension has, to find state-sized arrays in the HLO


def test_compiled_tick_copies_neither_cache_nor_activations():
    mesh = make_mesh("tp=2,spp=2,kvp=2")
    _, params, _ = load_demo(mesh)
    ladders = BucketLadders((32, T_MAX), (4,), (8,))
    ex = Executor(DEMO_CONFIG, params, mesh, total_pages=2 * PAGES, page_size=16, kv_dtype=jnp.float32,
                  ladders=ladders, attention_fn=paged_attention_xla, group_tokens=128)
    assert ex.acts.shape == (2, 2, T_MAX, DEMO_CONFIG.hidden_size)  # [spp, kvp, T, D]
    hlo = ex._step.lower(*ex._abstract_args(Bucket(32, 4, 8))).compile().as_text()
    lines = hlo.splitlines()
    assert any(f",{PAGES}," in ln for ln in lines) and any(f"[1,1,{T_MAX}," in ln for ln in lines)  # the patterns bite
    copies = [ln.strip()[:160] for ln in lines
              if " copy(" in ln and (f",{PAGES}," in ln or f"[1,1,{T_MAX}," in ln)]
    assert not copies, "state copied:\n" + "\n".join(copies)
