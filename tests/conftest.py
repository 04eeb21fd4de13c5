"""Test-wide setup: 8 host CPU devices and a persistent compilation cache, by environment only.

JAX reads these variables when (and if) a test first imports it, so every test process sees the
same 8-device CPU platform and a program compiled once (same model, same shape bucket) is free
in later tests. Nothing here imports JAX: the scheduler, simulator and request tests run in a
Python without it (scripts/test_nojax.sh).
"""

import os
import sys
from pathlib import Path

import pytest

os.environ.setdefault("JAX_PLATFORMS", "cpu")
if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()
os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", str(Path(__file__).resolve().parent.parent / ".jax_cache"))
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.5")


@pytest.fixture(autouse=True, scope="module")
def _stop_background_compilers_after_the_module():
    """A module's engines (module-scoped fixtures) are gone when it ends, but their background
    compilers would keep compiling buckets nobody will run, taking CPU from the next module."""
    yield
    bc = sys.modules.get("medha_jax.executor.background_compile")  # only if the module used JAX
    if bc is not None:
        for c in list(bc._live):
            c.stop()
