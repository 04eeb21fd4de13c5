"""benchmarks/xla_attention_ab.py: the earlier revision's backend loads beside this tree's, both
give the same outputs on a small case, the report is written, and bad input is refused."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import xla_attention_ab  # noqa: E402


def test_head_against_itself_agrees_and_writes_the_report(tmp_path):
    assert xla_attention_ab.main(["--before", "HEAD", "--cases", "2x40+30,3x1+100/1x1+900", "--rounds", "2",
                                  "--out", str(tmp_path), "--name", "ab"]) == 0
    report = json.loads((tmp_path / "ab.json").read_text())
    assert [r["case"] for r in report["rows"]] == ["2x40+30", "3x1+100/1x1+900"]
    for r in report["rows"]:
        assert r["max_abs_diff"] < 1e-5 and r["before_ms"] > 0 and r["after_ms"] > 0
        assert len(r["rounds_ms"]["before"]) == len(r["rounds_ms"]["after"]) == 2
    assert (tmp_path / "ab.md").is_file()


@pytest.mark.parametrize("spec", ["4x16", "0x16+0", "2x0+5", "2x16+-1", "axb+c", "2x1+5/", "2x1+5/x"])
def test_a_case_it_cannot_read_is_refused(spec):
    with pytest.raises(ValueError, match="want SxC"):
        xla_attention_ab._case(spec)


def test_groups_share_one_batch():
    assert xla_attention_ab._case("2x1+600/1x3+10") == [(1, 600), (1, 600), (3, 10)]


def test_an_unknown_revision_is_refused():
    with pytest.raises(SystemExit, match="no-such-rev"):
        xla_attention_ab.main(["--before", "no-such-rev", "--cases", "1x4+0", "--rounds", "1"])
