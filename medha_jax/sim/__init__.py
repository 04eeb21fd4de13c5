"""Simulator: the real scheduler on a simulated clock, a device model in place of the accelerators.

  workload.py       traces (CSV) and seeded generators (ShareGPT4-like + long requests) -> RequestSpecs
  profiles.py       device profiles: modelled meshes (medha_jax.hardware), measured predictor JSON, toy
  device_models.py  batch composition -> (SPP tick, latency); elastic-SP cost for whole-prompt baselines
  predictors.py     what the scheduler believes: the exact model or a RuntimePredictor fitted to the device
  policies.py       the compared policies, each a `medha_jax.scheduler.Scheduler` (+ PecSched-style ones)
  driver.py         the discrete-event engine loop (arrivals, SPP pipeline, sampled tokens, horizon)
  experiment.py     deadlines, one policy run -> outcomes; metrics.py -> summaries; report.py -> md/PNG
  capacity.py       highest QPS with < 1% deadline misses;  cli.py: `python -m medha_jax.sim`

No JAX: everything here imports the same scheduler objects the engine uses. See docs/simulator.md.
"""

from medha_jax.sim.driver import SimResult, simulate
from medha_jax.sim.experiment import Experiment, PolicyRun
from medha_jax.sim.policies import POLICIES, get_policy
from medha_jax.sim.profiles import PRESETS, Profile, load_profile
from medha_jax.sim.workload import RequestSpec, WorkloadSpec, generate, read_trace, write_trace

__all__ = [
    "Experiment", "POLICIES", "PRESETS", "PolicyRun", "Profile", "RequestSpec", "SimResult", "WorkloadSpec",
    "generate", "get_policy", "load_profile", "read_trace", "simulate", "write_trace",
]
