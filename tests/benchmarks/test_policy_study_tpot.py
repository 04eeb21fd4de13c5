"""benchmarks/policy_study.py's TPOT table: it lists every workload where a policy keeps more
requests within the TPOT target than the default policy, and says so when none does."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
study = pytest.importorskip("policy_study")


def summary(over: float, p99: float = 0.05) -> dict:
    return {"all": {"tpot_over_target": over, "tpot_p99": p99}}


def test_rows_name_each_policy_under_the_default_and_its_own_share():
    cells = {"1% long, 0.75 QPS": {"slo": summary(0.18, 0.145), "edf": summary(0.0), "srpt-2048": summary(0.31)},
             "0% long, 0.25 QPS": {"slo": summary(0.0), "edf": summary(0.0)}}
    table = study.tpot_losses(cells)
    assert "| 1% long, 0.75 QPS | edf 0.0% | 18.0%, P99 145 ms |" in table
    assert "0% long" not in table and "srpt-2048" not in table


def test_no_row_when_the_default_keeps_the_target_best():
    assert study.tpot_losses({"x": {"slo": summary(0.0), "edf": summary(0.1)}}).startswith("None")
