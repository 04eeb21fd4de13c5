"""Llama-family model: config, per-device forward, sharding table, shard_map wrapper.

Public entry points: `LlamaConfig`, `ModelInputs`, `forward` (per device), `make_forward` (one
batch through every stage), `make_step` + `init_acts` (the serving pipeline tick),
`init_kv_cache`, `param_shardings`, `init_params` (seeded random weights).
"""

from medha_jax.model.config import LlamaConfig
from medha_jax.model.init import init_params
from medha_jax.model.inputs import ModelInputs, make_inputs, pack_arrays, single_sequence_inputs
from medha_jax.model.llama import forward
from medha_jax.model.pipeline import init_acts, make_step
from medha_jax.model.sharded import init_kv_cache, kv_cache_bytes_per_page, make_forward, param_shardings
from medha_jax.model.sharding import Layout, layout

__all__ = [
    "LlamaConfig", "ModelInputs", "make_inputs", "pack_arrays", "single_sequence_inputs", "forward",
    "make_forward", "make_step", "init_acts",
    "init_kv_cache", "kv_cache_bytes_per_page", "param_shardings", "init_params", "Layout", "layout",
]
