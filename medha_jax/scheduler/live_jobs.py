"""`LiveJobs`: slo's waiting requests that may still make their TTFT deadlines, as feasibility-scan
jobs kept up to date between iterations instead of rebuilt in each.

  SLOPolicy.on_waiting ----add(request, job, give_up_at)----> {request: job}, in arrival order,
                                                             + a heap of give-up times
  SLOPolicy.on_leave_waiting / gives one up ----remove(request)
  SLOPolicy.candidates: due(now) ----> the requests whose give-up time has come (the policy checks
                                       each exactly; one still in time gets a time again:
                                       `schedule_give_up`)
                        wake(scale, start) --> dormant jobs that may no longer be late alone
                                       become active again (all of them if `start` went back)
                        jobs() ------> the active jobs, in the order the requests were added (`sacrifice`)
                        sleep(request, threshold, start) <-- an active job the scan found late even
                                       alone by a clear margin turns dormant
                        dormant_in_order() --> the dormant jobs in deadline order (set aside: the
                                       candidate order merges them in)
                        set_job(request, job) <-- a request set aside (or let back) gets the job
                                       with its grown (or plain) estimate (`SLOPolicy._regrow`)

A job is (deadline, remaining seconds, request, priority class) and stays fixed while its
request waits: a waiting request's estimate does not change (`SLOPolicy.candidates`). Its
give-up time is when it would be late even alone at full speed (deadline - fastest x estimate):
looking only at the heap's top makes finding the hopeless O(those that are) per iteration, not
O(waiting). Heap entries of removed requests are dropped when they surface (or all at once when
they outnumber the live ones).

Dormant jobs: in overload most live jobs are late even alone at this iteration's prefill share
(`feasibility`: with one rank such a job is set aside and changes nothing for the others), and
they stay so while the scan's start (now + margin) does not go back and its time scale (inflate /
share) stays above the job's threshold (the scale at which it would fit alone, from the start it
was found late at): a job that waits only gets later. A dormant job is left out of `jobs()` (the
scan) until `wake` finds the scale at or below its threshold (a max-heap of thresholds: O(those
that wake) per iteration, not O(live)). Pure Python, no JAX.
"""

from __future__ import annotations

import bisect
import heapq
import math

from medha_jax.request import Request

GIVE_UP_EPS = 1e-6
"""Seconds before its give-up time at which a request is handed to the exact check: the time is
computed as deadline - fastest x estimate, the check as deadline < now + fastest x estimate, and
the two round differently."""


class LiveJobs:
    __slots__ = ("_jobs", "_active", "_heap", "_entry", "_seq", "_added", "_dormant", "_wake_heap", "_dormant_order",
                 "_dormant_start")

    def __init__(self):
        self._jobs: dict[Request, tuple] = {}  # every live job
        self._active: dict[Request, tuple] = {}  # those not dormant, in the order added
        self._heap: list[tuple[float, int, Request]] = []  # (give-up time, seq, request)
        self._entry: dict[Request, int] = {}  # request -> the seq of its live heap entry
        self._added: dict[Request, int] = {}  # request -> when it was added (its place in the order)
        self._seq = 0
        self._dormant: dict[Request, int] = {}  # dormant request -> the seq of its wake entry
        self._wake_heap: list[tuple[float, int, Request]] = []  # (-threshold, seq, request): highest first
        self._dormant_order: list[tuple[float, int, Request]] = []  # (deadline, when added, request), sorted
        self._dormant_start = -math.inf  # the latest start a dormant job was found late from

    def __len__(self) -> int:
        return len(self._jobs)

    def __contains__(self, request: Request) -> bool:
        return request in self._jobs

    def __iter__(self):
        return iter(self._jobs)

    def add(self, request: Request, job: tuple, give_up_at: float) -> None:
        """`request` waits (again) with `job`, hopeless from `give_up_at` on; a request already
        here keeps its place in the order and gets the new job and time."""
        woke = request in self._dormant
        if woke:
            self._wake_one(request)
        elif request not in self._jobs:
            self._added[request] = self._seq + 1
        self._jobs[request] = self._active[request] = job
        if woke:
            self._sort_active()
        self.schedule_give_up(request, give_up_at)

    def schedule_give_up(self, request: Request, give_up_at: float) -> None:
        self._seq += 1
        self._entry[request] = self._seq
        heapq.heappush(self._heap, (give_up_at, self._seq, request))
        if len(self._heap) > 2 * len(self._jobs) + 64:  # mostly stale entries: rebuild
            self._heap = [e for e in self._heap if self._entry.get(e[2]) == e[1]]
            heapq.heapify(self._heap)

    def remove(self, request: Request) -> None:
        if request in self._dormant:
            self._wake_one(request)
        if self._jobs.pop(request, None) is not None:
            self._entry.pop(request, None)  # gone already if `due` handed it out
            del self._added[request]
            self._active.pop(request, None)

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
        """The active jobs (not dormant), in the order added."""
        return list(self._active.values())

    def all_jobs(self) -> list[tuple]:
        """Every live job, dormant ones included, in the order added."""
        return list(self._jobs.values())

    def job(self, request: Request) -> tuple:
        return self._jobs[request]

    def set_job(self, request: Request, job: tuple) -> None:
        """A new job for a request here (set aside or let back), in the same place; a dormant one
        wakes (its threshold was for the old job)."""
        woke = request in self._dormant
        if woke:
            self._wake_one(request)
        self._jobs[request] = self._active[request] = job
        if woke:
            self._sort_active()

    # ---- dormant jobs ----------------------------------------------------------------------
    @property
    def num_dormant(self) -> int:
        return len(self._dormant)

    def dormant(self):
        """The dormant requests (a view)."""
        return self._dormant.keys()

    def sleep(self, request: Request, threshold: float, start: float) -> None:
        """`request`'s job (active) is late even alone from `start` at every scale above
        `threshold` and every later start: leave it out of `jobs()` until `wake` says otherwise."""
        job = self._active.pop(request)
        self._seq += 1
        self._dormant[request] = self._seq
        heapq.heappush(self._wake_heap, (-threshold, self._seq, request))
        bisect.insort(self._dormant_order, (job[0], self._added[request], request))  # ties: the order added
        if start > self._dormant_start:
            self._dormant_start = start
        if len(self._wake_heap) > 2 * len(self._dormant) + 64:  # mostly stale entries: rebuild
            self._wake_heap = [e for e in self._wake_heap if self._dormant.get(e[2]) == e[1]]
            heapq.heapify(self._wake_heap)

    def wake(self, scale: float, start: float) -> None:
        """Dormant jobs whose threshold is at or above `scale` become active again, and every
        one if `start` is before the latest start one was found late from (the margin shrank)."""
        if not self._dormant:
            return
        if start < self._dormant_start:
            self.wake_all()
            return
        heap, dormant, woke = self._wake_heap, self._dormant, False
        while heap and -heap[0][0] >= scale:
            _, seq, r = heapq.heappop(heap)
            if dormant.get(r) == seq:
                self._wake_one(r)
                self._active[r] = self._jobs[r]
                woke = True
        if woke:
            self._sort_active()

    def wake_all(self) -> None:
        if self._dormant:
            self._dormant.clear()
            self._wake_heap.clear()
            self._dormant_order.clear()
            self._dormant_start = -math.inf
            self._active = {r: self._jobs[r] for r in self._jobs}

    def dormant_in_order(self) -> list[tuple[float, int, Request]]:
        """(deadline, when added, request) of every dormant job, by deadline: a copy (the packer takes
        requests out of the queue while it walks the candidate order)."""
        return self._dormant_order.copy()

    def _wake_one(self, request: Request) -> None:
        """Out of the dormant set (its heap entry goes stale); the caller puts it back in `_active`."""
        del self._dormant[request]
        order = self._dormant_order
        i = bisect.bisect_left(order, (self._jobs[request][0], self._added[request]))
        del order[i]
        if not self._dormant:
            self._wake_heap.clear()
            self._dormant_start = -math.inf

    def _sort_active(self) -> None:
        added = self._added
        self._active = dict(sorted(self._active.items(), key=lambda e: added[e[0]]))
