"""`Scheduler.busy_until`, the predicted start of the batch being formed, restarts from each
recorded batch's end: no prediction's error carries into later batches' starts, however long the
device stays busy (the engine's asynchronous loop: step n+1 is scheduled before step n is
recorded)."""

import pytest

from medha_jax.scheduler import RuntimePredictor
from tests.scheduler.factories import make_requests, make_scheduler

PRED = RuntimePredictor({"const": 2e-3, "tokens": 1e-4, "decodes": 1e-3, "chunk_kv": 1e-8})


def long_prefill(speed: float, steps: int):
    """An 8K-token prompt and two chats, prefilled and decoded under edf's time budget as the
    asynchronous engine loop runs them, each step taking `speed` x its prediction. Yields
    (now, busy_until, predicted time of the batch in flight) right after each step is recorded."""
    s = make_scheduler("edf", num_pages=4096, predictor=RuntimePredictor(PRED.coefficients), t_target=0.05,
                       min_chunk=32, chunk_granularity=32)
    for r in make_requests(2, prompt_len=64, max_tokens=500, ttft_deadline=1.0) + \
            make_requests(1, prompt_len=8192, max_tokens=1, prefix="L", ttft_deadline=100.0):
        s.add_request(r)
    now, prev = 0.0, None
    for _ in range(steps):
        b = s.schedule(now)
        assert not b.is_empty
        s.on_batch_done(b, now, tokens_pending=True, record=False)
        if prev is not None:  # the device runs prev, then b; the host learns prev's end now
            now += speed * prev.predicted_time
            s.record(prev, now, speed * prev.predicted_time)
            s.update_from_output(prev, 7, now)
            yield now, s.busy_until, b.predicted_time
        prev = b


@pytest.mark.parametrize("speed", [0.7, 1.0, 1.4])
def test_the_next_start_is_the_batch_in_flight_predicted_from_its_real_start(speed):
    # ran ~0.7x its predictions for 150 steps: 1.6 s of error added up before the fix
    seen = list(long_prefill(speed, 150))
    assert len(seen) == 149
    for now, busy, in_flight in seen:
        assert busy == pytest.approx(now + in_flight)


def test_batches_never_recorded_are_dropped_with_the_next_recorded_one():
    s = make_scheduler("edf", num_pages=4096, predictor=PRED, t_target=0.05)
    for r in make_requests(3, prompt_len=512, max_tokens=4, ttft_deadline=1.0):
        s.add_request(r)
    b1 = s.schedule(0.0)
    s.on_batch_done(b1, 0.0, tokens_pending=True, record=False)
    b2 = s.schedule(0.0)  # b1 fails on the device and is never recorded
    s.on_batch_done(b2, 0.0, tokens_pending=True, record=False)
    b3 = s.schedule(0.0)
    assert s.busy_until == pytest.approx(b1.predicted_time + b2.predicted_time + b3.predicted_time)
    s.record(b2, 0.5, 0.5)
    assert s.busy_until == pytest.approx(0.5 + b3.predicted_time)
    s.record(b2, 0.6, 0.5)  # recorded twice: nothing moves
    assert s.busy_until == pytest.approx(0.5 + b3.predicted_time)
    s.on_batch_done(b3, 0.7)
    assert s.busy_until == 0.7  # nothing on the device
