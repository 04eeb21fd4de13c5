"""Simulated devices: how long a scheduled batch takes, as (tick, latency).

  batch composition [(q_tokens, kv_len), ...] [+ each sequence's first kvp group, when the
  groups run their own batches: AnalyticDevice only] --device.run--> (tick, latency)
      tick:    seconds until the device accepts the next batch (one SPP stage)
      latency: seconds until the batch's sampled tokens come out (all `depth` stages)

  AnalyticDevice   the roofline model of medha_jax.hardware on a (tp, spp, kvp) mesh; depth = spp
  PredictorDevice  a fitted RuntimePredictor (a measured profile) as the device; depth 1
  ElasticSPDevice  LoongServe-like whole-prompt prefills over elastic sequence parallelism:
                   A_sp + B_sp * sum(l) + C_sp * sum(l^2), plus the decodes' time on `decode_device`
  LinearDevice     seconds = fixed + per_token * tokens: toy device for worked examples

Each device also gives `prefill_alone(n, t_budget)`: the seconds an n-token prompt takes alone,
chunked adaptively with each tick within t_budget (the reference work w of a request; deadlines
derive from it). Pure Python.
"""

from __future__ import annotations

import bisect
import hashlib
import json

from medha_jax.hardware.perf_model import AnalyticPerfModel
from medha_jax.hardware.prefill import adaptive_chunks
from medha_jax.scheduler.records import Composition


class _PrefillTable:
    """Prefill-alone seconds of every length, from one adaptive-chunk simulation (like Algorithm 3):
    ticks accumulated to each chunk boundary, plus the pipeline fill of the last chunk."""

    def __init__(self, chunks: list[tuple[int, int]], tick, latency):
        self.starts = [kv for _, kv in chunks] + [chunks[-1][1] + chunks[-1][0]]
        self.cum = [0.0]
        for q, kv in chunks:
            self.cum.append(self.cum[-1] + tick(q, kv))
        self.tick, self.latency = tick, latency

    def __call__(self, n: int) -> float:
        if n <= 0:
            return 0.0
        i = bisect.bisect_right(self.starts, n) - 1
        b = self.starts[i]
        if b == n:
            q, kv = self.starts[i] - self.starts[i - 1], self.starts[i - 1]
            return self.cum[i] - self.tick(q, kv) + self.latency(q, kv)
        return self.cum[i] + self.latency(n - b, b)


class _TickTimes:
    """adaptive_chunks sizes a chunk by what it is given as `iteration_time`: here the SPP tick,
    which the scheduler's budget bounds (t_target / spp)."""

    def __init__(self, perf: AnalyticPerfModel):
        self.iteration_time = perf.stage_time


class AnalyticDevice:
    def __init__(self, perf: AnalyticPerfModel):
        self.perf = perf
        self.depth = perf.spp
        self._tables: dict[float, _PrefillTable] = {}

    def run(self, seqs, groups=None) -> tuple[float, float]:
        """`groups`: each sequence's first kvp group (None: all on group 0)."""
        return self.perf.tick_and_latency(seqs, groups)

    def latency(self, seqs) -> float:
        return self.perf.iteration_time(seqs)

    def prefill_alone(self, n: int, t_target: float) -> float:
        table = self._tables.get(t_target)
        if table is None or n > table.starts[-1]:
            top = max(n, 2 * (table.starts[-1] if table else 1 << 16))
            chunks = adaptive_chunks(_TickTimes(self.perf), top, t_target)
            table = self._tables[t_target] = _PrefillTable(
                chunks, lambda q, kv: self.perf.stage_time(((q, kv),)), lambda q, kv: self.perf.iteration_time(((q, kv),)))
        return table(n)

    def describe(self) -> dict:
        return self.perf.describe()


class PredictorDevice:
    """A runtime predictor (e.g. loaded from a measured JSON profile) playing the device."""

    depth = 1

    def __init__(self, predictor, name: str = "measured"):
        self.predictor = predictor
        self.name = name
        self._tables: dict[float, _PrefillTable] = {}

    def run(self, seqs) -> tuple[float, float]:
        t = self.predictor.predict_raw(Composition(tuple(seqs)))
        return t, t

    def latency(self, seqs) -> float:
        return self.run(seqs)[1]

    def prefill_alone(self, n: int, t_target: float) -> float:
        return _serial_prefill_alone(self, self._tables, n, t_target)

    def describe(self) -> dict:
        key = getattr(self.predictor, "key", None)
        return {"kind": "predictor", "name": self.name, "key": None if key is None else str(key),
                "coefficients": getattr(self.predictor, "coefficients", None)}


class LinearDevice:
    """seconds(batch) = fixed + per_token * tokens: the worked examples' device (Medha 4.1)."""

    depth = 1

    def __init__(self, per_token: float, fixed: float = 0.0):
        if not per_token > 0 or fixed < 0:
            raise ValueError(f"LinearDevice needs per_token > 0 and fixed >= 0, got {per_token}, {fixed}")
        self.per_token, self.fixed = per_token, fixed

    def run(self, seqs) -> tuple[float, float]:
        t = self.fixed + self.per_token * sum(q for q, _ in seqs)
        return t, t

    def latency(self, seqs) -> float:
        return self.run(seqs)[1]

    def prefill_alone(self, n: int, t_target: float) -> float:
        return self.per_token * n + self.fixed * max(1, round(self.per_token * n / max(t_target - self.fixed, 1e-12)))

    def describe(self) -> dict:
        return {"kind": "linear", "per_token": self.per_token, "fixed": self.fixed}


class ElasticSPDevice:
    """LoongServe-like: each batch's whole-prompt prefills run over all `sp` instances with elastic
    sequence parallelism, costing A_sp + B_sp * sum(l) + C_sp * sum(l^2) (ring communication hidden,
    perfect scaling: no fragmentation, so this baseline is optimistic); decodes in the same batch
    then take `decode_device`'s time. Whole prompts only: a chunk (q, kv > 0) is charged as if its
    l = q attended to kv earlier tokens (C_sp * (q^2 + 2 q kv))."""

    depth = 1

    def __init__(self, a_sp: float, b_sp: float, c_sp: float, decode_device, name: str = "elastic-sp"):
        if min(a_sp, b_sp, c_sp) < 0:
            raise ValueError(f"elastic SP coefficients must be >= 0, got {a_sp}, {b_sp}, {c_sp}")
        self.a, self.b, self.c = a_sp, b_sp, c_sp
        self.decode_device = decode_device
        self.name = name

    @classmethod
    def from_analytic(cls, instance: AnalyticPerfModel, sp: int, decode_device, *, lengths=None) -> "ElasticSPDevice":
        """Fit A, B, C (least squares, relative error) to one instance's whole-prompt prefill times,
        then spread the per-token and quadratic work over `sp` instances."""
        import numpy as np

        ls = np.array(lengths or [2 ** k for k in range(9, 21)] + [1_000_000], dtype=float)
        t = np.array([instance.iteration_time([(int(l), 0)]) for l in ls])
        X = np.stack([np.ones_like(ls), ls, ls * ls], axis=1) / t[:, None]
        coef, *_ = np.linalg.lstsq(X, np.ones_like(t), rcond=None)
        a, b, c = (max(float(v), 0.0) for v in coef)
        return cls(a, b / sp, c / sp, decode_device, name=f"elastic-sp{sp}x[{instance.name}]")

    def prefill_cost(self, seqs) -> float:
        pf = [(q, kv) for q, kv in seqs if q > 1 or kv == 0]
        if not pf:
            return 0.0
        return self.a + self.b * sum(q for q, _ in pf) + self.c * sum(q * q + 2 * q * kv for q, kv in pf)

    def run(self, seqs) -> tuple[float, float]:
        seqs = tuple(seqs)
        dec = [s for s in seqs if s[0] == 1 and s[1] > 0]
        t = self.prefill_cost(seqs) + (self.decode_device.latency(dec) if dec else 0.0)
        return t, t

    def latency(self, seqs) -> float:
        return self.run(seqs)[1]

    def prefill_alone(self, n: int, t_target: float) -> float:
        return self.prefill_cost([(n, 0)])

    def describe(self) -> dict:
        return {"kind": "elastic_sp", "name": self.name, "A_sp": self.a, "B_sp": self.b, "C_sp": self.c,
                "decode_device": self.decode_device.describe()}


def _serial_prefill_alone(device, tables: dict, n: int, t_target: float) -> float:
    """Adaptive chunks by the device's own latency, summed (depth-1 devices)."""

    class _Perf:  # adapter: adaptive_chunks asks iteration_time
        @staticmethod
        def iteration_time(seqs):
            return device.latency(seqs)

    table = tables.get(t_target)
    if table is None or n > table.starts[-1]:
        top = max(n, 2 * (table.starts[-1] if table else 1 << 16))
        lat = lambda q, kv: device.latency(((q, kv),))  # noqa: E731
        table = tables[t_target] = _PrefillTable(adaptive_chunks(_Perf, top, t_target), lat, lat)
    return table(n)


def fingerprint(obj: dict) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]
