"""Which prefills can still make their TTFT deadlines: EDF plus Moore-Hodgson's sacrifice rule.

  jobs [(deadline, remaining seconds, item)] + now + prefill share r + margin
    -> sorted by deadline (EDF, preemptive, one server at rate r)
    -> walk the order accumulating finish times; whenever the job just added would finish past
       its deadline, sacrifice the job with the most remaining work among those admitted so far
       (it frees the most time for the rest)
    -> (admitted in EDF order, sacrificed)

With every job released by `now` this is Moore-Hodgson (1968): it minimises the number of late
jobs on one machine, and when no job needs to be sacrificed the EDF order meets every deadline
(Liu & Layland), so nothing is given up while the load can be served. Jobs arriving later are
handled by calling it again (the scheduler does every iteration). `margin` is paid once, before
the first job (the iteration already running); `inflate` scales every remaining time (the
runtime predictor's error). Pure Python, no JAX.
"""

from __future__ import annotations

import heapq
from collections.abc import Hashable, Iterable


def sacrifice(jobs: Iterable[tuple[float, float, Hashable]], now: float, *, rate: float = 1.0,
              margin: float = 0.0, inflate: float = 1.0) -> tuple[list, set]:
    """(admitted items in deadline order, sacrificed items); see the module docstring."""
    if not rate > 0:
        raise ValueError(f"rate must be > 0, got {rate!r}")
    scale = inflate / rate
    order = sorted(jobs, key=lambda j: j[0])
    t = now + margin
    heap: list[tuple[float, int]] = []  # (-duration, position in order)
    dropped: set[int] = set()
    for i, (deadline, remaining, _) in enumerate(order):
        dur = remaining * scale
        t += dur
        heapq.heappush(heap, (-dur, i))
        if t > deadline:
            neg, j = heapq.heappop(heap)
            t += neg
            dropped.add(j)
    admitted = [order[i][2] for i in range(len(order)) if i not in dropped]
    return admitted, {order[i][2] for i in dropped}
