"""Llama-family model: config, per-device forward, sharding table, shard_map wrapper.

Public entry points: `LlamaConfig`, `ModelInputs`, `forward` (per device), `make_forward` (one
batch through every stage), `make_step` + `init_acts` (the serving pipeline tick),
`init_kv_cache`, `param_shardings`, `init_params` (seeded random weights).

Imported lazily (PEP 562): `import medha_jax.model.config` and the other pure-Python modules
work without JAX installed; only the names below that need JAX import it, when first used.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "LlamaConfig": "config",
    "init_params": "init",
    "ModelInputs": "inputs", "make_inputs": "inputs", "pack_arrays": "inputs",
    "forward": "llama",
    "init_acts": "pipeline_step", "make_step": "pipeline_step",
    "init_kv_cache": "sharded_forward", "kv_cache_bytes_per_page": "sharded_forward",
    "make_forward": "sharded_forward",
    "param_shardings": "sharded_forward",
    "Layout": "sharding", "layout": "sharding",
}

__all__ = list(_EXPORTS)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'medha_jax.model' has no attribute {name!r}")
    return getattr(importlib.import_module(f"medha_jax.model.{module}"), name)
