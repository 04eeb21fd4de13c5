"""The shared scheduler mechanics under the fcfs policies (no predictor, no device)."""

import pytest

from medha_jax.request import RequestStatus
from medha_jax.scheduler import SchedulerConfig
from tests.scheduler.factories import make_requests, make_scheduler, sample_all, shape


def run_to_completion(sched, reqs, max_iters=10_000):
    for r in reqs:
        sched.add_request(r)
    batches = []
    t = 0.0
    while sched.has_unfinished:
        b = sched.schedule(t)
        assert not b.is_empty, "scheduler stalled"
        batches.append(b)
        t += 1.0
        sample_all(sched, b, t)
        assert len(batches) < max_iters
    return batches


def test_sarathi_chunks_fill_the_token_budget_in_arrival_order():
    s = make_scheduler("fcfs", num_pages=256, max_num_batched_tokens=512)
    reqs = make_requests(3, prompt_len=300)
    for r in reqs:
        s.add_request(r)
    b1 = s.schedule(0.0)
    assert shape(b1) == [("r0", 0, 300), ("r1", 0, 212)]
    assert s.num_running == 2 and s.num_waiting == 1
    sample_all(s, b1, 1.0)
    b2 = s.schedule(1.0)
    # the decode is chosen first, the rest of r1 and then r2 fill the budget; prefills listed first
    assert shape(b2) == [("r1", 212, 88), ("r2", 0, 300), ("r0", 300, 1)]
    assert [q.is_prefill for q in b2.seqs] == [True, True, False]
    assert [list(t) for t in b2.seqs[2].page_tables] == [list(range(19))]  # 301 tokens of 16-token pages


def test_arrival_order_not_insertion_order():
    s = make_scheduler("fcfs", num_pages=256, max_num_batched_tokens=64)
    late, early = make_requests(2, prompt_len=40, arrival=[2.0, 1.0])
    s.add_request(late)
    s.add_request(early)
    assert shape(s.schedule(3.0)) == [("r1", 0, 40), ("r0", 0, 24)]


def test_max_num_seqs_caps_the_batch():
    s = make_scheduler("fcfs", num_pages=256, max_num_seqs=2)
    for r in make_requests(3, prompt_len=8):
        s.add_request(r)
    assert shape(s.schedule(0.0)) == [("r0", 0, 8), ("r1", 0, 8)]


def test_nonchunked_runs_whole_prompts_first_one_even_past_the_budget():
    s = make_scheduler("fcfs_nonchunked", num_pages=256, max_num_batched_tokens=512)
    for r in make_requests(3, prompt_len=[1000, 300, 200]):
        s.add_request(r)
    b1 = s.schedule(0.0)
    assert shape(b1) == [("r0", 0, 1000)]
    sample_all(s, b1, 1.0)
    b2 = s.schedule(1.0)
    assert shape(b2) == [("r1", 0, 300), ("r2", 0, 200), ("r0", 1000, 1)]


def test_in_flight_requests_are_not_scheduled_twice():
    s = make_scheduler("fcfs", num_pages=256, max_num_batched_tokens=16)
    for r in make_requests(2, prompt_len=20):
        s.add_request(r)
    b1 = s.schedule(0.0)
    b2 = s.schedule(0.0)  # b1 not done yet
    assert shape(b1) == [("r0", 0, 16)]
    assert shape(b2) == [("r1", 0, 16)]
    s.on_batch_done(b1, 1.0)
    s.on_batch_done(b2, 1.0)
    assert shape(s.schedule(1.0)) == [("r0", 16, 4), ("r1", 16, 4)]


def test_decode_preempts_most_recent_decode_which_recomputes_its_output():
    s = make_scheduler("fcfs", num_pages=6, page_size=4)
    r0, r1 = make_requests(2, prompt_len=8, max_tokens=10)
    s.add_request(r0)
    s.add_request(r1)
    for t in range(5):  # prefill, then decodes at positions 8..11 (3 pages each)
        b = s.schedule(float(t))
        assert not b.preempted
        sample_all(s, b, t + 1.0)
    b6 = s.schedule(5.0)  # position 12 needs a 4th page for each: r1 (started last) is preempted
    assert shape(b6) == [("r0", 12, 1)]
    assert b6.preempted == [r1]
    assert r1.status is RequestStatus.PREEMPTED and r1.num_computed_tokens == 0
    assert r1.num_preemptions == 1 and r1.num_output_tokens == 5
    sample_all(s, b6, 6.0)
    assert r1.status is RequestStatus.WAITING and s.num_waiting == 1
    t = 6.0
    while not r0.is_finished:
        b = s.schedule(t)
        assert shape(b)[0][0] == "r0" and len(b.seqs) == 1
        t += 1.0
        sample_all(s, b, t)
    b = s.schedule(t)  # r1 recomputes prompt + its 5 generated tokens
    assert shape(b) == [("r1", 0, 13)]
    assert b.seqs[0].token_ids == r1.prompt_token_ids + [7] * 5


def test_decode_preempts_a_partial_prefill_before_any_decode():
    s = make_scheduler("fcfs", num_pages=5, page_size=4, max_num_batched_tokens=8)
    r0, r1 = make_requests(2, prompt_len=[8, 12], max_tokens=8)
    s.add_request(r0)
    s.add_request(r1)
    shapes = []
    t = 0.0
    b = None
    while True:
        b = s.schedule(t)
        shapes.append(shape(b))
        t += 1.0
        if b.preempted:
            break
        sample_all(s, b, t)
    assert shapes == [
        [("r0", 0, 8)],
        [("r1", 0, 7), ("r0", 8, 1)],
        [("r0", 9, 1)],  # r1 needs a 3rd page, none free, no lower-priority victim: skipped
        [("r0", 10, 1)],
        [("r0", 11, 1)],
        [("r0", 12, 1)],  # r0 needs a 4th page: the partial prefill r1 goes
    ]
    assert b.preempted == [r1] and r1.num_computed_tokens == 0 and r1.num_output_tokens == 0


@pytest.mark.parametrize("policy", ["fcfs", "fcfs_nonchunked"])
def test_memory_pressure_still_finishes_everything(policy):
    s = make_scheduler(policy, num_pages=12, page_size=4, max_num_batched_tokens=32)
    reqs = make_requests(8, prompt_len=[5, 17, 9, 30, 2, 12, 20, 7], max_tokens=12)
    run_to_completion(s, reqs)
    assert all(r.status is RequestStatus.FINISHED_LENGTH for r in reqs)
    assert all(r.num_output_tokens == 12 for r in reqs)
    assert s.num_preemptions > 0
    assert s.kv.num_free_pages == 12


def test_request_that_can_never_fit_is_rejected():
    s = make_scheduler("fcfs", num_pages=4, page_size=4)
    (r,) = make_requests(1, prompt_len=10, max_tokens=7)
    with pytest.raises(ValueError, match="needs KV for 17 tokens .* at most 16"):
        s.add_request(r)
    (ok,) = make_requests(1, prompt_len=10, max_tokens=6)
    s.add_request(ok)
    with pytest.raises(ValueError, match="already scheduled"):
        s.add_request(ok)


def test_abort_and_finish_free_pages_at_once():
    s = make_scheduler("fcfs", num_pages=16, page_size=4)
    a, b = make_requests(2, prompt_len=8)
    s.add_request(a)
    s.add_request(b)
    s.on_batch_done(s.schedule(0.0), 1.0)
    assert s.kv.num_free_pages == 12
    assert s.abort("r0") is a and a.status is RequestStatus.FINISHED_ABORTED
    assert s.abort("nope") is None
    assert s.kv.num_free_pages == 14 and a not in s.requests and b in s.requests
    s.finish(b, RequestStatus.FINISHED_STOPPED)
    assert s.kv.num_free_pages == 16 and not s.has_unfinished
    with pytest.raises(ValueError, match="not in this scheduler"):
        s.finish(b, RequestStatus.FINISHED_STOPPED)
    with pytest.raises(ValueError, match="finished status"):
        s.finish(a, RequestStatus.RUNNING)


def test_abort_while_in_flight_does_not_advance():
    s = make_scheduler("fcfs")
    (a,) = make_requests(1, prompt_len=8)
    s.add_request(a)
    b = s.schedule(0.0)
    s.abort("r0")
    s.on_batch_done(b, 1.0)
    assert a.num_computed_tokens == 0


def test_preempt_all_sends_everyone_back_to_waiting():
    s = make_scheduler("fcfs", num_pages=16, page_size=4)
    reqs = make_requests(2, prompt_len=8)
    for r in reqs:
        s.add_request(r)
    s.on_batch_done(s.schedule(0.0), 1.0)
    assert s.preempt_all() == reqs
    assert s.kv.num_free_pages == 16 and s.num_waiting == 2 and s.num_running == 0
    assert all(r.num_computed_tokens == 0 and r.status is RequestStatus.WAITING for r in reqs)


def test_records_keep_the_composition():
    s = make_scheduler("fcfs", max_records=2)
    for r in make_requests(1, prompt_len=8, max_tokens=5):
        s.add_request(r)
    for t in range(3):
        b = s.schedule(float(t))
        s.on_batch_done(b, t + 1.0, measured_time=0.25)
        b.seqs[0].request.output_token_ids.append(1)
    assert len(s.records) == 2
    assert [r.composition.seqs for r in s.records] == [((1, 8),), ((1, 9),)]
    assert s.records[0].measured == 0.25 and s.records[0].predicted is None


@pytest.mark.parametrize("kwargs, msg", [
    (dict(policy="sjf"), "valid: fcfs, fcfs_nonchunked, srpt, edf, lrs, lars, slo"),
    (dict(max_num_seqs=0), "max_num_seqs"),
    (dict(t_target=-1.0), "t_target"),
    (dict(tpot_slo=0.02, t_target=0.05), "exceeds tpot_slo"),
    (dict(min_chunk=48), "multiples of chunk_granularity"),
    (dict(rho_max=1.0), "rho_max"),
    (dict(multi_prefill_fraction=0.0), "multi_prefill_fraction"),
])
def test_bad_config_is_rejected(kwargs, msg):
    with pytest.raises(ValueError, match=msg):
        SchedulerConfig(**kwargs)


def test_t_target_defaults():
    assert SchedulerConfig().t_target == 0.05
    assert SchedulerConfig(tpot_slo=0.02).t_target == 0.02


def test_max_batch_tokens_defaults_per_policy():
    assert SchedulerConfig(policy="fcfs").max_num_batched_tokens == 512
    assert SchedulerConfig().policy == "slo"  # deadline-aware by default (issue 17)
    assert SchedulerConfig(policy="lars").max_num_batched_tokens == 8192 + 256
    assert make_scheduler("fcfs", max_num_batched_tokens=64).max_batch_tokens == 64
    assert make_scheduler("fcfs_nonchunked").max_batch_tokens is None


def test_vllm_long_prefill_limits_leave_room_for_short_prompts():
    """long_prefill_token_threshold: long prompts' chunks are capped and only
    max_long_partial_prefills of them run per iteration, so a short prompt behind two long ones
    is prefilled at once (plain fcfs would give the whole budget to the first long prompt)."""
    s = make_scheduler("fcfs", num_pages=1024, max_num_batched_tokens=512, long_prefill_token_threshold=200)
    for r in make_requests(2, prompt_len=3000, prefix="L") + make_requests(1, prompt_len=100, arrival=1.0, prefix="s"):
        s.add_request(r)
    assert shape(s.schedule(1.0)) == [("L0", 0, 200), ("s0", 0, 100)]
    plain = make_scheduler("fcfs", num_pages=1024, max_num_batched_tokens=512)
    for r in make_requests(2, prompt_len=3000, prefix="L") + make_requests(1, prompt_len=100, arrival=1.0, prefix="s"):
        plain.add_request(r)
    assert shape(plain.schedule(1.0)) == [("L0", 0, 512)]
    with pytest.raises(ValueError, match="long_prefill_token_threshold"):
        SchedulerConfig(long_prefill_token_threshold=-1)


def test_srpt_runs_the_shortest_prompt_first_and_ages_the_long_ones():
    s = make_scheduler("srpt", num_pages=1024, max_num_batched_tokens=256, srpt_aging=100.0)
    long_ = make_requests(1, prompt_len=3000, arrival=0.0, prefix="L")
    short = make_requests(2, prompt_len=200, arrival=[5.0, 35.0], prefix="s")
    for r in long_ + short:
        s.add_request(r)
    # keys at 40 s: s0 200 - 3500, L0 3000 - 4000, s1 200 - 500: a long prompt that has waited
    # 28 s longer than a short one (2800 tokens / 100 per s) goes before it
    assert [r.request_id for r in s.policy.order(long_ + short, 40.0)] == ["s0", "L0", "s1"]
    assert shape(s.schedule(40.0)) == [("s0", 0, 200), ("L0", 0, 56)]
    with pytest.raises(ValueError, match="srpt_aging"):
        SchedulerConfig(policy="srpt", srpt_aging=-1.0)
