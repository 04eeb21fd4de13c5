"""Deadlines and priorities of edf / lrs / lars on a linear device (1e-4 s per token)."""

import pytest

from medha_jax.scheduler import RuntimePredictor
from tests.scheduler.factories import make_requests, make_scheduler

PRED = {"tokens": 1e-4}


def sched(policy, **kw):
    return make_scheduler(policy, num_pages=16384, predictor=RuntimePredictor(PRED), **kw)


def test_derived_and_overridden_deadlines():
    s = sched("lars")
    long_, short, given = make_requests(3, prompt_len=[100_000, 100, 100], ttft_deadline=[None, None, 2.0])
    for r in (long_, short, given):
        s.add_request(r)
    assert s.policy.deadline(long_) == pytest.approx(15.0)  # 1.5 * 10 s
    assert s.policy.deadline(short) == 0.5  # 1.5 * 10 ms is below the 0.5 s floor
    assert s.policy.deadline(given) == 2.0
    assert s.policy.work(long_) == pytest.approx(10.0)


def priorities(policy, now):
    # A: 10 s of work, due at 15 s; B: 1 s of work due at 2 s; C: 0.1 s due at 1 s (arrives at 0.5)
    s = sched(policy)
    reqs = make_requests(3, prompt_len=[100_000, 10_000, 1000], ttft_deadline=[None, 2.0, 1.0],
                         arrival=[0.0, 0.0, 0.5])
    for r in reqs:
        s.add_request(r)
    return [s.policy.key(r, now) for r in reqs]


def test_edf_orders_by_absolute_deadline():
    assert priorities("edf", 0.5) == pytest.approx([15.0, 2.0, 1.5])


def test_lrs_orders_by_remaining_slack():
    # slack = arrival + D - now - T_remaining
    assert priorities("lrs", 0.5) == pytest.approx([4.5, 0.5, 0.9])


def test_lars_orders_by_slack_relative_to_the_deadline():
    assert priorities("lars", 0.5) == pytest.approx([4.5 / 15, 0.5 / 2.0, 0.9 / 1.0])


def test_slack_counts_only_the_remaining_work():
    s = sched("lrs")
    (r,) = make_requests(1, prompt_len=100_000)
    s.add_request(r)
    assert s.policy.key(r, 0.0) == pytest.approx(5.0)
    r.num_computed_tokens = 50_000  # half done at t=5: slack is still 5 s
    assert s.policy.key(r, 5.0) == pytest.approx(5.0)
    r.num_computed_tokens = 0  # preempted at t=5 with 3 generated tokens to recompute
    r.output_token_ids.extend([1, 2, 3])
    assert s.policy.key(r, 5.0) == pytest.approx(15.0 - 5.0 - 10.0003)


def test_candidates_come_best_first():
    s = sched("edf")
    reqs = make_requests(6, prompt_len=100, ttft_deadline=[6.0, 1.0, 5.0, 2.0, 4.0, 3.0])
    for r in reqs:
        s.add_request(r)
    assert [r.request_id for r in s.policy.order(reqs, 0.0)] == ["r1", "r3", "r5", "r4", "r2", "r0"]
    assert [r.request_id for r in s.prefill_candidates(0.0)] == ["r1", "r3", "r5", "r4", "r2", "r0"]


def test_time_budget_policies_need_a_predictor():
    with pytest.raises(ValueError, match="needs? .*predictor|runtime predictor"):
        make_scheduler("lars")


def test_a_policy_that_defines_only_key_gets_a_full_sort():
    from medha_jax.scheduler import Scheduler, SchedulerConfig
    from medha_jax.scheduler.policies import Policy
    from medha_jax.scheduler.token_budget import TokenBudgetPacker
    from tests.scheduler.factories import make_kv

    class LongestFirst(Policy):  # no __init__ call, no static keys
        def __init__(self):
            pass

        def key(self, request, now):
            return -request.prompt_len

    s = Scheduler(SchedulerConfig(max_num_batched_tokens=1000), make_kv(), LongestFirst(), TokenBudgetPacker())
    for r in make_requests(3, prompt_len=[10, 30, 20]):
        s.add_request(r)
    assert s.policy.index is None
    assert [r.request_id for r in s.prefill_candidates(0.0)] == ["r1", "r2", "r0"]
    s.abort("r2")
    assert [r.request_id for r in s.prefill_candidates(0.0)] == ["r1", "r0"]
