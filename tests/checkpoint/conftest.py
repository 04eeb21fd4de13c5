"""Fixtures for the checkpoint tests: the committed tiny HF checkpoints and small meshes."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "cpu")
if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()

import jax
import pytest

from medha_jax.mesh import make_mesh

DATA = Path(__file__).resolve().parent.parent / "data"


@pytest.fixture(scope="session")
def data_dir() -> Path:
    return DATA


@pytest.fixture
def model_copy(tmp_path):
    """model_copy(variant) -> a writable copy of tests/data/<variant> (to break on purpose)."""
    def copy(variant: str) -> Path:
        dst = tmp_path / variant
        shutil.copytree(DATA / variant, dst)
        return dst
    return copy


@pytest.fixture(scope="session")
def tp_mesh():
    def make(tp: int, **more):
        n = tp * more.get("spp", 1) * more.get("kvp", 1)
        if len(jax.devices()) < n:
            pytest.skip(f"needs {n} devices; run with XLA_FLAGS=--xla_force_host_platform_device_count=8")
        return make_mesh({"tp": tp, **more}, devices=jax.devices()[:n])
    return make


@pytest.fixture(scope="session")
def golden():
    return lambda variant: json.loads((DATA / variant / "golden.json").read_text())
