"""benchmarks/xla_key_splits.py: the tick programs with and without key splits give the same
logits on a chunk whose tiles do walk blocks side by side (the timing compares equal work), the
report is written, and bad input is refused."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import xla_key_splits  # noqa: E402


def test_both_programs_agree_and_the_report_is_written(tmp_path):
    # pages of 4: key blocks of 64, so a 32-query tile over 700 cached tokens walks 8 blocks a step
    assert xla_key_splits.main(["--page", "4", "--batches", "p40@700,d2", "--rounds", "1",
                                "--out", str(tmp_path), "--name", "xks"]) == 0
    report = json.loads((tmp_path / "xks.json").read_text())
    assert report["split_q"] == [1, 512] and [r["batch"] for r in report["rows"]] == ["p40@700", "d2"]
    assert report["key_splits"]["512"] == {"256": 1, "128": 4, "32": 8}
    assert report["key_splits"]["1"] == {"256": 1, "128": 1, "32": 1}
    for r in report["rows"]:
        assert max(r["max_abs_diff"].values()) < 1e-4 and min(r["median_ms"].values()) > 0
    assert "cores" in report["machine"] and (tmp_path / "xks.md").is_file()


@pytest.mark.parametrize("argv", [["--page", "24"], ["--split-q", "1,0"]])
def test_bad_settings_are_refused(argv):
    with pytest.raises(SystemExit):
        xla_key_splits.main(argv)
