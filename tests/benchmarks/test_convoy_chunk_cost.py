"""benchmarks/convoy_chunk_cost.py's arithmetic: the budgeted chunk plan it times, the tick table's
interpolation, and how a served iteration trace is read against it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
cost = pytest.importorskip("convoy_chunk_cost")

from medha_jax.scheduler.predictor import RuntimePredictor  # noqa: E402


def test_the_plan_covers_the_prompt_in_chunks_that_fit_the_budget(tmp_path):
    # a device whose chunk costs 1 ms + 20 us a token + 5 ns a (token, cached key) pair
    pred = RuntimePredictor({"const": 1e-3, "tokens": 2e-5, "chunk_kv": 5e-9})
    path = tmp_path / "profile.json"
    pred.save(str(path))
    report = {"choice": {"long_len": 20000, "t_target": 0.05, "deadline_min": 0.5},
              "settings": {"max_num_seqs": 16, "time_budget_token_cap": None}, "profile": {"path": str(path)}}
    plan = cost.chunk_plan(report)
    assert sum(q for q, _ in plan) == 20000
    assert [kv for _, kv in plan] == [sum(q for q, _ in plan[:i]) for i in range(len(plan))]
    assert all(pred.chunk_time(q, kv) <= 0.05 for q, kv in plan)
    assert plan[0][0] > plan[-1][0]  # chunks shrink as the cached context grows


def test_sample_points_take_each_size_at_its_ends_and_middle():
    plan = [(512, 0), (256, 512), (256, 768), (256, 1024), (256, 1280), (128, 1536)]
    assert cost.sample_points(plan) == [(128, 1536), (256, 512), (256, 1024), (256, 1280), (512, 0)]


def test_tick_table_interpolates_within_a_chunk_size_only():
    table = cost.TickTable({(128, 1000): 10.0, (128, 3000): 30.0, (256, 2000): 50.0})
    assert table.ms(128, 2000) == pytest.approx(20.0)
    assert table.ms(128, 500) == 10.0 and table.ms(128, 9000) == 30.0  # constant past the ends
    assert table.ms(256, 100) == 50.0
    assert table.ms(64, 2000) is None


def _line(end, measured, prefills, decodes=0):
    return json.dumps({"end": end, "measured": measured, "predicted": measured, "decodes": decodes,
                       "decode_kv": 0, "prefills": prefills})


def test_served_reads_the_long_prefill_window_against_the_ticks(tmp_path):
    trace = tmp_path / "trace.jsonl"
    trace.write_text("\n".join([
        _line(0.5, 0.1, [["short-1", 0, 300]]),                                    # before the long prompt
        _line(1.0, 0.2, [["long-0", 0, 128]], decodes=4),                           # 2x its tick: decodes only
        _line(1.3, 0.3, [["long-0", 128, 128], ["short-2", 0, 200]], decodes=2),    # 3x: with a prefill
        _line(1.4, 0.1, [], decodes=6),                                             # inside the window, no chunk
        _line(1.6, 0.2, [["long-0", 256, 64]]),                                     # a size the table lacks
    ]) + "\n")
    table = cost.TickTable({(128, 0): 100.0, (128, 256): 100.0})
    r = cost.served("run", str(trace), table, (320, 1000.0))
    assert r["long_iterations"] == 3 and r["covered"] == 2
    assert r["window_s"] == pytest.approx(1.6 - (1.0 - 0.2))
    assert r["measured_in_window_s"] == pytest.approx(0.8) and r["without_long_chunk_s"] == pytest.approx(0.1)
    assert r["ratio"]["decodes only"]["p50"] == pytest.approx(2.0)
    assert r["ratio"]["with other prefills"]["p50"] == pytest.approx(3.0)
    assert r["covered_measured_s"] == pytest.approx(0.5) and r["covered_ticks_alone_s"] == pytest.approx(0.2)
    assert r["mean_decodes_beside"] == pytest.approx(2.0)


def test_a_whole_prompt_iteration_reads_the_machines_speed(tmp_path):
    trace = tmp_path / "trace.jsonl"
    trace.write_text(_line(14.0, 13.0, [["long-0", 0, 320]]) + "\n")
    r = cost.served("nonchunked", str(trace), cost.TickTable({}), (320, 12500.0))
    assert r["whole_served_over_tick"] == pytest.approx(13.0 / 12.5)
