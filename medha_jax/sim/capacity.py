"""Capacity search: the highest request rate at which a policy keeps deadline misses under a bound.

  (Experiment, policy, WorkloadSpec) --bisection over qps, same seed at every probe-->
  {"qps": highest passing rate, "probes": [(qps, miss rate), ...]}

A probe passes when the miss rate over all requests whose deadline is decided at the horizon is
below `max_miss` (1% by default). Bisection assumes misses grow with load, which holds for every
policy here; the probes are reported so a non-monotone case is visible. Pure Python.
"""

from __future__ import annotations

from dataclasses import replace

from medha_jax.sim.workload import WorkloadSpec, generate


def miss_rate(exp, policy: str, w: WorkloadSpec) -> float:
    run = exp.run(policy, generate(w), horizon=w.duration)
    r = run.summary["all"]["deadline_miss_rate"]
    return 1.0 if r != r else r  # no decided request at all: count as failing


def capacity(exp, policy: str, workload: WorkloadSpec, *, lo: float = 0.05, hi: float = 4.0,
             rel_tol: float = 0.05, max_miss: float = 0.01) -> dict:
    if not 0 < lo < hi:
        raise ValueError(f"need 0 < lo < hi, got lo={lo}, hi={hi}")
    probes = []

    def ok(q):
        m = miss_rate(exp, policy, replace(workload, qps=q))
        probes.append((q, m))
        return m < max_miss

    if ok(hi):
        return {"qps": hi, "probes": probes, "bounded_above": True}
    if not ok(lo):
        return {"qps": 0.0, "probes": probes, "bounded_above": False}
    while hi - lo > rel_tol * lo:
        mid = (lo * hi) ** 0.5
        if ok(mid):
            lo = mid
        else:
            hi = mid
    return {"qps": lo, "probes": probes, "bounded_above": False}
