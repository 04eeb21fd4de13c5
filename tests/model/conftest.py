"""Shared fixtures for the model tests: golden HF data, meshes over host CPU devices, loaded params.

Needs 8 host devices: run with XLA_FLAGS=--xla_force_host_platform_device_count=8 (set here
too, in case nothing initialised JAX earlier in the process).
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "cpu")
if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()

import jax
import pytest

from medha_jax.checkpoint import load_hf_config, load_safetensors_params
from medha_jax.mesh import make_mesh

DATA = Path(__file__).resolve().parent.parent / "data"


def _tp_mesh(tp: int):
    if len(jax.devices()) < tp:
        pytest.skip(f"needs {tp} devices; run with XLA_FLAGS=--xla_force_host_platform_device_count=8")
    return make_mesh({"tp": tp}, devices=jax.devices()[:tp])


@functools.lru_cache(maxsize=None)
def _loaded(variant: str, tp: int):
    mesh = _tp_mesh(tp)
    cfg = load_hf_config(DATA / variant)
    return cfg, mesh, load_safetensors_params(DATA / variant, cfg, mesh, "float32")


@pytest.fixture(scope="session")
def data_dir() -> Path:
    return DATA


@pytest.fixture(scope="session")
def golden():
    """golden(variant) -> the transformers reference outputs of tests/data/<variant>."""
    return lambda variant: json.loads((DATA / variant / "golden.json").read_text())


@pytest.fixture(scope="session")
def tp_mesh():
    """tp_mesh(tp) -> Mesh(kvp=1, spp=1, tp) over the first tp devices."""
    return _tp_mesh


@pytest.fixture(scope="session")
def loaded():
    """loaded(variant, tp) -> (cfg, mesh, float32 params), cached per process."""
    return _loaded
