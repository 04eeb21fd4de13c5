"""The scheduler under a stream pipeline (pure Python, no device): the engine reports a batch
done once it has passed stage 0 and appends sampled tokens spp-1 ticks later.

A prefill's next chunk is schedulable on the very next tick; a request whose last chunk (or
decode) is still in the pipeline has nothing to compute, is not scheduled, and is never chosen
as a preemption victim (its pages are being written by later stages).
"""

from medha_jax.request import RequestStatus
from tests.scheduler.factories import make_requests, make_scheduler, shape


def test_chunks_follow_each_other_and_a_request_waits_for_its_token():
    sched = make_scheduler("fcfs", max_num_batched_tokens=32, num_pages=64)
    a, b = make_requests(2, prompt_len=[80, 8])
    sched.add_request(a)
    sched.add_request(b)
    ticks = []
    for t in range(3):  # a's three chunks enter the pipeline on consecutive ticks
        batch = sched.schedule(float(t))
        ticks.append(shape(batch))
        sched.on_batch_done(batch, float(t))  # passed stage 0
    assert ticks == [[("r0", 0, 32)], [("r0", 32, 32)], [("r0", 64, 16), ("r1", 0, 8)]]
    assert a.num_remaining_tokens == 0 and b.num_remaining_tokens == 0  # both wait for a token
    assert sched.schedule(3.0).is_empty
    a.output_token_ids.append(5)  # a's token leaves the last stage
    assert shape(sched.schedule(4.0)) == [("r0", 80, 1)]


def test_a_request_waiting_for_its_token_is_never_a_victim():
    # 8 pages of 16 tokens: the long request holds 5, so the other's decodes soon need a victim.
    sched = make_scheduler("fcfs", max_num_batched_tokens=81, num_pages=8)
    waiting_for_token, decoder = make_requests(2, prompt_len=[80, 40], max_tokens=40)
    sched.add_request(decoder)
    sched.on_batch_done(sched.schedule(0.0), 0.0)
    decoder.output_token_ids.append(1)
    sched.add_request(waiting_for_token)
    batch = sched.schedule(1.0)
    assert shape(batch) == [("r0", 0, 80), ("r1", 40, 1)]
    t = 1.0
    while decoder.num_preemptions == 0:  # r0's only chunk stays in the pipeline meanwhile
        sched.on_batch_done(batch, t)
        if any(s.request is decoder and s.samples for s in batch.seqs):
            decoder.output_token_ids.append(1)
        t += 1.0
        batch = sched.schedule(t)
        assert t < 20
    assert waiting_for_token.status is RequestStatus.RUNNING and waiting_for_token.num_preemptions == 0
    assert decoder.status is RequestStatus.PREEMPTED  # no victim: it preempted itself
