"""Liveness under a KV pool that holds only a few prompts: every policy finishes every request.

A pool of 12 pages of 8 tokens and prompts of 20-30 tokens with a 16-token iteration cap: the
packers admit several prompts' first chunks, and then the pool is full of partial prefills that
each need another page. A running prefill may preempt only lower-priority partial prefills; when
keys tie (slo and edf give every prompt here the same deadline floor), admission order breaks the
tie, so the oldest can always take pages from the newest. Before that rule, slo stalled with six
partial prefills holding every page and none allowed to preempt another, until the deadlines had
passed and the late requests' keys moved (nothing runs meanwhile: an empty batch with requests
unfinished and nothing in flight is a stall here)."""

import random

import pytest

from factories import make_requests, make_scheduler, sample_all
from medha_jax.scheduler import RuntimePredictor

POLICIES = ["fcfs", "srpt", "edf", "lrs", "lars", "slo"]


def _run(policy: str, lens: list[int], arrivals: list[float], num_pages: int, page_size: int, cap: int) -> int:
    kw = {} if policy in ("fcfs", "srpt") else {"predictor": RuntimePredictor({"const": 1e-3, "tokens": 1e-3})}
    s = make_scheduler(policy, num_pages=num_pages, page_size=page_size, max_num_batched_tokens=cap, **kw)
    pending = sorted(zip(arrivals, make_requests(len(lens), lens, max_tokens=4, arrival=arrivals)), key=lambda x: x[0])
    now, idle, iterations = 0.0, 0, 0
    while pending or s.has_unfinished:
        while pending and pending[0][0] <= now:
            s.add_request(pending.pop(0)[1])
        batch = s.schedule(now)
        iterations += 1
        idle = 0 if batch.seqs else idle + 1
        assert idle < 3 or pending, f"{policy}: no progress for 3 iterations with {s.num_running} running"
        assert iterations < 5000, f"{policy}: did not finish"
        now += 0.01
        sample_all(s, batch, now)
    assert s.kv.num_free_pages == num_pages  # everything given back
    return iterations


@pytest.mark.parametrize("policy", POLICIES)
def test_equal_deadlines_on_a_full_pool_still_progress(policy):
    _run(policy, [20, 25, 30, 22, 28, 24], [0.0] * 6, num_pages=12, page_size=8, cap=16)


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("seed", range(4))
def test_random_small_pools_finish_every_request(policy, seed):
    rng = random.Random(seed)
    n = rng.randint(4, 10)
    page_size = rng.choice([4, 8, 16])
    num_pages = rng.randint(40, 64) // page_size * 4  # a handful of prompts' worth of KV
    longest = num_pages * page_size - 8  # every request fits alone (prompt + 4 new tokens)
    lens = [rng.randint(8, min(48, longest)) for _ in range(n)]
    arrivals = [rng.choice([0.0, 0.0, rng.uniform(0, 0.1)]) for _ in range(n)]
    _run(policy, lens, arrivals, num_pages=num_pages, page_size=page_size, cap=rng.choice([8, 16, 32]))
