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
runtime predictor's error).

With one rank, a job late even alone (started at now + margin) is the one sacrificed when it is
added, and nothing else: everything admitted before it finishes by an earlier deadline, so all of
it together is shorter than this job, which is therefore the longest. The walk sets such a job
aside without the heap (overload, where most jobs are such, then costs a comparison per job);
the rest of the walk is the same up to the rounding of the finish times it no longer adds and
removes (it only sets aside jobs late by more than LATE_ALONE_TOL of their deadline). Pure
Python, no JAX.
"""

from __future__ import annotations

import heapq
import math
import operator
from collections.abc import Iterable

_deadline = operator.itemgetter(0)
_rank = operator.itemgetter(3)

LATE_ALONE_TOL = 1e-9
"""Relative margin by which a job must be late alone to be set aside before the heap: far above
the rounding of the walk's running finish time, so the heap would have dropped it too."""


def sacrifice(jobs: Iterable[tuple], now: float, *, rate: float = 1.0, margin: float = 0.0,
              inflate: float = 1.0) -> tuple[list, list]:
    """(admitted items, sacrificed items), each in deadline order; see the module docstring."""
    if not rate > 0:
        raise ValueError(f"rate must be > 0, got {rate!r}")
    scale = inflate / rate
    order = sorted(jobs, key=_deadline)
    t = now + margin
    for i, job in enumerate(order):  # a feasible load costs this one pass, and no heap
        t += job[1] * scale
        if t > job[0]:
            break
    else:
        return [j[2] for j in order], []
    # the first overrun (job i): sacrifice from here on, the heap holding the jobs admitted so far
    try:
        ranked = any(map(_rank, order))
    except IndexError:  # some jobs carry no rank: theirs is 0
        ranked = any(len(j) > 3 and j[3] for j in order)
    dropped = _drop_ranked(order, i, t, scale) if ranked else _drop(order, i, t, scale, now + margin)
    return ([j[2] for k, j in enumerate(order) if k not in dropped],
            [order[k][2] for k in sorted(dropped)])


def late_alone(deadline: float, duration: float, start: float) -> bool:
    """Whether a job taking `duration` seconds (its work x the scan's scale) due at `deadline` is
    late even alone from `start` by more than LATE_ALONE_TOL: `sacrifice` with one rank sets such a
    job aside and nothing else for it, so a caller may set it aside without the scan (`_drop`)."""
    return start + duration > deadline * (1.0 + LATE_ALONE_TOL) + LATE_ALONE_TOL


def late_alone_scale(deadline: float, work: float, start: float) -> float:
    """The time scale (inflate / rate) above which `sacrifice` with one rank sets a job of `work`
    seconds due at `deadline` aside at once when the walk starts at `start`, or at any later start
    (a job that waits only gets later): `_drop`'s late-alone rule solved for the scale, plus a
    relative 1e-9 so that the rule, computed the other way round, agrees up to rounding. inf for
    a job with no work (it is late alone at no scale)."""
    if not work > 0:
        return math.inf
    x = (deadline * (1.0 + LATE_ALONE_TOL) + LATE_ALONE_TOL - start) / work
    return x + 1e-9 * (abs(x) + 1.0)


def _drop(order: list[tuple], i: int, t: float, scale: float, start: float) -> set[int]:
    """Moore-Hodgson from the first overrun (job i, finishing at t) with one rank: whenever the
    job just added finishes late, the longest admitted job goes; a job late even alone from
    `start` goes at once (module docstring). Heap: (-duration, position)."""
    heap = [(-(order[k][1] * scale), k) for k in range(i + 1)]
    heapq.heapify(heap)
    pop, push = heapq.heappop, heapq.heappush
    dropped: set[int] = set()
    add = dropped.add
    deadline, n = order[i][0], len(order)
    tol = 1.0 + LATE_ALONE_TOL
    while True:
        while t > deadline and heap:
            e = pop(heap)
            t += e[0]
            add(e[1])
        i += 1
        if i == n:
            return dropped
        deadline, work = order[i][0], order[i][1]
        dur = work * scale
        if start + dur > deadline * tol + LATE_ALONE_TOL:  # late even alone (`late_alone`): it would be the one to go
            add(i)
            deadline = math.inf  # nothing was added: nothing to pop
            continue
        t += dur
        push(heap, (-dur, i))


def _drop_ranked(order: list[tuple], i: int, t: float, scale: float) -> set[int]:
    """`_drop` with ranks: the highest rank goes first, the longest within it.
    Heap: (-rank, -duration, position)."""
    heap = [(-(j[3] if len(j) > 3 else 0), -(j[1] * scale), k) for k, j in enumerate(order[: i + 1])]
    heapq.heapify(heap)
    pop, push = heapq.heappop, heapq.heappush
    dropped: set[int] = set()
    job, n = order[i], len(order)
    while True:
        while t > job[0] and heap:
            e = pop(heap)
            t += e[1]
            dropped.add(e[2])
        i += 1
        if i == n:
            return dropped
        job = order[i]
        dur = job[1] * scale
        t += dur
        push(heap, (-(job[3] if len(job) > 3 else 0), -dur, i))


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
