"""Capacity search on a toy device whose capacity can be worked out by hand."""

import pytest

from medha_jax.sim.capacity import capacity
from medha_jax.sim.experiment import Experiment
from medha_jax.sim.profiles import load_profile
from medha_jax.sim.workload import WorkloadSpec


def test_capacity_is_below_the_work_bound_and_reports_the_classes():
    # 0.1 ms per token; ShareGPT4-like prompts average ~2.4K tokens (+ ~440 decode iterations of
    # 0.1 ms each): the device saturates near 1 / 0.29 s = 3.4 QPS, deadlines bite before that
    exp = Experiment(load_profile("linear:1e-4"))
    w = WorkloadSpec(duration=120, long_fraction=0.0, seed=1)
    c = capacity(exp, "edf", w, lo=0.2, hi=8.0, rel_tol=0.2)
    assert 0.5 < c["qps"] < 3.5 and not c["bounded_above"]
    assert c["at_capacity"]["all"] < 0.01
    passing = [q for q, m, *_ in c["probes"] if m < 0.01]
    failing = [q for q, m, *_ in c["probes"] if not m < 0.01]
    assert max(passing) == c["qps"] and min(failing) > c["qps"]


def test_capacity_bounds():
    exp = Experiment(load_profile("linear:1e-6"))
    c = capacity(exp, "sarathi-512", WorkloadSpec(duration=60, long_fraction=0.0), lo=0.1, hi=0.5)
    assert c["qps"] == 0.5 and c["bounded_above"]
    with pytest.raises(ValueError):
        capacity(exp, "medha", WorkloadSpec(duration=60), lo=1.0, hi=0.5)


def test_per_class_capacity_does_not_let_a_policy_pass_by_starving_the_long_class():
    # short-first preemption (pecsched) keeps the shorts' misses at zero by making long prompts wait:
    # over all requests it passes the 1% bar at loads where it misses many long deadlines, so its
    # per-class capacity (every class under 1% on its own) is lower
    exp = Experiment(load_profile("linear:1e-5"))
    w = WorkloadSpec(duration=60, long_fraction=0.05, long_min=32768, long_max=131072, seed=1)
    overall = capacity(exp, "pecsched", w, lo=0.5, hi=4.0, rel_tol=0.5)
    each = capacity(exp, "pecsched", w, lo=0.5, hi=4.0, rel_tol=0.5, per_class=True)
    assert each["qps"] < overall["qps"]
    assert all(each["at_capacity"][c] < 0.01 for c in ("all", "short", "long"))
    starved = [(q, long) for q, a, _, long in overall["probes"] if a < 0.01 and long >= 0.01]
    assert starved and all(q > each["qps"] for q, _ in starved)  # passing overall, failing per class
