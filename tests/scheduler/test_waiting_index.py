"""The waiting index must yield exactly what sorting every candidate by key(now) would."""

import random

import pytest
from hypothesis import given, settings, strategies as st

from medha_jax.batch import ScheduledBatch
from medha_jax.scheduler import RuntimePredictor
from tests.scheduler.factories import make_requests, make_scheduler

POLICIES = ["fcfs", "srpt", "edf", "lrs", "lars"]


def sched(policy):
    return make_scheduler(policy, num_pages=1 << 16, predictor=RuntimePredictor({"const": 1e-3, "tokens": 1e-5}),
                          max_prefill_candidates=10_000)


@pytest.mark.parametrize("policy", POLICIES)
def test_static_keys_give_the_same_priority_as_key(policy):
    s = sched(policy)
    rng = random.Random(0)
    reqs = make_requests(50, prompt_len=[rng.choice([64, 100, 5000, 80_000, 120_000]) for _ in range(50)],
                         arrival=[rng.uniform(0, 10) for _ in range(50)],
                         ttft_deadline=[rng.choice([None, None, 1.0, 3.0]) for _ in range(50)])
    for r in reqs:
        s.add_request(r)
    for now in (10.0, 12.5, 40.0):
        for r in reqs:
            group, static = s.policy.group_and_key(r)
            assert s.policy.static_key_now(group, static, now) == pytest.approx(s.policy.key(r, now), abs=1e-12)
            assert s.policy.bulk_static_key_now([group], [static], now)[0] == pytest.approx(s.policy.key(r, now), abs=1e-12)


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(POLICIES), st.lists(st.tuples(st.sampled_from(["add", "admit", "abort", "advance"]),
                                                     st.integers(0, 10**6)), max_size=60))
def test_candidates_match_a_full_sort(policy, ops):
    s = sched(policy)
    now, n = 0.0, 0
    for op, x in ops:
        if op == "add":
            (r,) = make_requests(1, prompt_len=[32, 300, 4000, 200_000][x % 4], arrival=now - (x % 7) * 0.1,
                                 ttft_deadline=[None, 0.7, 2.0][x % 3], prefix=f"q{n}-")
            n += 1
            s.add_request(r)
        elif op == "admit" and s.waiting:  # becomes a running partial prefill
            r = list(s.waiting)[x % len(s.waiting)]
            b = ScheduledBatch()
            assert s.reserve(r, 16, b, now)
            s.add_seq(b, r, 16, now)
            s.on_batch_done(b, now)
        elif op == "abort" and s.requests:
            rid = list(s.requests)[x % len(s.requests)].request_id
            s.abort(rid)
        else:
            now += (x % 100) / 10.0
        s._schedule_decodes(ScheduledBatch(), now)  # refreshes the partial-prefill list
        got = [r.request_id for r in s.prefill_candidates(now)]
        pool = [r for r in s.running if r.num_remaining_tokens >= 1] + list(s.waiting)
        want = sorted(pool, key=lambda r: s.policy.key(r, now))
        assert [s.policy.key(s.requests[i], now) for i in got] == pytest.approx([s.policy.key(r, now) for r in want])
        assert sorted(got) == sorted(r.request_id for r in pool)
