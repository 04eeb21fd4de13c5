"""Adaptive chunk size: the largest prefill chunk whose predicted batch time fits a budget.

  time_of(n) (the batch's predicted seconds with an n-token chunk added) + budget
  --binary search over {multiples of chunk_granularity in [min_chunk, max_chunk]} + the exact tail-->
  (n, predicted seconds), or (0, 0.0) when nothing fits

Used by the time-budget packer (Algorithm 2) and the prefill-time cache (Algorithm 3), so both
make the same choice. Candidates are the multiples of `chunk_granularity` from `min_chunk` up to
min(max_chunk, limit), plus `limit` itself when it is the request's remainder (the last chunk is
exact). Assumes time_of never decreases with n (the predictor's coefficients are >= 0). The search
stops early at a candidate within `accept_within` of the budget. Pure Python.
"""

from __future__ import annotations

from collections.abc import Callable


def largest_chunk(time_of: Callable[[int], float], remaining: int, budget: float, *, granularity: int,
                  min_chunk: int, max_chunk: int, accept_within: float, limit: int | None = None,
                  ) -> tuple[int, float]:
    """Largest candidate n <= min(remaining, limit) with time_of(n) <= budget."""
    cap = remaining if limit is None else min(remaining, limit)
    if cap <= 0 or budget <= 0.0:
        return 0, 0.0
    exact_tail = cap == remaining and cap <= max_chunk and (cap % granularity or cap < min_chunk)
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
    lo, hi = 0, total - 2  # hi: largest index still possibly fitting
    best, best_t = 0, 0.0
    while lo <= hi:
        mid = (lo + hi) // 2
        n = size(mid)
        t = time_of(n)
        if t <= budget:
            best, best_t = n, t
            if t >= floor:
                break
            lo = mid + 1
        else:
            hi = mid - 1
    return best, best_t
