"""Medha 4.1's illustrative scenario, from committed trace files, through the simulator.

Device: linear:1e-4 (0.1 ms per token), so work is tokens / 10^4 seconds.
  data/paper_scenario.csv         the paper's numbers: long 100K tokens = 10 s of work, deadline 16 s,
                                  at t=0; two shorts of 0.5 s work, 1 s deadlines, at t=5
  data/paper_scenario_slack.csv   the same with 0.25 s shorts: the paper's two 0.5 s shorts due
                                  within 1 s have zero slack on any device whose time adds up over
                                  tokens (they must run back to back from the instant they arrive),
                                  which LARS by design does not do (their relative slack at arrival
                                  exceeds the long request's); with slack, LARS meets all three
  data/paper_scenario_stream.csv  the long request plus 0.5 s shorts every 0.6 s from t=5 (EDF's
                                  "continuing stream of short arrivals")
"""

import os

import pytest

from medha_jax.sim.experiment import Experiment
from medha_jax.sim.profiles import load_profile
from medha_jax.sim.workload import read_trace

DATA = os.path.join(os.path.dirname(__file__), "data")
PER_TOKEN = 1e-4


@pytest.fixture(scope="module")
def exp():
    # the 100K-token request counts as long (one long prefill per batch, space sharing)
    return Experiment(load_profile(f"linear:{PER_TOKEN}"), config={"long_threshold": 16384})


def run(exp, trace, policy, observer=None):
    specs = read_trace(os.path.join(DATA, trace))
    return exp.run(policy, specs, observer=observer).outcomes


def test_traces_hold_the_papers_numbers():
    lit = read_trace(os.path.join(DATA, "paper_scenario.csv"))
    assert [(s.arrival, s.prompt_tokens * PER_TOKEN, s.ttft_deadline) for s in lit] == [
        (0.0, 10.0, 16.0), (5.0, 0.5, 1.0), (5.0, 0.5, 1.0)]


@pytest.mark.parametrize("policy", ["sarathi-512", "sarathi-2048", "loongserve"])
def test_fcfs_shorts_miss_behind_the_long_prefill(exp, policy):
    long_, *shorts = run(exp, "paper_scenario.csv", policy)
    assert long_.ttft == pytest.approx(10.0, abs=0.1) and not long_.missed
    assert all(s.missed for s in shorts)
    assert all(s.ttft > 4.5 for s in shorts)  # they waited for the whole 10 s prefill: a convoy


@pytest.mark.parametrize("policy", ["lars", "medha"])
def test_lars_meets_every_deadline_when_the_shorts_have_slack(exp, policy):
    progress = []

    def observer(start, tick_end, batch):
        if 5.0 <= start < 6.0:
            progress.extend(s.num_tokens for s in batch.seqs if s.request_id == "r0")

    outcomes = run(exp, "paper_scenario_slack.csv", policy, observer)
    assert not any(o.missed for o in outcomes), [(o.request_id, o.ttft) for o in outcomes]
    assert sum(progress) > 0  # the long request kept moving while the shorts were served


def test_lars_on_the_literal_scenario_misses_by_the_missing_slack(exp):
    """Zero slack: LARS lets the shorts wait until their relative slack falls to the long one's, so
    they finish a little after 1 s; the long request still meets its deadline."""
    long_, *shorts = run(exp, "paper_scenario.csv", "lars")
    assert not long_.missed
    assert all(1.0 < s.ttft < 1.25 for s in shorts)


def test_edf_under_a_stream_of_shorts_starves_the_long_request_then_convoys(exp):
    long_tokens = {"starve": 0, "convoy_other": 0}

    def observer(start, tick_end, batch):
        ids = [s.request_id for s in batch.seqs]
        if 5.0 <= start < 15.0:
            long_tokens["starve"] += sum(s.num_tokens for s in batch.seqs if s.request_id == "r0")
        if 15.3 <= start < 18.0 and any(i != "r0" for i in ids):
            long_tokens["convoy_other"] += 1

    long_, *shorts = run(exp, "paper_scenario_stream.csv", "edf", observer)
    # starvation: between t=5 and t=15 the long request gets under a quarter of the device
    assert long_tokens["starve"] * PER_TOKEN < 0.25 * 10.0
    assert long_.missed and long_.ttft > 16.0
    # convoy: once its deadline is the earliest (shorts arriving after t=15 are due after 16) it runs
    # alone to the end, and every short arriving meanwhile misses
    done = long_.arrival + long_.ttft
    before = [s for s in shorts if s.arrival < 14.9]
    during = [s for s in shorts if 15.1 <= s.arrival <= done - 1.0]
    assert before and not any(s.missed for s in before)
    assert during and all(s.missed for s in during)
    assert long_tokens["convoy_other"] == 0
