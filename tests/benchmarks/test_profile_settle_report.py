"""benchmarks/profile_settle.py on the convoy's --smoke engine: both modes measured, every timing
kept, the report written; too few repeats for two halves are refused."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import profile_settle  # noqa: E402

from medha_jax import runtime_profiler  # noqa: E402


def test_both_modes_are_measured_and_the_report_is_written(tmp_path):
    assert profile_settle.main(["--smoke", "--repeats", "4", "--probe-reps", "1", "--out", str(tmp_path),
                                "--name", "ps"]) == 0
    report = json.loads((tmp_path / "ps.json").read_text())
    assert [p["mode"] for p in report["passes"]] == ["off", "on"]
    for p in report["passes"]:
        assert len(p["samples"]) == report["compositions"] and all(len(ts) == 4 for _, ts in p["samples"])
        assert all(0.0 <= e < 1.0 for e in p["median_first3"]["held_out"])
    assert runtime_profiler.SETTLE_BELOW == report["settle_below"] > 0.0  # restored after the off pass
    assert set(report["probe"]) == {"back to back", "after the 2K chunk", "after the chunk and one of its own",
                                    "after 300 ms idle"}
    assert "cores" in report["machine"] and "| 0 | off |" in (tmp_path / "ps.md").read_text()


def test_too_few_repeats_are_refused():
    with pytest.raises(SystemExit):
        profile_settle.main(["--repeats", "3"])
