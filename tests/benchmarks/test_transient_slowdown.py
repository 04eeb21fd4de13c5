"""benchmarks/transient_slowdown.py: its slowed device stretches exactly the burst iterations, and
a short run writes one row per (QPS, policy) with the plain device missing nothing."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
slowdown = pytest.importorskip("transient_slowdown")


class FixedDevice:
    depth = 1

    def run(self, seqs):
        return 0.01, 0.0


def test_slowed_device_stretches_the_burst_iterations_only():
    dev = slowdown.Slowed(FixedDevice(), every=5, burst=2, factor=3.0)
    times = [dev.run([(1, 10)])[0] for _ in range(10)]
    assert times == pytest.approx([0.03, 0.03, 0.01, 0.01, 0.01, 0.03, 0.03, 0.01, 0.01, 0.01])
    assert dev.depth == 1
    shifted = slowdown.Slowed(FixedDevice(), every=5, burst=2, factor=3.0, phase=3)
    assert [shifted.run([(1, 10)])[0] for _ in range(5)] == pytest.approx([0.01, 0.01, 0.03, 0.03, 0.01])


def test_time_based_spells_stretch_what_starts_inside_them_whatever_the_iterations():
    """Every 0.1 s of device time, iterations starting in the first 0.03 s run 2x (the clock
    counts the slowed time): two 10 ms iterations (20 ms each) or three 5 ms ones (10 ms each)."""
    dev = slowdown.SlowedFor(FixedDevice(), every=0.1, burst=0.03, factor=2.0, phase=0.005)
    times = [dev.run([(1, 10)])[0] for _ in range(12)]
    assert times == pytest.approx([0.02, 0.02] + [0.01] * 6 + [0.02, 0.02, 0.01, 0.01])

    class Half(FixedDevice):
        def run(self, seqs):
            return 0.005, 0.0

    half = slowdown.SlowedFor(Half(), every=0.1, burst=0.03, factor=2.0, phase=0.005)
    assert [half.run([(1, 10)])[0] for _ in range(4)] == pytest.approx([0.01, 0.01, 0.01, 0.005])


def test_short_run_writes_a_row_per_policy(tmp_path):
    out = tmp_path / "t.md"
    assert slowdown.main(["--qps", "1.0", "--duration", "60", "--every", "50", "--burst", "10", "--phases", "0,25",
                          "--out", str(out)]) == 0
    rows = [line for line in out.read_text().splitlines() if line.startswith("| 1 |")]
    assert [r.split("|")[2].strip() for r in rows] == ["slo", "edf"]
    assert all(r.split("|")[3].strip().startswith("0 /") for r in rows)  # the plain device: no misses
