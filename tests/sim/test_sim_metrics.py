"""Outcomes and summaries on hand-checkable runs (linear device, 10 ms per token)."""

import math

import pytest

from medha_jax.sim.experiment import Experiment
from medha_jax.sim.metrics import offered_load, summarize
from medha_jax.sim.profiles import load_profile
from medha_jax.sim.report import markdown_table, plot_ttft_cdfs, plot_ttft_over_time, to_json
from medha_jax.sim.workload import RequestSpec


@pytest.fixture(scope="module")
def exp():
    return Experiment(load_profile("linear:0.01"), t_target=10.0)


def test_outcomes_by_hand(exp):
    # fcfs, 512-token budget: r0 (100 tokens) runs alone: TTFT 1.0, then 3 decodes of 10 ms
    specs = [RequestSpec(0.0, 100, 4, 2.0), RequestSpec(10.0, 40_000, 2, 5.0)]
    run = exp.run("sarathi-512", specs, horizon=100.0)
    a, b = run.outcomes
    assert a.ttft == pytest.approx(1.0) and a.tpot == pytest.approx(0.01) and not a.missed and a.finished
    assert not a.is_long and b.is_long
    assert b.ttft is None and b.missed  # 400 s of work, horizon at 100 s, deadline passed
    s = run.summary
    assert s["short"]["ttft_p50"] == pytest.approx(1.0)
    assert s["long"]["first_token"] == 0 and s["long"]["no_first_token"] == 1
    assert s["all"]["deadline_miss_rate"] == 0.5 and s["all"]["completed"] == 1
    assert s["all"]["throughput_rps"] == pytest.approx(1 / 100.0)
    assert math.isnan(s["long"]["ttft_p50"])


def test_undecided_deadlines_at_the_horizon(exp):
    run = exp.run("sarathi-512", [RequestSpec(0.0, 1000, 1, 50.0)], horizon=5.0)
    (o,) = run.outcomes
    assert o.ttft is None and o.missed is None  # deadline 50 s not yet passed at t=5
    assert math.isnan(run.summary["all"]["deadline_miss_rate"])


def test_derived_deadlines_use_the_work_alone(exp):
    (s,) = exp.assign_deadlines([RequestSpec(0.0, 100, 1)])
    assert s.ttft_deadline == pytest.approx(max(1.5 * 1.0, 0.5))
    load = offered_load([RequestSpec(0.0, 100, 1), RequestSpec(0.0, 40_000, 1)], exp.work, 100.0)
    assert load["short"] == pytest.approx(0.01) and load["long"] == pytest.approx(4.0)


def test_report_outputs(exp, tmp_path):
    specs = [RequestSpec(0.0, 100, 4), RequestSpec(0.5, 40_000, 2), RequestSpec(1.0, 50, 3)]
    runs = {p: exp.run(p, specs) for p in ("sarathi-512", "medha")}
    table = markdown_table({p: r.summary for p, r in runs.items()})
    assert table.count("\n") == 3 and "| medha |" in table
    plot_ttft_cdfs(runs, str(tmp_path / "cdf.png"))
    plot_ttft_over_time(runs, str(tmp_path / "over_time.png"))
    to_json(str(tmp_path / "s.json"), {"x": float("nan"), "y": [1.0, float("inf")]})
    assert (tmp_path / "cdf.png").stat().st_size > 1000
    assert (tmp_path / "s.json").read_text().count("null") == 2
