"""benchmarks/convoy.py's pass/fail lines: the long request's slowdown against the baseline of the
same round (median over rounds) when both ran in rounds, the pooled medians otherwise."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
convoy = pytest.importorskip("convoy")


def _summary(long_s, p99=0.5, misses=0):
    return {"short": {"ttft_p99_s": p99, "deadline_misses": misses}, "long_completion_s": long_s}


def test_long_ratio_is_the_median_of_each_rounds_own_ratio():
    # the VM slowed down after the first round: against the first baseline alone slo looks 1.4x
    summaries = {"fcfs_nonchunked": _summary(25.0, p99=20.0), "slo": _summary(35.0), "edf": _summary(38.0, misses=3)}
    rounds = {"fcfs_nonchunked": [25.0, 32.0, 31.0], "slo": [29.0, 35.0, 36.0], "edf": [33.0, 38.0, 40.0]}
    c = convoy.criteria(summaries, rounds)
    assert c["long_completion_round_ratios"] == pytest.approx([29 / 25, 35 / 32, 36 / 31])
    assert c["long_completion_ratio"] == pytest.approx(29 / 25) and c["long_completion_within_1_3x"]
    assert c["no_worse_than_edf"] and c["short_p99_ttft_at_least_10x_lower"]
    assert "median 1.16x" in "\n".join(convoy.criteria_lines(c))


def test_without_rounds_on_both_sides_the_pooled_completions_are_compared():
    summaries = {"fcfs_nonchunked": _summary(25.0, p99=20.0), "slo": _summary(35.0)}
    for rounds in (None, {"slo": [29.0, 35.0, 36.0]}, {"fcfs_nonchunked": [25.0], "slo": [29.0, 35.0]}):
        c = convoy.criteria(summaries, rounds)
        assert c["long_completion_ratio"] == pytest.approx(1.4) and not c["long_completion_within_1_3x"]
        assert "long_completion_round_ratios" not in c


def test_token_cap_is_sarathis_for_token_budget_policies_and_the_engines_for_time_budget_ones():
    ns = convoy.parse_args([])
    choice = {"deadline_min": 0.6, "t_target": 0.15}

    def cap(policy):
        flags = convoy.policy_flags(policy, choice, ns)
        return flags[flags.index("--max-num-batched-tokens") + 1] if "--max-num-batched-tokens" in flags else None

    assert cap("fcfs_nonchunked") == cap("fcfs") == "512"
    assert cap("slo") is None and cap("edf") is None  # the engine's default: the time budget sizes iterations
    assert "--t-target" in convoy.policy_flags("slo", choice, ns)
    ns = convoy.parse_args(["--time-budget-token-cap", "2048"])
    assert cap("slo") == "2048" and cap("fcfs") == "512"
    assert "Token cap 512 for every policy." == convoy.cap_line({"max_num_batched_tokens": 512})  # older runs
    assert "2048 for the time-budget" in convoy.cap_line(vars(ns))


def _requests(ttfts, kind="short"):
    """Results-JSON entries of one configuration: two rounds of the same request ids."""
    return [{"request_id": f"r{i % (len(ttfts) // 2)}", "kind": kind, "ttft_s": t} for i, t in enumerate(ttfts)]


def test_the_edf_gap_gets_a_paired_bootstrap_interval_and_the_verdict_stays_strict():
    import random

    from convoy_report import paired_percentile_diff, short_ttfts

    rng = random.Random(1)
    base = [rng.lognormvariate(-2.0, 0.5) for _ in range(400)]
    keys = short_ttfts(_requests(base))
    assert len(keys) == 400 and ("r0", 1) in keys  # the second round's r0 is its own request
    assert short_ttfts(_requests(base, kind="long")) == {}

    # every request 5 ms slower: the gap is certain, which only pairing the same requests can show
    gap, lo, hi = paired_percentile_diff(short_ttfts(_requests([t + 0.005 for t in base])), keys)
    assert gap == pytest.approx(0.005) and lo == pytest.approx(0.005) and hi == pytest.approx(0.005)
    # the same TTFTs dealt to other requests: the P99 is equal, the tail requests differ
    shuffled = base[:]
    rng.shuffle(shuffled)
    gap, lo, hi = paired_percentile_diff(short_ttfts(_requests(shuffled)), keys)
    assert gap == pytest.approx(0.0) and lo < 0 < hi

    summaries = {"slo": _summary(30.0, p99=0.3245), "edf": _summary(30.0, p99=0.3227)}
    requests = {"slo": _requests([t + 1e-4 for t in shuffled]), "edf": _requests(base)}
    c = convoy.criteria(summaries, None, requests)
    assert not c["no_worse_than_edf"]  # 1.8 ms behind: the strict verdict
    lo, hi = c["short_p99_ttft_minus_edf_ci95_s"]
    assert lo < 0 < hi
    assert convoy.criteria_lines(c)[-1].endswith(": noise")


def test_the_floor_line_divides_by_the_same_profiles_whole_prompt():
    choice = {"predicted_long_prefill_budgeted_s": 16.5, "profile_long_prefill_whole_s": 15.0,
              "predicted_long_prefill_nonchunked_s": 12.5, "short_prefill_load": 0.2}
    line = convoy.budget_floor_lines(choice)[0]
    assert "1.10x the same profile's whole-prompt prefill (15.0 s)" in line
    assert "20.6 s = 1.38x" in line  # 16.5 / 0.8 over 15.0
    old = {k: v for k, v in choice.items() if k != "profile_long_prefill_whole_s"}  # results before stop 64
    assert "1.32x the calibration's whole-prompt prefill (12.5 s)" in convoy.budget_floor_lines(old)[0]
    assert convoy.budget_floor_lines({"short_prefill_load": 0.2}) == []
