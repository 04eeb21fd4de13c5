"""Capacity search: the highest request rate at which a policy keeps deadline misses under a bound.

  (Experiment, policy, WorkloadSpec) --bisection over qps, same seed at every probe-->
  {"qps": highest passing rate, "at_capacity": {short, long, all miss rates there},
   "probes": [(qps, miss rate all, short, long), ...]}

A probe passes when the miss rate over every request that arrived is below `max_miss` (1% by
default); the run settles past the horizon (`simulate(settle=True)`) so that no policy passes by
leaving a request undecided there. A policy that sacrifices a rare class (starving long requests
that are 1% of the traffic) can pass that bar, so the per-class miss rates at the capacity point
are returned too, and `per_class=True` asks more: every class (short, long; a class with nothing
decided is not counted) below `max_miss` on its own. Bisection assumes misses grow with load,
which holds for every policy here; the probes are reported so a non-monotone case is visible.
Pure Python.
"""

from __future__ import annotations

from dataclasses import replace

from medha_jax.sim.workload import WorkloadSpec, generate


def miss_rates(exp, policy: str, w: WorkloadSpec) -> dict:
    """Deadline-miss rate per class ("all", "short", "long"); NaN where nothing is decided."""
    s = exp.run(policy, generate(w), horizon=w.duration, settle=True).summary
    return {c: s[c]["deadline_miss_rate"] for c in ("all", "short", "long")}


def capacity(exp, policy: str, workload: WorkloadSpec, *, lo: float = 0.05, hi: float = 4.0,
             rel_tol: float = 0.05, max_miss: float = 0.01, per_class: bool = False) -> dict:
    if not 0 < lo < hi:
        raise ValueError(f"need 0 < lo < hi, got lo={lo}, hi={hi}")
    probes, at = [], {}

    def ok(q):
        m = miss_rates(exp, policy, replace(workload, qps=q))
        probes.append((q, m["all"], m["short"], m["long"]))
        at[q] = m
        if not (m["all"] == m["all"] and m["all"] < max_miss):  # NaN (nothing decided) fails
            return False
        return not per_class or all(not m[c] >= max_miss for c in ("short", "long"))  # NaN: nothing decided

    if ok(hi):
        return {"qps": hi, "at_capacity": at[hi], "probes": probes, "bounded_above": True}
    if not ok(lo):
        return {"qps": 0.0, "at_capacity": None, "probes": probes, "bounded_above": False}
    while hi - lo > rel_tol * lo:
        mid = (lo * hi) ** 0.5
        if ok(mid):
            lo = mid
        else:
            hi = mid
    return {"qps": lo, "at_capacity": at[lo], "probes": probes, "bounded_above": False}
