"""benchmarks/decode_big_blocks.py: the tick programs at each big-block budget give the same logits
(the timing compares equal work), the report is written, and bad budgets are refused."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import decode_big_blocks  # noqa: E402


def test_every_budget_agrees_and_the_report_is_written(tmp_path):
    # 4 slots of 2 KV heads x 64 dims x 16-key pages (32 KB of keys a page): 0.25 MB fits big blocks of
    # 8 pages, two of them below 301 keys; the prefill chunk does not decode
    assert decode_big_blocks.main(["--budgets-mb", "0,0.25", "--batches", "d2@300,p16", "--rounds", "1",
                                   "--out", str(tmp_path), "--name", "dbb"]) == 0
    report = json.loads((tmp_path / "dbb.json").read_text())
    assert report["budgets_mb"] == [0.0, 0.25] and [r["batch"] for r in report["rows"]] == ["d2@300", "p16"]
    for r in report["rows"]:
        assert max(r["max_abs_diff"].values()) < 1e-4 and min(r["median_ms"].values()) > 0
        assert r["vs_first"]["0.0"] == 1.0
    assert "cores" in report["machine"] and "0.25 MB" in (tmp_path / "dbb.md").read_text()


@pytest.mark.parametrize("budgets", ["4,-1", "x", "4,4", ""])
def test_a_budget_it_cannot_use_is_refused(budgets):
    with pytest.raises(SystemExit):
        decode_big_blocks.main(["--budgets-mb", budgets])
