"""One entry point: "demo" | HF model dir | medha params checkpoint -> (cfg, params, tokenizer).

Data flow of `load_model`:
- "demo": `demo_model.load_demo` (seeded random weights, in-memory byte tokenizer).
- a directory with medha_config.json (written by `save_params` / `convert_hf_to_orbax`):
  Orbax restore into the mesh's shardings + tokenizer.json from the same directory.
- an HF directory (config.json + *.safetensors): `hf_config` -> `safetensors_io` loads
  each device's slices + `Tokenizer.from_dir`.
- load_format="dummy" with an HF directory: `hf_config` -> `model.init.init_params` (seeded
  random weights made in place in the mesh's shardings; no weight files read) + tokenizer.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import jax.numpy as jnp
from jax.sharding import Mesh

from medha_jax.checkpoint.hf_config import load_hf_config
from medha_jax.checkpoint.orbax_io import META_FILE, restore_params, save_params
from medha_jax.checkpoint.safetensors_io import load_safetensors_params
from medha_jax.tokenizer import Tokenizer

DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")


def resolve_dtype(dtype) -> jnp.dtype:
    """'float32' | 'bfloat16' | a jnp dtype -> jnp dtype; anything else is an error."""
    if isinstance(dtype, str):
        if dtype not in DTYPES:
            raise ValueError(f"unsupported dtype {dtype!r}; choose one of {', '.join(DTYPES)}")
        return jnp.dtype(DTYPES[dtype])
    d = jnp.dtype(dtype)
    if d not in (jnp.dtype(jnp.float32), jnp.dtype(jnp.bfloat16)):
        raise ValueError(f"unsupported dtype {d}; choose float32 or bfloat16")
    return d


def load_model(path_or_demo: str | Path, mesh: Mesh, dtype="bfloat16", require_tokenizer: bool = True,
               seed: int | None = None, load_format: str = "auto"):
    """(LlamaConfig, params in `param_shardings(cfg, mesh)`, Tokenizer or None).

    seed: weights seed of the demo model and of dummy weights (None: the demo's fixed default,
    0 for dummy); ignored for checkpoints. load_format "dummy": random weights of config.json's
    shape instead of the directory's weight files.
    require_tokenizer=False returns None for the tokenizer when the directory has no
    tokenizer.json (token-id prompts only); otherwise a missing tokenizer.json is an error.
    """
    dt = resolve_dtype(dtype)
    if str(path_or_demo) == "demo":
        from medha_jax.demo_model import load_demo

        return load_demo(mesh, dt, seed=seed)
    d = Path(path_or_demo)
    if not d.is_dir():
        raise FileNotFoundError(
            f"model {str(path_or_demo)!r} is neither 'demo' nor an existing directory")
    if load_format not in ("auto", "dummy"):
        raise ValueError(f"load_format must be 'auto' or 'dummy', got {load_format!r}")
    if load_format == "dummy":
        from medha_jax.model.init import init_params

        cfg = load_hf_config(d)
        params = init_params(cfg, mesh, seed=0 if seed is None else seed, dtype=dt)
    elif (d / META_FILE).is_file():
        cfg, params = restore_params(d, mesh, dtype=dt)
    else:
        cfg = load_hf_config(d)
        params = load_safetensors_params(d, cfg, mesh, dt)
    tok = None
    if require_tokenizer or (d / "tokenizer.json").is_file():
        tok = Tokenizer.from_dir(d, eos_token_ids=cfg.eos_token_ids, bos_token_id=cfg.bos_token_id)
    return cfg, params, tok


def convert_hf_to_orbax(hf_dir: str | Path, out_dir: str | Path, mesh: Mesh, dtype="bfloat16") -> None:
    """Convert an HF directory once into an Orbax params checkpoint (+ its tokenizer files)."""
    cfg = load_hf_config(hf_dir)
    params = load_safetensors_params(hf_dir, cfg, mesh, resolve_dtype(dtype))
    save_params(out_dir, cfg, params, mesh)
    for f in TOKENIZER_FILES:
        if (Path(hf_dir) / f).is_file():
            shutil.copy(Path(hf_dir) / f, Path(out_dir) / f)
