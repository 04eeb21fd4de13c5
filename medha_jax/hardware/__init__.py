"""Analytic performance models of hardware we do not have: FLOP and byte counts per iteration.

  ModelShape (models.py) + DeviceSpec, Efficiency (device_specs.py)
      --> AnalyticPerfModel (perf_model.py): iteration latency and SPP tick of a batch composition
          on a (tp, spp, kvp) mesh; `predict(composition)` like a fitted RuntimePredictor
      --> prefill.py: whole prefills streamed through SPP (static or adaptive chunks), decode TPOT
      --> references.py: the figures the papers report, next to what the model predicts

Used by the simulator (`medha_jax.sim`) as a device and by benchmarks/scaling_model.py.
Documented in docs/simulator.md. Pure Python, no JAX.
"""

from medha_jax.hardware.device_specs import (A100_80GB, DEVICES, H100_80GB, DeviceSpec, Efficiency, default_efficiency,
                                             get_device)
from medha_jax.hardware.models import LLAMA3_8B, LLAMA3_70B, MODELS, ModelShape, get_model
from medha_jax.hardware.perf_model import AnalyticPerfModel, pairs_in_shard
from medha_jax.hardware.prefill import adaptive_chunks, decode_time, static_chunks, streamed_prefill_time

__all__ = [
    "A100_80GB", "AnalyticPerfModel", "DEVICES", "DeviceSpec", "Efficiency", "H100_80GB", "LLAMA3_70B",
    "LLAMA3_8B", "MODELS", "ModelShape", "adaptive_chunks", "decode_time", "default_efficiency", "get_device",
    "get_model", "pairs_in_shard", "static_chunks", "streamed_prefill_time",
]
