"""The event loop: SPP pipelining, token sampling, horizon, stalls - on toy devices with exact times."""

import pytest

from medha_jax.kv_cache_manager import KVCacheManager
from medha_jax.scheduler import SchedulerConfig, make_scheduler
from medha_jax.sim.device_models import LinearDevice
from medha_jax.sim.driver import simulate
from medha_jax.sim.metrics import request_outcomes
from medha_jax.sim.workload import RequestSpec


class PipeDevice:
    """depth stages, each taking `tick` per batch whatever it holds."""

    def __init__(self, depth, tick):
        self.depth, self.tick = depth, tick

    def run(self, seqs):
        return self.tick, self.depth * self.tick


def fcfs(budget=64, pages=4096):
    return make_scheduler(SchedulerConfig(policy="fcfs", max_num_batched_tokens=budget), KVCacheManager(pages, 16))


def test_serial_device_times_add_up():
    # one request: 100-token prompt in chunks of 64 then 36 (+ its 1st token), then 2 decodes
    res = simulate(fcfs(), [RequestSpec(0.0, 100, 3)], LinearDevice(0.01))
    (r,) = res.requests
    assert r.first_token_time == pytest.approx(1.0)  # 64 + 36 tokens at 10 ms
    assert r.finish_time == pytest.approx(1.02)
    assert res.iterations == 4 and res.token_stats["r0"].max_gap == pytest.approx(0.01)


def test_spp_streams_chunks_one_tick_apart_and_decodes_wait_for_their_token():
    starts = []
    res = simulate(fcfs(), [RequestSpec(0.0, 256, 3)], PipeDevice(4, 1.0),
                   observer=lambda s, e, b: starts.append((s, [x.num_tokens for x in b.seqs])))
    # prefill: 4 chunks of 64 enter at t=0,1,2,3 (one tick apart, not one pipeline apart)
    assert starts[:4] == [(0.0, [64]), (1.0, [64]), (2.0, [64]), (3.0, [64])]
    (r,) = res.requests
    assert r.first_token_time == 7.0  # the last chunk enters at 3 and leaves stage 4 at 7
    # each decode enters when the previous token has left the pipeline: 4 ticks per token
    assert [s for s, _ in starts[4:]] == [7.0, 11.0]
    assert r.finish_time == 15.0


def test_two_requests_interleave_in_the_pipeline():
    res = simulate(fcfs(budget=512), [RequestSpec(0.0, 10, 3), RequestSpec(0.0, 10, 3)], PipeDevice(2, 1.0))
    a, b = res.requests
    assert a.first_token_time == b.first_token_time == 2.0  # both prompts in batch 0
    assert a.finish_time == b.finish_time == 6.0


def test_horizon_stops_the_clock_and_leaves_requests_unfinished():
    specs = [RequestSpec(0.0, 10_000, 5), RequestSpec(50.0, 10, 1)]
    res = simulate(fcfs(), specs, LinearDevice(0.01), horizon=20.0)
    assert res.horizon == 20.0 and res.end_time >= 20.0
    assert not any(r.is_finished for r in res.requests)
    assert res.requests[1].status.value == "waiting" or res.requests[1].first_token_time is None


def test_idle_gaps_jump_to_the_next_arrival():
    res = simulate(fcfs(), [RequestSpec(0.0, 10, 1), RequestSpec(100.0, 10, 1)], LinearDevice(0.01))
    assert res.requests[1].first_token_time == pytest.approx(100.1)
    assert res.busy_time == pytest.approx(0.2)


def test_a_request_that_can_never_get_its_pages_is_refused():
    with pytest.raises(ValueError, match="KV for"):
        simulate(fcfs(pages=4), [RequestSpec(0.0, 1000, 1)], LinearDevice(0.01))


def test_deterministic():
    specs = [RequestSpec(0.1 * i, 50 + 7 * i, 3 + i % 4) for i in range(40)]
    a = simulate(fcfs(), specs, PipeDevice(2, 0.01))
    b = simulate(fcfs(), specs, PipeDevice(2, 0.01))
    assert [r.first_token_time for r in a.requests] == [r.first_token_time for r in b.requests]
    assert [r.finish_time for r in a.requests] == [r.finish_time for r in b.requests]


def _settled(deadline_b):
    # A: 1000 tokens (10 s of prefill, fcfs: B waits behind it); B arrives at 5 s; horizon 8 s
    specs = [RequestSpec(0.0, 1000, 3, ttft_deadline=100.0), RequestSpec(5.0, 10, 1, ttft_deadline=deadline_b)]
    return [request_outcomes(simulate(fcfs(), specs, LinearDevice(0.01), horizon=8.0, settle=settle), lambda n: 1.0)
            for settle in (False, True)]


def test_settling_decides_a_request_still_waiting_at_the_horizon():
    plain, settled = _settled(deadline_b=20.0)
    assert [o.missed for o in plain] == [None, None]  # neither has a first token, both deadlines ahead
    assert [o.missed for o in settled] == [False, False]  # run on: both get their first token in time
    assert settled[1].ttft == pytest.approx(10.1 - 5.0, abs=0.05)
    assert not any(o.finished for o in settled)  # A finishes after the horizon: not a completion


def test_settling_judges_a_late_first_token_as_a_miss():
    plain, settled = _settled(deadline_b=3.5)  # B is due at 8.5 s, while A's prefill still runs
    assert plain[1].missed is None  # at the horizon (8 s) its deadline is still ahead
    assert settled[1].missed is True and settled[1].ttft > 3.5 and settled[0].missed is False
