"""benchmarks/feature_major_layers.py: its two layouts of the layer stack compute the same thing
(the timing compares equal work), and the report is written."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import feature_major_layers  # noqa: E402


def test_both_layouts_agree_and_the_report_is_written(tmp_path):
    assert feature_major_layers.main(["--tokens", "3,8", "--rounds", "1", "--out", str(tmp_path),
                                      "--name", "fm"]) == 0
    report = json.loads((tmp_path / "fm.json").read_text())
    assert [r["tokens"] for r in report["rows"]] == [3, 8]
    for r in report["rows"]:
        assert r["max_abs_diff"] < 1e-3 and r["token_major_ms"] > 0 and r["feature_major_ms"] > 0
    assert "cores" in report["machine"] and (tmp_path / "fm.md").is_file()
