"""`LiveJobs`: slo's waiting requests that may still make their TTFT deadlines, as feasibility-scan
jobs kept up to date between iterations instead of rebuilt in each.

  SLOPolicy.on_waiting ----add(request, job, give_up_at)----> {request: job}, in arrival order,
                                                             + a heap of give-up times
  SLOPolicy.on_leave_waiting / gives one up ----remove(request)
  SLOPolicy.candidates: due(now) ----> the requests whose give-up time has come (the policy checks
                                       each exactly; one still in time gets a time again:
                                       `schedule_give_up`)
                        jobs() ------> the jobs, in the order the requests were added (`sacrifice`)
                        set_job(request, job) <-- a request set aside (or let back) gets the job
                                       with its grown (or plain) estimate (`SLOPolicy._regrow`)

A job is (deadline, remaining seconds, request, priority class) and stays fixed while its
request waits: a waiting request's estimate does not change (`SLOPolicy.candidates`). Its
give-up time is when it would be late even alone at full speed (deadline - fastest x estimate):
looking only at the heap's top makes finding the hopeless O(those that are) per iteration, not
O(waiting). Heap entries of removed requests are dropped when they surface (or all at once when
they outnumber the live ones). Pure Python, no JAX.
"""

from __future__ import annotations

import heapq

from medha_jax.request import Request

GIVE_UP_EPS = 1e-6
"""Seconds before its give-up time at which a request is handed to the exact check: the time is
computed as deadline - fastest x estimate, the check as deadline < now + fastest x estimate, and
the two round differently."""


class LiveJobs:
    __slots__ = ("_jobs", "_heap", "_entry", "_seq", "_added")

    def __init__(self):
        self._jobs: dict[Request, tuple] = {}
        self._heap: list[tuple[float, int, Request]] = []  # (give-up time, seq, request)
        self._entry: dict[Request, int] = {}  # request -> the seq of its live heap entry
        self._added: dict[Request, int] = {}  # request -> when it was added (its place in the order)
        self._seq = 0

    def __len__(self) -> int:
        return len(self._jobs)

    def __contains__(self, request: Request) -> bool:
        return request in self._jobs

    def __iter__(self):
        return iter(self._jobs)

    def add(self, request: Request, job: tuple, give_up_at: float) -> None:
        """`request` waits (again) with `job`, hopeless from `give_up_at` on; a request already
        here keeps its place in the order and gets the new job and time."""
        if request not in self._jobs:
            self._added[request] = self._seq + 1
        self._jobs[request] = job
        self.schedule_give_up(request, give_up_at)

    def schedule_give_up(self, request: Request, give_up_at: float) -> None:
        self._seq += 1
        self._entry[request] = self._seq
        heapq.heappush(self._heap, (give_up_at, self._seq, request))
        if len(self._heap) > 2 * len(self._jobs) + 64:  # mostly stale entries: rebuild
            self._heap = [e for e in self._heap if self._entry.get(e[2]) == e[1]]
            heapq.heapify(self._heap)

    def remove(self, request: Request) -> None:
        if self._jobs.pop(request, None) is not None:
            self._entry.pop(request, None)  # gone already if `due` handed it out
            del self._added[request]

    def in_order(self, requests: list[Request]) -> list[Request]:
        """`requests` (all here) in the order they were added, as `jobs` has them."""
        return sorted(requests, key=self._added.__getitem__)

    def due(self, now: float) -> list[Request]:
        """The live requests whose give-up time is before `now` (+ GIVE_UP_EPS), taken off the
        heap (one still in time must be given a time again: `schedule_give_up`), earliest first."""
        heap, entry, out = self._heap, self._entry, []
        limit = now + GIVE_UP_EPS
        while heap and heap[0][0] < limit:
            _, seq, r = heapq.heappop(heap)
            if entry.get(r) == seq:
                del entry[r]
                out.append(r)
        return out

    def jobs(self) -> list[tuple]:
        return list(self._jobs.values())

    def job(self, request: Request) -> tuple:
        return self._jobs[request]

    def set_job(self, request: Request, job: tuple) -> None:
        """A new job for a request here (set aside or let back), in the same place."""
        self._jobs[request] = job
