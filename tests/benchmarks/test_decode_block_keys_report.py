"""benchmarks/decode_block_keys.py: the tick programs at each decode key-block width give the
same logits (the timing compares equal work), the report is written, and bad input is refused."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import decode_block_keys  # noqa: E402
from tick_batches import tick_batch  # noqa: E402


def test_every_width_agrees_and_the_report_is_written(tmp_path):
    assert decode_block_keys.main(["--block-keys", "64,16", "--batches", "d2@100,p16", "--rounds", "1",
                                   "--out", str(tmp_path), "--name", "dbk"]) == 0
    report = json.loads((tmp_path / "dbk.json").read_text())
    assert report["block_keys"] == [64, 16] and [r["batch"] for r in report["rows"]] == ["d2@100", "p16"]
    for r in report["rows"]:
        assert max(r["max_abs_diff"].values()) < 1e-4 and min(r["median_ms"].values()) > 0
        assert r["vs_first"]["64"] == 1.0
    assert "cores" in report["machine"] and (tmp_path / "dbk.md").is_file()


def test_a_width_off_the_page_grid_is_refused():
    with pytest.raises(SystemExit):
        decode_block_keys.main(["--block-keys", "64,24"])


@pytest.mark.parametrize("spec", ["x4", "d0", "d4@x", "p16@x", "p0@32", "d"])
def test_a_batch_it_does_not_know_is_refused(spec):
    with pytest.raises(ValueError, match="want dN"):
        tick_batch(spec)


def test_a_batch_is_padded_to_the_engines_buckets():
    inp, feed, prev, pages = tick_batch("d3@40")
    assert pages == 3 * 3 and prev.shape == (4,)  # 41 positions: 3 pages of 16 each
    assert inp.token_ids.shape[-1] == 16 and feed.shape == (1, 16)  # the smallest token bucket
    assert inp.page_table.shape[-2:] == (4, 8) and inp.kv_lens.reshape(-1).tolist() == [41, 41, 41, 0]
    inp, *_ = tick_batch("p300")
    assert inp.token_ids.shape[-1] == 512 and inp.page_table.shape[-2:] == (4, 32)
    inp, _, _, pages = tick_batch("p100@1000", page=64)  # a chunk after 1000 cached tokens
    assert pages == 18 and inp.page_table.shape[-2:] == (4, 32) and inp.kv_lens.reshape(-1).tolist()[0] == 1100
    assert inp.q_offsets.reshape(-1).tolist()[0] == 1000
