"""The TPOT bound's premises and arithmetic (medha_jax/sim/tpot_bound.py): every tick of the analytic
device costs at least what the bound charges it, the interval selection is the heaviest disjoint
set, and a window with more work than time is reported infeasible, with the short misses it allows."""

from __future__ import annotations

import itertools
import random

from medha_jax.sim.profiles import load_profile
from medha_jax.sim.tpot_bound import Request, TickCosts, disjoint_ticks, window_bound

A100 = "llama3-8b-a100x16-tp8-spp2"


def test_every_tick_costs_at_least_what_the_bound_charges():
    perf = load_profile(A100).perf
    c = TickCosts.of(perf)
    rng = random.Random(0)
    for _ in range(300):  # decodes and chunks at random contexts, the entering batch of a tick
        seqs = [(1, rng.randrange(1, 200_000)) for _ in range(rng.randrange(0, 64))]
        seqs += [(rng.randrange(2, 8192), rng.randrange(0, 1_000_000)) for _ in range(rng.randrange(0, 3))]
        if not seqs:
            continue
        tokens = sum(q for q, _ in seqs)
        pairs = sum(q * kv + q * (q + 1) // 2 for q, kv in seqs if q > 1)
        floor = c.fixed + max(c.weights, tokens * c.linear) + tokens * c.per_token + pairs * c.per_pair
        assert perf.tick_and_latency(seqs)[0] >= floor * (1 - 1e-12)


def test_a_prompts_prefill_work_does_not_depend_on_its_chunks():
    c = TickCosts.of(load_profile(A100).perf)
    n, chunk = 10_000, 768
    pieces = [(min(chunk, n - s), s) for s in range(0, n, chunk)]
    chunked = sum(q * c.per_token + (q * kv + q * (q + 1) // 2) * c.per_pair for q, kv in pieces)
    assert abs(chunked - c.prefill(n)) <= 1e-9 * c.prefill(n)


def test_disjoint_ticks_is_the_heaviest_disjoint_set():
    rng = random.Random(1)
    for _ in range(200):
        iv = []
        for _ in range(rng.randrange(1, 9)):
            s = rng.uniform(0, 20)
            iv.append((s, s + rng.uniform(0.1, 8), rng.randrange(1, 50)))
        best = max(sum(w for _, _, w in sub) for r in range(len(iv) + 1) for sub in itertools.combinations(iv, r)
                   if all(a[1] < b[0] or b[1] < a[0] for a, b in itertools.combinations(sub, 2)))
        assert sum(disjoint_ticks(iv)) == best


def test_a_window_with_more_work_than_time_is_infeasible_and_short_misses_relax_it():
    c = TickCosts(fixed=0.01, weights=0.0, linear=0.0, per_token=1e-4, per_pair=0.0)
    # a long prompt of 50,000 tokens (5 s of work) due 10 s after it arrives; shorts of 101 output tokens
    # (200 ticks at depth 2: 2 s of fixed time each) in intervals of 3 s (0.5 s deadline + 100 x 25 ms):
    # three disjoint ones, and a fourth overlapping the third, which shares its ticks
    reqs = [Request(0.0, 50_000, 2, 10.0)] + [Request(0.1 + 3.2 * i, 10, 101, 0.5) for i in range(3)]
    reqs.append(Request(6.6, 10, 101, 0.5))
    is_long = [True] + [False] * 4
    w = window_bound(reqs, is_long, c, 0.025, 2, 0.0, 10.0)
    assert w.longs == (0,) and w.ticks == 600
    assert abs(w.need - (6.0 + 5.0 + 4 * 10 * 1e-4)) < 1e-9  # over the 10 s window
    assert w.max_short_misses == 0  # one short missing its deadline may decode elsewhere: 9.003 s fits
    longer = window_bound(reqs, is_long, c, 0.025, 2, 0.0, 10.0 - 1e-9 + 2.0)  # 12 s: nothing shown
    assert longer.max_short_misses == -1


def test_no_long_request_in_the_window_is_never_infeasible():
    c = TickCosts(fixed=1.0, weights=0.0, linear=0.0, per_token=1.0, per_pair=0.0)
    w = window_bound([Request(0.0, 10, 50, 0.5)], [False], c, 0.05, 1, 0.0, 100.0)
    assert w.longs == () and w.max_short_misses == -1
