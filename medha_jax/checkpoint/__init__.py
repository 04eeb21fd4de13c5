"""Model loading: HF config.json + safetensors (sharded), Orbax params checkpoints, the demo model.

Public entry points: `load_model(path_or_demo, mesh, dtype)`, `convert_hf_to_orbax`,
`load_hf_config`, `load_safetensors_params`, `save_params`, `restore_params`.
"""

from medha_jax.checkpoint.hf_config import load_hf_config, parse_hf_config
from medha_jax.checkpoint.load import convert_hf_to_orbax, load_model, resolve_dtype
from medha_jax.checkpoint.orbax_io import restore_params, save_params
from medha_jax.checkpoint.safetensors_io import load_safetensors_params

__all__ = [
    "load_model", "convert_hf_to_orbax", "resolve_dtype", "load_hf_config", "parse_hf_config",
    "load_safetensors_params", "save_params", "restore_params",
]
