"""What the scheduler believes about the device: a RuntimePredictor fitted to the simulated device.

  fit_predictor(device, seed): iterations sampled like a profile run (decode batches, lone chunks,
  mixes; lengths log-uniform up to 1M) --timed on the simulated device--> RuntimePredictor.fit
  (the engine's own linear model, NNLS) --> the scheduler's predictor, with its held-out error

The predictor predicts an iteration's *tick*: what one batch holds the device for, the quantity the
engine's profiler times (on a pipelined deployment, the steady-state tick; the scheduler gives a
tick t_target / spp, since a token passes spp ticks). The prefill-time cache (Algorithm 3) sums
ticks into "how long does this prefill take alone": a lone prefill streams one chunk per tick.
Pure Python.
"""

from __future__ import annotations

import random

from medha_jax.scheduler.predictor import ANALYTIC_FEATURES, RuntimePredictor
from medha_jax.scheduler.records import Composition


def profile_compositions(rng: random.Random, n: int, max_kv: int, max_chunk: int = 8192,
                         max_decodes: int = 256) -> list[Composition]:
    """Iterations a profile run would time: decode-only batches, lone prefill chunks and mixes,
    lengths log-uniform so that short and million-token contexts are both covered."""

    def logu(lo, hi):
        return int(round(lo * (hi / lo) ** rng.random()))

    out = []
    for i in range(n):
        kind = i % 3
        seqs = []
        if kind != 1:  # decodes
            for _ in range(logu(1, max_decodes)):
                seqs.append((1, logu(16, max_kv)))
        if kind != 0:  # one prefill chunk
            kv = 0 if rng.random() < 0.3 else logu(32, max_kv)
            seqs.append((logu(16, max_chunk), kv))
        out.append(Composition(tuple(seqs)))
    return out


def fit_predictor(device, *, seed: int = 0, n_train: int = 600, n_test: int = 300, max_kv: int = 1 << 20,
                  max_chunk: int = 8192):
    """A RuntimePredictor of `device`'s tick fitted on sampled compositions; returns it and
    {'train_mape', 'test_mape', 'samples'} (errors as fractions, the test one on held-out
    compositions)."""
    rng = random.Random(seed)
    train = profile_compositions(rng, n_train, max_kv, max_chunk)
    test = profile_compositions(rng, n_test, max_kv, max_chunk)
    pred = RuntimePredictor.fit([(c, device.run(c.seqs)[0]) for c in train], ANALYTIC_FEATURES)
    held = [(c, device.run(c.seqs)[0]) for c in test]
    return pred, {"train_mape": pred.fit_info["train_mape"], "test_mape": pred.mape(held), "samples": n_train}
