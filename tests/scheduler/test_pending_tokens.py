"""Asynchronous scheduling on the scheduler alone: step n+1 is formed before step n's tokens are known.

The "device" here samples a token that depends only on the request and the position it is
sampled at, so any schedule must give every request the same tokens; the asynchronous loop
(`on_batch_done(tokens_pending=True)`, then `update_from_output` one step later) must give the
tokens, stops and finish reasons of the synchronous one, under memory pressure too.
"""

import pytest

from medha_jax.request import RequestStatus
from medha_jax.sampling_params import SamplingParams
from tests.scheduler.factories import make_requests, make_scheduler

STOP = 3  # the "EOS" some requests stop at


def token_at(seq) -> int:
    """What the fake model samples for a sequence: a function of (request, position) only."""
    k = int(seq.request_id[1:])
    return (k * 7 + seq.start_pos + seq.num_tokens) % 11


def _requests():
    reqs = make_requests(6, prompt_len=[40, 3, 100, 17, 64, 1])
    for i, r in enumerate(reqs):
        stops = [STOP] if i % 2 else []
        r.sampling_params = SamplingParams(max_tokens=[30, 1, 40, 20, 25, 30][i], stop_token_ids=stops)
    return reqs


def run_sync(sched, reqs):
    for r in reqs:
        sched.add_request(r)
    t, n = 0.0, 0
    while sched.has_unfinished:
        b = sched.schedule(t)
        assert not b.is_empty, "scheduler stalled"
        t += 1.0
        sched.on_batch_done(b, t)
        sched.update_from_output(b, [token_at(s) for s in b.seqs], t)
        n += 1
    return n


def run_async(sched, reqs):
    for r in reqs:
        sched.add_request(r)
    t, n, prev = 0.0, 0, None
    while sched.has_unfinished or prev is not None:
        b = sched.schedule(t)
        sampled = {s.request_id for s in prev.seqs if s.samples} if prev is not None else set()
        for s in b.seqs:  # a pending token was sampled by the previous step and is computed now
            if s.request.num_pending_tokens and s.samples:
                assert s.request_id in sampled
                assert s.token_ids[-1] == 0  # the id is not on the host: the device feeds it
        assert prev is not None or not b.is_empty, "scheduler stalled"
        t += 1.0
        if prev is not None:
            sched.record(prev, t, None)
            sched.update_from_output(prev, [token_at(s) for s in prev.seqs], t)
        if not b.is_empty:
            sched.on_batch_done(b, t, tokens_pending=True, record=False)
        prev = None if b.is_empty else b
        n += 1
    return n


@pytest.mark.parametrize("policy", ["fcfs", "srpt"])
@pytest.mark.parametrize("num_pages", [64, 10])
def test_async_loop_gives_the_tokens_and_stops_of_the_sync_loop(policy, num_pages):
    sync_reqs, async_reqs = _requests(), _requests()
    s_sync = make_scheduler(policy, num_pages=num_pages, max_num_batched_tokens=64)
    s_async = make_scheduler(policy, num_pages=num_pages, max_num_batched_tokens=64)
    n_sync = run_sync(s_sync, sync_reqs)
    n_async = run_async(s_async, async_reqs)
    for a, b in zip(sync_reqs, async_reqs):
        assert b.output_token_ids == a.output_token_ids, a.request_id
        assert (b.status, b.stop_reason) == (a.status, a.stop_reason)
        assert b.num_pending_tokens == 0
    assert {r.status for r in sync_reqs} == {RequestStatus.FINISHED_STOPPED, RequestStatus.FINISHED_LENGTH}
    assert s_async.kv.num_free_pages == s_async.kv.num_total_pages
    if num_pages == 10:
        assert s_sync.num_preemptions and s_async.num_preemptions  # the pressure paths ran
    # Decodes follow each other without waiting for the host: one step more at most per stop.
    assert n_async <= n_sync + len(async_reqs)


def test_a_request_whose_pending_token_is_its_last_is_not_scheduled_again():
    s = make_scheduler("fcfs", num_pages=64)
    (r,) = make_requests(1, prompt_len=5, max_tokens=2)
    s.add_request(r)
    b1 = s.schedule(0.0)  # the prompt
    s.on_batch_done(b1, 1.0, tokens_pending=True, record=False)
    b2 = s.schedule(1.0)  # decodes the pending first token (its id not known yet)
    assert [(q.start_pos, q.num_tokens) for q in b2.seqs] == [(5, 1)] and r.num_pending_tokens == 1
    s.update_from_output(b1, [42], 1.0)
    assert r.output_token_ids == [42] and r.num_pending_tokens == 0
    s.on_batch_done(b2, 2.0, tokens_pending=True, record=False)
    assert s.schedule(2.0).is_empty  # the pending token is the second of max_tokens=2: nothing to compute
    s.update_from_output(b2, [43], 2.0)
    assert r.output_token_ids == [42, 43] and r.status is RequestStatus.FINISHED_LENGTH
