"""`python -m medha_jax.profile`: measure this device's iteration times and fit the runtime predictor.

  flags (same as serve/LLM) -> engine parts (fcfs, no predictor, nothing compiled yet)
  -> composition grid -> its buckets compiled, measured samples (progress bar) -> fit; held-out MAPE by 5-fold cross-validation
  -> profile JSON in --profile-dir, keyed by model, mesh, dtype and device

The LARS/EDF/LRS schedulers of an engine with the same key load this file at start-up.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys

from medha_jax.cli_args import add_dataclass_args, dataclass_from_args
from medha_jax.config import EngineConfig
from medha_jax.runtime_profiler import composition_grid, fit_with_holdout, measure, profile_max_kv
from medha_jax.scheduler import SchedulerConfig
from medha_jax.scheduler.attention_tiling import Tiling
from medha_jax.scheduler.predictor import profile_path


def parser() -> argparse.ArgumentParser:
    """The command's flags: the engine's and the scheduler's (as serve/LLM take them), --repeats, --quick."""
    ap = argparse.ArgumentParser(prog="python -m medha_jax.profile", description=__doc__.split("\n")[0])
    add_dataclass_args(ap, EngineConfig, "engine")
    add_dataclass_args(ap, SchedulerConfig, "scheduler")
    ap.add_argument("--repeats", type=int, default=3, help="timed runs per composition (the median is kept)")
    ap.add_argument("--quick", action="store_true", help="a third of the grid (what start-up profiling uses)")
    return ap


def profiling_parts(ns: argparse.Namespace):
    """(EngineConfig, engine parts) to measure on, from `parser()`'s flags: nothing compiled (measure
    compiles each composition's bucket) and fcfs (no predictor to load or measure)."""
    from medha_jax.engine_builder import build_engine_parts

    ecfg = dataclasses.replace(dataclass_from_args(EngineConfig, ns), warmup=False)
    scfg = dataclasses.replace(dataclass_from_args(SchedulerConfig, ns), policy="fcfs")
    return ecfg, build_engine_parts(ecfg, scfg)


def main(argv: list[str] | None = None) -> int:
    ns = parser().parse_args(argv)
    ecfg, parts = profiling_parts(ns)

    from medha_jax.engine_builder import profile_key_for

    ex = parts.executor
    comps = composition_grid(ex.ladders.tokens[-1], ex.ladders.seqs[-1],
                             profile_max_kv(ex, parts.max_model_len), quick=ns.quick)
    samples = measure(ex, comps, vocab_size=parts.model_config.vocab_size, repeats=ns.repeats)
    key = profile_key_for(ecfg, parts.mesh)
    predictor, held_out = fit_with_holdout(samples, key=key, tiling=Tiling.for_executor(ex))
    predictor.fit_info["held_out_mape"] = held_out
    path = profile_path(os.path.expanduser(ecfg.profile_dir), key)
    predictor.save(path, samples)
    print(f"profile: {len(samples)} measured iterations on {key.device}")
    print("coefficients: " + ", ".join(f"{k}={v:.3e}" for k, v in predictor.coefficients.items() if v))
    print(f"held-out MAPE: {100 * held_out:.1f}%  (train {100 * predictor.fit_info['train_mape']:.1f}%)")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
