"""What the scheduler believes about the device: a RuntimePredictor fitted to the simulated device.

  fit_predictor(device, seed): iterations sampled like a profile run (decode batches, lone chunks,
  mixes; lengths log-uniform up to 1M) --timed on the simulated device--> RuntimePredictor.fit
  (the engine's own linear model, NNLS) --> the scheduler's predictor, with its held-out error

The predictor returns an iteration's *latency* (what the time budget t_target bounds: with SPP a
decode's next token needs the whole pipeline). When the device pipelines (spp > 1) it is a
`PipelinedPredictor`: the same latency model, plus a second fit to the SPP *tick* that its
`chunk_time` returns. The prefill-time cache (Algorithm 3) sums `chunk_time` into "how long does
this prefill take alone", and a lone prefill streams one chunk per tick: summing latencies would
overstate every remaining-prefill estimate about spp-fold and make every long request look late
from its arrival (LARS would then hold every short request to that lateness). The cache still
picks each chunk as the largest whose (tick) time fits t_target, slightly larger chunks than the
packer (which bounds latency) will run. Pure Python.
"""

from __future__ import annotations

import random

from medha_jax.scheduler.predictor import ANALYTIC_FEATURES, RuntimePredictor
from medha_jax.scheduler.records import Composition
from medha_jax.sim.device_models import fingerprint


class PipelinedPredictor(RuntimePredictor):
    """A RuntimePredictor of iteration latency (everything the scheduler asks, batch costs included)
    whose `chunk_time` answers from a second model of the SPP tick."""

    def __init__(self, latency: RuntimePredictor, tick: RuntimePredictor):
        super().__init__(latency.coefficients, key=latency.key, ema_alpha=latency.ema_alpha,
                         fit_info=latency.fit_info)
        self.tick = tick

    def chunk_time(self, q: int, kv: int) -> float:
        return self.tick.chunk_time(q, kv)

    def fingerprint(self) -> str:
        return fingerprint({"latency": super().fingerprint(), "tick": self.tick.fingerprint()})


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
    """A RuntimePredictor fitted to `device` on sampled compositions (a PipelinedPredictor of two
    when the device pipelines); returns it and {'train_mape', 'test_mape', 'samples'} (errors as
    fractions, of the latency model, on held-out compositions)."""
    rng = random.Random(seed)
    train = profile_compositions(rng, n_train, max_kv, max_chunk)
    test = profile_compositions(rng, n_test, max_kv, max_chunk)
    timed = [(c, device.run(c.seqs)) for c in train]
    pred = RuntimePredictor.fit([(c, lat) for c, (_, lat) in timed], ANALYTIC_FEATURES)
    held = [(c, device.run(c.seqs)[1]) for c in test]
    info = {"train_mape": pred.fit_info["train_mape"], "test_mape": pred.mape(held), "samples": n_train}
    if getattr(device, "depth", 1) > 1:
        tick = RuntimePredictor.fit([(c, t) for c, (t, _) in timed], ANALYTIC_FEATURES)
        info["tick_train_mape"] = tick.fit_info["train_mape"]
        pred = PipelinedPredictor(pred, tick)
    return pred, info
