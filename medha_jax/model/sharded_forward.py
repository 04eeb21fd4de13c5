"""The global view of the model: shard_map wrapper, sharded KV cache, param shardings.

Data flow: global params (sharded as in `sharding.PARAM_AXES`) + global KV cache
[L, N, page, KVHr, Dh] sharded P("spp", "kvp", None, "tp", None) (fp8: values and scales alike,
`kv_cache.QuantizedPages`) + `ModelInputs` (one batch per kvp group, sharded over kvp) ->
`jax.shard_map(llama.forward)` -> logits f32[kvp*S, V] (rows g*S..: group g's batch) + the updated
cache (same sharding). The returned function is jittable. It runs one
batch through every stage in turn; the serving path pipelines microbatches over the stages with
`medha_jax.model.pipeline_step.make_step`.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from medha_jax.model import kv_cache, sharding
from medha_jax.model.config import LlamaConfig
from medha_jax.model.llama import AttentionFn, forward

param_shardings = sharding.param_shardings


def make_forward(cfg: LlamaConfig, mesh: Mesh, attention_fn: AttentionFn):
    """`(params, kv_k, kv_v, inp) -> (logits f32[kvp*S, V], kv_k, kv_v)` over `mesh`: row g*S + s
    is sequence slot s of group g's batch (`model.inputs.place`; with one group, slot s).

    inp: `ModelInputs` with a leading kvp dim on every field (`model.make_inputs(..., kvp=...)`).
    Raises ValueError if cfg does not split over the mesh.
    """
    sharding.layout(cfg, mesh)
    per_device = functools.partial(forward, cfg=cfg, attention_fn=attention_fn)
    kv = sharding.KV_CACHE_SPEC
    return jax.shard_map(
        per_device,
        mesh=mesh,
        in_specs=(sharding.param_specs(cfg), kv, kv, sharding.input_specs(stacked=False)),
        out_specs=(P("kvp"), kv, kv),
        # Attention kernels (Pallas calls, loops with freshly made carries) carry no
        # varying-manual-axes annotations, so the vma type check would reject them. The logits
        # are replicated over tp and spp by construction: all_gather over tp, and a masked psum
        # over spp broadcasts the last stage's.
        check_vma=False,
    )


def kv_cache_sharding(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, sharding.KV_CACHE_SPEC)


def init_kv_cache(cfg: LlamaConfig, mesh: Mesh, total_pages: int, page_size: int, dtype=jnp.bfloat16):
    """Zero (kv_k, kv_v), each global [L, total_pages, page_size, KVHr, Dh], created sharded;
    dtype float8_e4m3fn gives `kv_cache.QuantizedPages` (fp8 values and their scales).

    total_pages is the global count: each kvp group gets total_pages // kvp pages (its local pool).
    """
    shape = sharding.kv_cache_shape(cfg, sharding.layout(cfg, mesh), total_pages, page_size)
    zeros = jax.jit(lambda: kv_cache.zeros(shape, dtype), out_shardings=kv_cache_sharding(mesh))
    return zeros(), zeros()


def kv_cache_bytes_per_page(cfg: LlamaConfig, mesh: Mesh, page_size: int, dtype=jnp.bfloat16) -> int:
    """Bytes one page of K plus V takes on ONE device (for sizing the pool from free memory)."""
    lay = sharding.layout(cfg, mesh)
    per_dev = (cfg.num_layers // lay.spp) * page_size * (lay.kv_heads // lay.tp) * cfg.head_dim
    return math.ceil(2 * per_dev * kv_cache.bytes_per_page_element(dtype, page_size, cfg.head_dim))
