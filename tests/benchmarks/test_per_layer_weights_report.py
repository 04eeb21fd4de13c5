"""benchmarks/per_layer_weights.py: its two tick programs (stacked weights, per-layer buffers)
give the same logits on every batch kind (the timing compares equal work), and the report is
written."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import per_layer_weights  # noqa: E402
import tick_batches  # noqa: E402


def test_both_forms_agree_and_the_report_is_written(tmp_path):
    assert per_layer_weights.main(["--batches", "d2,p16", "--rounds", "1", "--out", str(tmp_path),
                                   "--name", "plw"]) == 0
    report = json.loads((tmp_path / "plw.json").read_text())
    assert [r["batch"] for r in report["rows"]] == ["d2", "p16"]
    for r in report["rows"]:
        assert r["max_abs_diff"] < 1e-5 and r["stacked_ms"] > 0 and r["per_layer_ms"] > 0
        assert set(r["compile_s"]) == {"stacked", "per-layer"}
    assert "cores" in report["machine"] and (tmp_path / "plw.md").is_file()


def test_a_batch_it_does_not_know_is_refused():
    with pytest.raises(ValueError, match="want dN"):
        tick_batches.tick_batch("x4")
