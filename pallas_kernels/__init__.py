"""Paged attention for medha-jax: the jnp reference/XLA path and Pallas GPU kernels (see api.py).

Importing `jax.experimental.pallas.fuser` here, at package import, registers the config option
that jax otherwise registers lazily during the first Pallas trace; a registration mid-run adds a
key to every jit cache, so every jitted function traced before it would trace (and compile) once
more (checked with jax 0.11.2: a trivial interpret-mode pallas_call under jit traces twice).
"""

import jax.experimental.pallas.fuser  # noqa: F401
