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
