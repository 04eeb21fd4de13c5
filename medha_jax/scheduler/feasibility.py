"""Which prefills can still make their TTFT deadlines: EDF plus Moore-Hodgson's sacrifice rule.

  jobs [(deadline, remaining seconds, item[, rank])] + now + prefill share r + margin
    -> sorted by deadline (EDF, preemptive, one server at rate r)
    -> walk the order accumulating finish times; whenever the job just added would finish past
       its deadline, sacrifice jobs admitted so far until it fits: the highest rank first (the
       least important class; rank 0 by default), and within a rank the one with the most
       remaining work (it frees the most time for the rest)
    -> (admitted, sacrificed), both in EDF order
  admitted jobs + the same server --spare_time--> seconds of other work that can run before all of
    them with none made late (the least slack along their EDF order)

With every job released by `now` this is Moore-Hodgson (1968): it minimises the number of late
jobs on one machine (with one rank), and when no job needs to be sacrificed the EDF order meets every deadline
(Liu & Layland), so nothing is given up while the load can be served. Jobs arriving later are
handled by calling it again (the scheduler does every iteration). `margin` is paid once, before
the first job (the iteration already running); `inflate` scales every remaining time (the
runtime predictor's error). Pure Python, no JAX.
"""

from __future__ import annotations

import heapq
import operator
from collections.abc import Iterable

_deadline = operator.itemgetter(0)


def sacrifice(jobs: Iterable[tuple], now: float, *, rate: float = 1.0, margin: float = 0.0,
              inflate: float = 1.0) -> tuple[list, list]:
    """(admitted items, sacrificed items), each in deadline order; see the module docstring."""
    if not rate > 0:
        raise ValueError(f"rate must be > 0, got {rate!r}")
    scale = inflate / rate
    order = sorted(jobs, key=_deadline)
    ranked = any(len(j) > 3 and j[3] for j in order)  # else every rank is 0: entries without it compare faster
    t = now + margin
    heap: list[tuple] = []  # (-rank, -duration, position in order), or (-duration, position) unranked
    for i, job in enumerate(order):  # a feasible load costs this one pass, and no heap
        dur = job[1] * scale
        t += dur
        heap.append((-(job[3] if len(job) > 3 else 0), -dur, i) if ranked else (-dur, i))
        if t > job[0]:
            break
    else:
        return [j[2] for j in order], []
    heapq.heapify(heap)  # the first overrun (job i): sacrifice from here on
    dropped: set[int] = set()
    while True:
        while t > job[0] and heap:
            e = heapq.heappop(heap)
            t += e[-2]
            dropped.add(e[-1])
        i += 1
        if i == len(order):
            break
        job = order[i]
        dur = job[1] * scale
        t += dur
        heapq.heappush(heap, (-(job[3] if len(job) > 3 else 0), -dur, i) if ranked else (-dur, i))
    return ([order[i][2] for i in range(len(order)) if i not in dropped],
            [order[i][2] for i in sorted(dropped)])


def spare_time(jobs: Iterable[tuple], now: float, *, rate: float = 1.0, margin: float = 0.0,
               inflate: float = 1.0) -> float:
    """Wall seconds by which every job's EDF finish (as `sacrifice` computes it) could move later
    with each still on time: the least slack along the deadline order; inf with no jobs, 0 when
    one is already late."""
    if not rate > 0:
        raise ValueError(f"rate must be > 0, got {rate!r}")
    scale = inflate / rate
    t = now + margin
    spare = float("inf")
    for job in sorted(jobs, key=_deadline):
        t += job[1] * scale
        spare = min(spare, job[0] - t)
    return max(spare, 0.0)
