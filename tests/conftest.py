"""Test-wide setup: 8 host CPU devices and a persistent compilation cache, by environment only.

JAX reads these variables when (and if) a test first imports it, so every test process sees the
same 8-device CPU platform and a program compiled once (same model, same shape bucket) is free
in later tests. Nothing here imports JAX: the scheduler, simulator and request tests run in a
Python without it (scripts/test_nojax.sh).
"""

import os
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "cpu")
if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()
os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", str(Path(__file__).resolve().parent.parent / ".jax_cache"))
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.5")
