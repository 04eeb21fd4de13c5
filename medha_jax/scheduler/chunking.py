"""Adaptive chunk size: the prefill chunk that fits a time budget, as large as pays.

  time_of(n) (the batch's predicted seconds with an n-token chunk added) + budget
  --largest_chunk: binary search over {multiples of chunk_granularity in [min_chunk, max_chunk]}
                   + the exact tail--> (n, predicted seconds), or (0, 0.0) when nothing fits
  --budget_chunk: n, or the whole multiple of `period` below it when that one's tokens per
                  second of batch time are at least n's (not for the prompt's last chunk)

Used by the time-budget packer (Algorithm 2) and the prefill-time cache (Algorithm 3), so both
make the same choice (`budget_chunk`). Candidates are the multiples of `chunk_granularity` from
`min_chunk` up to min(max_chunk, limit), plus `limit` itself when it is the request's remainder
(the last chunk is exact) or when there is no time budget (batch mode: the token cap's room,
filled as FCFS fills it). Assumes time_of never decreases with n, except possibly where n reaches
a multiple of `period` (the XLA attention runs a chunk's multiples of 128 tokens in wide tiles and the rest in
narrow ones, so 128 tokens can cost less than 96): then the search first finds the largest
multiple of `period` that fits (times of those grow with n), and the answer lies below the next
one, where times grow again. The search stops early at a candidate within `accept_within` of the
budget. Pure Python.
"""

from __future__ import annotations

import math
from collections.abc import Callable


def largest_chunk(time_of: Callable[[int], float], remaining: int, budget: float, *, granularity: int,
                  min_chunk: int, max_chunk: int, accept_within: float, limit: int | None = None,
                  period: int = 0) -> tuple[int, float]:
    """Largest candidate n <= min(remaining, limit) with time_of(n) <= budget."""
    cap = remaining if limit is None else min(remaining, limit)
    if cap <= 0 or budget <= 0.0:
        return 0, 0.0
    # cap itself is a candidate where it is not a multiple of granularity: as the prompt's last
    # chunk, and with no time budget (batch mode) as the room the token cap leaves, filled as FCFS
    # fills it: the batch runs padded to its token bucket anyway, so rounding down to a multiple
    # would only leave slots of it empty (16 x 512-token prompts under a 512-token cap: chunks of
    # 480 beside the decodes where FCFS fills 511, and different batches from FCFS's)
    exact_tail = (cap == remaining or budget == math.inf) and cap <= max_chunk and (cap % granularity or cap < min_chunk)
    kmin = min_chunk // granularity
    kmax = min(max_chunk, cap) // granularity
    count = max(0, kmax - kmin + 1)
    total = count + (1 if exact_tail else 0)
    if total == 0:
        return 0, 0.0

    def size(i: int) -> int:
        return (kmin + i) * granularity if i < count else cap

    # Fast path: the biggest candidate fits (short prompts, empty batches).
    n = size(total - 1)
    t = time_of(n)
    if t <= budget:
        return n, t
    floor = budget * (1.0 - accept_within)
    best, best_t = 0, 0.0

    def search(lo: int, hi: int, stride: int = 1):
        """Largest fitting index among lo, lo + stride, ..., <= hi (times grow along them);
        None when none fits; stops early at one within accept_within of the budget."""
        nonlocal best, best_t
        found = None
        a, b = 0, (hi - lo) // stride
        while a <= b:
            mid = (a + b) // 2
            i = lo + mid * stride
            t = time_of(size(i))
            if t <= budget:
                best, best_t, found = size(i), t, i
                if t >= floor:
                    return i, True
                a = mid + 1
            else:
                b = mid - 1
        return found, False

    hi = total - 2  # largest index still possibly fitting
    step = period // granularity if period and period % granularity == 0 else 0
    if step > 1 and hi >= 0:
        first = -kmin % step  # index of the smallest candidate that is a multiple of period
        if first <= hi:
            i, done = search(first, hi, step)
            if done:
                return best, best_t
            # every candidate from the next multiple on costs at least as much as that multiple,
            # so the answer is below it, where times grow with n
            search(*((0, first - 1) if i is None else (i + 1, min(hi, i + step - 1))))
            return best, best_t
    search(0, hi)
    return best, best_t


def budget_chunk(time_of: Callable[[int], float], remaining: int, budget: float, *, period: int = 0,
                 **kw) -> tuple[int, float]:
    """`largest_chunk`, cut back to its whole multiples of `period` when those give at least as
    many tokens per second of batch time. Where the tail past a multiple of period runs in narrow
    attention tiles (the XLA backend: 160 tokens = one 128-query tile + one 32-query tile, each
    walking every cached key), the largest chunk that fits can cost more per token than the
    whole tiles inside it: timed alone at the convoy benchmark's shapes, 160 tokens over 8K-24K
    cached keys cost 1.05-1.21x what 128 tokens cost per token (two runs; not at 30K). The prompt
    then advances by whole tiles and only its last chunk (exact, never cut) runs a narrow tile; a
    fixed cost per iteration (decodes beside the chunk) keeps the larger chunk where it outweighs
    the narrow tile's. The convoy's 32,704-token prompt under a 0.18 s budget: 127 chunks instead
    of 105 and 0.95x the device time (two runs: 0.946x, 0.951x; `benchmarks/chunk_schedule_cost.py`).
    The simulator's analytic devices have no tiles (period 0): unchanged. With no time budget
    (batch mode) n is the token cap's room and is kept whole: the batch runs padded to its token
    bucket whatever the chunk's tiles."""
    n, t = largest_chunk(time_of, remaining, budget, period=period, **kw)
    if period and n > period and n % period and n < remaining and budget < math.inf:  # batch mode: the cap's room
        m = n - n % period
        tm = time_of(m)
        if m * t >= n * tm:  # m / tm >= n / t
            return m, tm
    return n, t
