"""What the scheduler believes about the device: its runtime predictor in the simulator.

  exact:  AnalyticPredictor(perf) - the analytic model itself behind the scheduler's predictor
          interface (predict / predict_raw / batch_cost / chunk_time / fingerprint / observe)
  fitted: fit_predictor(device, seed) - a RuntimePredictor (the engine's own linear model) fitted
          by least squares to iterations timed on the simulated device, exactly as the profile
          command fits one to a real device; its held-out error is reported

Either way the predictor returns an iteration's *latency* (what the time budget t_target bounds:
with SPP a decode's next token needs the whole pipeline). Its `chunk_time`, which the prefill-time
cache (Algorithm 3) sums into "how long does this prefill take alone", returns the SPP *tick*
instead when the device pipelines (spp > 1): a lone prefill streams one chunk per tick, so summing
latencies would overstate every remaining-prefill estimate about spp-fold and make every long
request look late from its arrival (LARS would then hold every short request to that lateness).
The cache still picks each chunk as the largest whose (tick) time fits t_target, slightly larger
chunks than the packer (which bounds latency) will run. Pure Python.
"""

from __future__ import annotations

import random

from medha_jax.hardware.perf_model import AnalyticPerfModel
from medha_jax.scheduler.predictor import RuntimePredictor
from medha_jax.scheduler.records import Composition
from medha_jax.sim.devices import fingerprint


class AnalyticPredictor:
    """The analytic model as a runtime predictor (a perfect one: the device is the same model)."""

    def __init__(self, perf: AnalyticPerfModel):
        self.perf = perf
        self.correction = 1.0
        self.key = perf.name
        self.coefficients = None
        self._fp = fingerprint(perf.describe())

    def predict_raw(self, comp) -> float:
        return self.perf.iteration_time(getattr(comp, "seqs", comp))

    predict = predict_raw

    def observe(self, comp, measured: float) -> None:
        """Nothing to learn: the predictor is the device."""

    def chunk_time(self, q: int, kv: int) -> float:
        """Seconds a lone chunk occupies the device: its latency, or its tick under SPP."""
        return self.perf.tick_and_latency(((q, kv),))[0]

    def fingerprint(self) -> str:
        return self._fp

    def batch_cost(self):
        return _SumsCost(self.perf) if self.perf.kvp == 1 else _ListCost(self.perf)


class _SumsCost:
    """Running sums of a batch (kvp == 1): O(1) per added sequence and per what-if."""

    __slots__ = ("perf", "T", "n", "pp", "pk", "dk")

    def __init__(self, perf):
        self.perf = perf
        self.T = self.n = self.pp = self.pk = self.dk = 0

    def add(self, q: int, kv: int) -> None:
        self.T += q
        self.n += 1
        if q == 1:
            self.dk += kv + 1
        else:
            self.pp += q * kv + q * (q + 1) // 2
            self.pk += kv + q

    def add_decodes(self, n: int, kv_sum: int) -> None:
        self.T += n
        self.n += n
        self.dk += kv_sum + n

    def time(self) -> float:
        return self.perf.time_from_sums(self.T, self.n, self.pp, self.pk, self.dk)

    def time_with(self, q: int, kv: int) -> float:
        if q == 1:
            return self.perf.time_from_sums(self.T + 1, self.n + 1, self.pp, self.pk, self.dk + kv + 1)
        return self.perf.time_from_sums(self.T + q, self.n + 1, self.pp + q * kv + q * (q + 1) // 2,
                                        self.pk + kv + q, self.dk)


class _ListCost:
    """kvp > 1: the split over groups needs each sequence. The packer hands decodes over as
    (count, kv sum) only, so they are modelled as `count` decodes of the mean length."""

    __slots__ = ("perf", "seqs")

    def __init__(self, perf):
        self.perf = perf
        self.seqs: list[tuple[int, int]] = []

    def add(self, q: int, kv: int) -> None:
        self.seqs.append((q, kv))

    def add_decodes(self, n: int, kv_sum: int) -> None:
        if n:
            base, extra = divmod(kv_sum, n)
            self.seqs.extend((1, base + (1 if i < extra else 0)) for i in range(n))

    def time(self) -> float:
        return self.perf.iteration_time(self.seqs)

    def time_with(self, q: int, kv: int) -> float:
        return self.perf.iteration_time(self.seqs + [(q, kv)])


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


class PipelinedPredictor:
    """Two fitted RuntimePredictors behind one interface: iteration latency for the packer and
    the scheduler's records, SPP tick for the prefill-time cache's `chunk_time`."""

    def __init__(self, latency: RuntimePredictor, tick: RuntimePredictor):
        self.latency, self.tick = latency, tick
        self.key, self.fit_info = latency.key, latency.fit_info

    @property
    def coefficients(self):
        return {"latency": self.latency.coefficients, "tick": self.tick.coefficients}

    @property
    def correction(self):
        return self.latency.correction

    def predict_raw(self, comp) -> float:
        return self.latency.predict_raw(comp)

    def predict(self, comp) -> float:
        return self.latency.predict(comp)

    def observe(self, comp, measured: float) -> None:
        self.latency.observe(comp, measured)

    def batch_cost(self):
        return self.latency.batch_cost()

    def chunk_time(self, q: int, kv: int) -> float:
        return self.tick.chunk_time(q, kv)

    def fingerprint(self) -> str:
        return fingerprint({"latency": self.latency.fingerprint(), "tick": self.tick.fingerprint()})

    def mape(self, samples, **kw) -> float:
        return self.latency.mape(samples, **kw)


def fit_predictor(device, *, seed: int = 0, n_train: int = 600, n_test: int = 300, max_kv: int = 1 << 20,
                  max_chunk: int = 8192):
    """A RuntimePredictor fitted to `device` on sampled compositions (a PipelinedPredictor of two
    when the device pipelines); returns it and {'train_mape', 'test_mape', 'samples'} (errors as
    fractions, of the latency model, on held-out compositions)."""
    rng = random.Random(seed)
    train = profile_compositions(rng, n_train, max_kv, max_chunk)
    test = profile_compositions(rng, n_test, max_kv, max_chunk)
    timed = [(c, device.run(c.seqs)) for c in train]
    pred = RuntimePredictor.fit([(c, lat) for c, (_, lat) in timed])
    held = [(c, device.run(c.seqs)[1]) for c in test]
    info = {"train_mape": pred.fit_info["train_mape"], "test_mape": pred.mape(held), "samples": n_train}
    if getattr(device, "depth", 1) > 1:
        tick = RuntimePredictor.fit([(c, t) for c, (t, _) in timed])
        info["tick_train_mape"] = tick.fit_info["train_mape"]
        pred = PipelinedPredictor(pred, tick)
    return pred, info
