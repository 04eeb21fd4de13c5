"""A provisional runtime predictor that needs no profile run: the model's arithmetic over this
device's measured matmul and memory rates.

  model shape, mesh (tp, spp), dtypes --per tick, per device--> weight and KV bytes, FLOPs per token
  this device: one matmul of the model's own MLP shape, one sum over 64 MB, timed (~1 s with compiles)
  --> RuntimePredictor coefficients (const, tokens, chunk_kv, chunk_sq, decodes, and decode_kv or,
      on the XLA backend, decode_span)
      fit_info {"kind": "nominal", "provisional": True, rates}: never saved as a profile, and the
      prefill-time cache built on it stays in memory (`PrefillTimeCache`)

Why: a time-budget policy needs a predictor, and measuring a quick profile compiles 9 shape
buckets and times ~80 batches: 3.6 min of the 5 min `LLM(model=dir)` took to start on the 2-core
EPYC VM for the 31M Llama (`benchmarks/results/startup_*.md`). In batch mode (`LLM`'s default) no
iteration has a time budget and derived deadlines bind nothing (`SchedulerConfig.batch_mode`); the
predictor only orders the queue by deadline (for prompts that arrive together, any predictor that
grows with the work gives the order a measured one gives) and prices the deadlines requests declare
themselves. For those the online corrections (one for prefill iterations, one for decode-only
ones) scale these predictions to the measured times within tens of iterations. A server
(`batch_mode` off) still measures a profile on first start: its budgets and rescues need the
measured shape of the costs, not only their scale.
"""

from __future__ import annotations

import statistics
import time

from medha_jax.model.config import LlamaConfig
from medha_jax.scheduler.attention_tiling import Tiling
from medha_jax.scheduler.predictor import ProfileKey, RuntimePredictor

ATTENTION_EFFICIENCY = 1 / 3
"""Attention's FLOP rate as a fraction of a matmul's: the XLA path on the 2-core CPUs ran prefill
attention at ~36 GFLOP/s beside ~110 for the layers' matmuls (`benchmarks/step_profile_cpu.py`)."""
STEP_OVERHEAD = 1e-3
"""Seconds every iteration pays beyond its weights' read (dispatch, sampling, the host's share)."""


def _median_seconds(fn, *args, repeats: int = 5) -> float:
    fn(*args).block_until_ready()  # compile, and first touch
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn(*args).block_until_ready()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def device_rates(cfg: LlamaConfig, dtype: str, tokens: int = 1024) -> tuple[float, float]:
    """(matmul FLOP/s, memory bytes/s) of the default JAX device: a [tokens, D] x [D, F] product in
    `dtype` (the model's MLP shape) and a sum over 64 MB of float32."""
    import jax
    import jax.numpy as jnp

    D, F = cfg.hidden_size, cfg.intermediate_size
    x = jnp.ones((tokens, D), dtype)  # x: [T, D]
    w = jnp.full((D, F), 0.01, dtype)  # w: [D, F]
    mm = _median_seconds(jax.jit(lambda a, b: a @ b), x, w)
    buf = jnp.ones((16 << 20,), jnp.float32)  # buf: f32[16M], 64 MB
    rd = _median_seconds(jax.jit(jnp.sum), buf)
    return 2.0 * tokens * D * F / mm, buf.nbytes / rd


def nominal_coefficients(cfg: LlamaConfig, *, tp: int, spp: int, weight_bytes: int, kv_bytes: int,
                         flops: float, bandwidth: float, every_slot: bool = False) -> dict[str, float]:
    """Seconds per unit of each predictor feature for one tick (one pipeline stage) on one device:
    the stage's linear layers at `flops` (each token) and its weights read once at `bandwidth`
    (every iteration); prefill attention at ATTENTION_EFFICIENCY x `flops` (4 FLOPs per query-key
    pair per head and layer; a chunk's own causal pairs are q^2 / 2); the keys and values decodes
    read, at `bandwidth`: each decode's own (`decode_kv`), or, `every_slot` (the XLA backend's
    batched decode loop, where every sequence slot of the bucket walks up to the longest decode),
    the key slots that loop walks (`decode_span`; 128 decodes up to 17K keys took 10 s on the EPYC
    VM, ~10x their own keys' read); each sampled sequence's lm_head row. weight_bytes / kv_bytes:
    bytes per weight / cached element."""
    layers = cfg.num_layers / spp
    D, F, Dh = cfg.hidden_size, cfg.intermediate_size, cfg.head_dim
    H, K = cfg.num_heads / tp, max(cfg.num_kv_heads / tp, 1.0)
    linear = layers * (D * (H + 2 * K) * Dh + H * Dh * D + 3 * D * F / tp)  # weights a token multiplies by
    head = cfg.vocab_size * D / tp  # lm_head rows
    pair = layers * H * Dh * 4 / (flops * ATTENTION_EFFICIENCY)
    return {
        "const": STEP_OVERHEAD + (linear + head) * weight_bytes / bandwidth,
        "tokens": 2.0 * linear / flops,
        "chunk_kv": pair,
        "chunk_sq": pair / 2,
        "decodes": 2.0 * head / flops,
        "decode_span" if every_slot else "decode_kv": layers * 2 * K * Dh * kv_bytes / bandwidth,
    }


def nominal_predictor(cfg: LlamaConfig, key: ProfileKey, tiling: Tiling, *, tp: int, spp: int, dtype: str,
                      kv_dtype: str, backend: str) -> RuntimePredictor:
    """The provisional predictor of this module's docstring for `cfg` on the default device;
    backend: the attention backend's name ("xla": decodes walk every slot of their bucket)."""
    flops, bandwidth = device_rates(cfg, dtype)
    weight_bytes = 2 if dtype == "bfloat16" else 4
    kv_bytes = 1 if kv_dtype.startswith("fp8") else weight_bytes
    coef = nominal_coefficients(cfg, tp=tp, spp=spp, weight_bytes=weight_bytes, kv_bytes=kv_bytes, flops=flops,
                                bandwidth=bandwidth, every_slot=backend == "xla")
    return RuntimePredictor(coef, key=key, tiling=tiling,
                            fit_info={"kind": "nominal", "provisional": True, "matmul_flops": flops,
                                      "memory_bytes_per_s": bandwidth})
