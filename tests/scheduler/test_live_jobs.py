"""slo keeps its feasibility-scan jobs between iterations (`LiveJobs`): after every scan they must
be what a scan built from scratch would use, and no request left live may be hopeless."""

from __future__ import annotations

import random

import pytest

from medha_jax.kv_cache_manager import KVCacheManager
from medha_jax.request import Request
from medha_jax.sampling_params import SamplingParams
from medha_jax.scheduler import SchedulerConfig, make_scheduler
from medha_jax.scheduler.live_jobs import LiveJobs
from medha_jax.scheduler.predictor import RuntimePredictor

from tests.scheduler.factories import sample_all


def fresh_jobs(pol) -> list[tuple]:
    """The live jobs as a scan from scratch builds them: arrival order, estimates grown while set aside."""
    grow = 1.0 + pol.REJOIN
    out = []
    for r in pol._live:
        i = pol._info[r]
        left = i[2] - i[4]
        out.append((r.arrival_time + i[0], left * grow if r in pol.set_aside else left, r, r.priority_class))
    return out


@pytest.mark.parametrize("rescue", [1.0, 2.0])
@pytest.mark.parametrize("seed", range(3))
def test_kept_jobs_are_the_fresh_ones_and_none_is_hopeless(seed, rescue):
    rng = random.Random(seed)
    kv = KVCacheManager(4000, page_size=16)
    sched = make_scheduler(SchedulerConfig(policy="slo", t_target=0.02, deadline_min=0.05, rescue_stretch=rescue,
                                           max_num_batched_tokens=256, chunk_granularity=16, min_chunk=16),
                           kv, RuntimePredictor({"const": 1e-3, "tokens": 1e-4}))
    pol = sched.policy
    now, given_up, aside = 0.0, 0, 0
    for n in range(400):
        if rng.random() < 0.5:
            length = rng.choice([rng.randint(1, 60), rng.randint(60, 600), rng.randint(600, 3000)])
            sched.add_request(Request(f"r{n}", [5] * length, SamplingParams(max_tokens=rng.randint(1, 20)),
                                      arrival_time=now, priority_class=rng.choice([0, 0, 1]),
                                      ttft_deadline=rng.choice([None, 0.1, 1.0])))
        batch = sched.schedule(now)
        assert pol._live.jobs() == fresh_jobs(pol)
        fastest = pol.inflate
        for d, _, r, _ in pol._live.jobs():
            i = pol._info[r]
            left = i[2] - i[4]
            assert not (d < now + fastest * left and (
                not pol._ladder or d < now + fastest * pol._fast(r, left, pol._ladder[-1][1]))), r.request_id
        given_up = max(given_up, len(pol._hopeless_order))
        aside += len(pol.set_aside)
        now += 0.02
        sample_all(sched, batch, now)
    assert given_up and aside  # overload: requests were given up and set aside


def test_due_hands_out_each_request_once_and_forgets_removed_ones():
    a, b, c = (Request(x, [1], SamplingParams(), arrival_time=0.0) for x in "abc")
    live = LiveJobs()
    live.add(a, (1.0, 0.5, a, 0), give_up_at=0.5)
    live.add(b, (2.0, 0.5, b, 0), give_up_at=1.5)
    live.add(c, (3.0, 0.5, c, 0), give_up_at=0.2)
    live.remove(c)
    live.add(a, (1.0, 0.6, a, 0), give_up_at=0.4)  # re-added: keeps its place, new time
    assert live.due(0.3) == []
    assert live.due(1.0) == [a]
    assert live.due(1.0) == []  # handed out: not again until given a time
    assert live.jobs() == [(1.0, 0.6, a, 0), (2.0, 0.5, b, 0)]
    assert live.in_order([b, a]) == [a, b]
    live.remove(a)
    assert list(live) == [b] and len(live) == 1 and live.due(10.0) == [b]
