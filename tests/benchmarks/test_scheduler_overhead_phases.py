"""benchmarks/scheduler_overhead.py --phases: the per-call phase times cover the call they time and
sort into the median and slowest groups."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
overhead = pytest.importorskip("scheduler_overhead")


@pytest.mark.parametrize("policy", ["slo", "fcfs"])
def test_phases_add_up_to_no_more_than_the_call(policy):
    res = overhead.run(policy, iterations=60, n_waiting=40, n_running=16, seed=0, gc_mode="engine", warmup=5,
                       phases=True)
    for group in ("median_40", "slowest_1pct"):
        row = res["phases_ms"][group]
        assert set(row) == {"decodes", "packing", "candidates", "total"}
        assert 0.0 < row["decodes"] and row["candidates"] <= row["packing"]  # the order is built inside the packing
        assert row["decodes"] + row["packing"] <= row["total"] * 1.01 + 1e-3  # parts of the timed call
    assert res["phases_ms"]["slowest_1pct"]["total"] >= res["phases_ms"]["median_40"]["total"]
    assert overhead.run(policy, iterations=10, n_waiting=10, n_running=4, seed=0)["phases_ms"] is None
