"""Priority policies: in which order prefill candidates are considered (lower key first).

  Scheduler: add_request -> on_add; joins/leaves the waiting queue -> on_waiting / on_leave_waiting;
             finish -> on_remove
  packer:    candidates(partials, now) -> lazy best-first iterator over running partial prefills
             and waiting requests (WaitingIndex: no full re-sort per iteration)
  preemption: key(request, now): the largest key is the lowest priority

  fcfs: arrival time.
  srpt: remaining prompt tokens - aging x seconds waited (shortest remaining prefill first, aged).
  edf:  absolute TTFT deadline, arrival + D.
  lrs:  remaining slack s = arrival + D - now - T_remaining (seconds).
  lars: relative slack s / D (Medha's Length-Aware Relative Slack).
  slo:  EDF while every TTFT deadline can still be met; when not, the fewest requests are
        sacrificed (Moore-Hodgson, `feasibility.py`: those with the most remaining work) and go
        after every request that can still make it, in deadline order among themselves, except
        those that fit in the slack of the others' EDF schedule, which go before it. During a
        slow spell of the device, work with ample slack fills only part of the time budget
        (`budget_scale`), so iterations stay short for the requests that arrive meanwhile; a
        batch that completes a prompt takes no more work than still lets that prompt's first
        token meet its deadline at the device's current speed (`finish_budget`).

D is the request's `ttft_deadline` or max(deadline_k * T_prefill(prompt), deadline_min), fixed
when the request arrives; T_prefill and T_remaining come from the prefill-time cache (the total
work w_total of a request is T_prefill(prompt_len)).

Cached prefixes: a request's `num_cached_tokens` (with prefix caching, what the cache held for it
when it arrived, then what it got when last admitted; `Scheduler.add_request`) count as done
while it waits: its remaining work is T(tokens) - T(cached), its derived D is max(deadline_k x
that, deadline_min), and srpt ranks it by its uncached tokens. The estimate is read when the
request joins the waiting queue, so a waiting request's key stays fixed (the index's contract). The paper writes LARS as s / w_total; this
follows the authors' released code and DESIGN.md and divides by D, which equals 1.5 * w_total
for every request whose deadline is derived from its length and above the floor. Every deadline
policy also reports `relative_slack` (the LARS value), which the packer uses for space sharing.
Ties keep the order in which requests joined the queue. Pure Python, no JAX.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import math
from collections.abc import Hashable, Iterator
from operator import itemgetter

from medha_jax.request import Request
from medha_jax.scheduler.feasibility import late_alone, late_alone_scale, sacrifice, spare_time
from medha_jax.scheduler.live_jobs import LiveJobs
from medha_jax.scheduler.predictor import SPELL
from medha_jax.scheduler.waiting_index import WaitingIndex

_first, _second, _fourth = itemgetter(0), itemgetter(1), itemgetter(3)
_class_deadline = itemgetter(0, 1)
_class_deadline_tie = itemgetter(0, 1, 2)
_deadline = itemgetter(1)


class Policy:
    """Base: the scheduler's hooks plus the candidate order; subclasses define the keys.

    A subclass that defines only `key` still works: its waiting requests are then fully sorted
    by key(now) on every `candidates` call (correct for any key, O(n log n)). Defining
    `group_and_key` and `static_key_now` (and `bulk_static_key_now`) switches to the index."""

    name = "base"

    def __init__(self) -> None:
        self._store()

    def _store(self):
        """The waiting queue as this policy keeps it: a WaitingIndex, or a plain dict."""
        store = self.__dict__.get("_waiting_store")
        if store is None:  # created lazily, so subclasses need not call __init__
            indexed = type(self).group_and_key is not Policy.group_and_key
            store = WaitingIndex(self.group_and_key) if indexed else {}
            self.__dict__["_waiting_store"] = store
        return store

    @property
    def index(self) -> WaitingIndex | None:
        store = self._store()
        return store if isinstance(store, WaitingIndex) else None

    def on_add(self, request: Request) -> None:
        """A request joined the scheduler (before it joins the waiting queue)."""

    def on_remove(self, request: Request) -> None:
        """A request left the scheduler (finished or aborted)."""
        self.on_leave_waiting(request)

    def on_waiting(self, request: Request) -> None:
        store = self._store()
        if isinstance(store, WaitingIndex):
            store.add(request)
        else:
            store[request] = None

    def on_leave_waiting(self, request: Request) -> None:
        store = self._store()
        if isinstance(store, WaitingIndex):
            store.discard(request)
        else:
            store.pop(request, None)

    def key(self, request: Request, now: float) -> float:
        raise NotImplementedError

    def on_iteration(self, prefill_share: float, t_target: float, slowdown: float = 1.0, spell: float = 1.0,
                     stretch: float = 1.0) -> None:
        """Before `candidates`: the fraction of this iteration's device time the decodes leave
        to prefills, the iteration's time budget, how much slower than its raw predictions the
        device runs now (the runtime predictor's `slowdown`), how much slower than the
        packer's (corrected) predictions (its `spell_ratio`; time-budget packer only), and how
        far the budget may stretch to save a deadline (`Scheduler.rescue_stretch`)."""

    def budget_scale(self, request: Request, now: float) -> float:
        """The part of the iteration's time budget a prefill chunk of `request` may fill (1: all)."""
        return 1.0

    def finish_budget(self, request: Request, start: float) -> float:
        """The longest predicted batch time, for a batch starting at `start` that completes
        `request`'s prompt, that still lets its first token meet its deadline at the speed the
        device runs now (inf: nothing to keep; the time-budget packer then adds no more work to
        that batch than this allows)."""
        return math.inf

    def group_and_key(self, request: Request) -> tuple[Hashable, float]:
        """(group, static key) of a waiting request; see waiting_index.py."""
        raise NotImplementedError

    def static_key_now(self, group: Hashable, static_key: float, now: float) -> float:
        """A waiting request's priority at `now` from its (group, static key): must equal
        key(request, now)."""
        return static_key

    def bulk_static_key_now(self, groups: list, static_keys: list[float], now: float) -> list[float]:
        """`static_key_now` over lists (one call for many single-request groups)."""
        return static_keys

    def candidates(self, partials: list[Request], now: float) -> Iterator[Request]:
        """Running partial prefills and waiting requests, best first, computed lazily."""
        key, static, bulk = self.key, self.static_key_now, self.bulk_static_key_now
        index = self._store()
        if not isinstance(index, WaitingIndex):  # started work first on equal keys (stable sort)
            return iter(sorted(partials + list(index), key=lambda r: key(r, now)))
        index.flush()
        iters = index.iter_groups(lambda g, k: static(g, k, now), lambda gs, ks: bulk(gs, ks, now))
        if partials:  # first, so that on equal keys started work goes before new work
            iters.insert(0, iter(sorted(((key(r, now), r) for r in partials), key=_first)))
        if not iters:
            return iter(())
        merged = iters[0] if len(iters) == 1 else heapq.merge(*iters, key=_first)
        return map(_second, merged)

    def order(self, requests: list[Request], now: float) -> list[Request]:
        """Any requests sorted best first (tests, tools)."""
        key = self.key
        return sorted(requests, key=lambda r: key(r, now))


class FCFSPolicy(Policy):
    name = "fcfs"

    def key(self, request: Request, now: float) -> float:
        return request.arrival_time

    def group_and_key(self, request: Request) -> tuple[Hashable, float]:
        return 0, request.arrival_time


class SRPTPolicy(Policy):
    """Shortest remaining prefill first, aged: key = remaining tokens - aging * (now - arrival).

    The production-engine alternative to deadlines: short prompts overtake long ones, and a long
    prompt's key falls by `aging` tokens per second it has been in the system, so it is not
    starved. One index group: the key of a waiting request is (prompt + aging * arrival) - aging
    * now, the same shift for all."""

    name = "srpt"

    def __init__(self, aging: float = 2000.0):
        self.aging = aging
        super().__init__()

    def key(self, request: Request, now: float) -> float:
        # the static form's arithmetic, so the index and key() agree to the last bit
        return (_uncached(request) + self.aging * request.arrival_time) - self.aging * now

    def group_and_key(self, request: Request) -> tuple[Hashable, float]:
        return 0, _uncached(request) + self.aging * request.arrival_time

    def static_key_now(self, group: Hashable, static_key: float, now: float) -> float:
        return static_key - self.aging * now

    def bulk_static_key_now(self, groups: list, static_keys: list[float], now: float) -> list[float]:
        a = self.aging * now
        return [k - a for k in static_keys]


def _uncached(request: Request) -> int:
    """Tokens still to compute: those after the computed ones, or, while nothing is computed
    (waiting), those after the cached prefix."""
    return request.num_tokens - (request.num_computed_tokens or request.num_cached_tokens)


class DeadlinePolicy(Policy):
    """Shared bookkeeping for edf / lrs / lars: per-request D and prefill-time estimates."""

    def __init__(self, prefill_cache, deadline_k: float = 1.5, deadline_min: float = 0.5):
        self.cache = prefill_cache
        self.deadline_k = deadline_k
        self.deadline_min = deadline_min
        # request -> [D, num_tokens the estimate is for, T_prefill(num_tokens),
        #             anchor = arrival + D - (T_prefill(num_tokens) - T_cached), T_cached = T_prefill(cached tokens)]
        self._info: dict[Request, list] = {}
        super().__init__()

    def build(self, max_len: int, stretch: float = 1.0) -> None:
        """Engine warm-up: the prefill-time table up to `max_len` tokens (and slo's at every
        stretch of the budget up to `stretch`), so no request pays for simulating it."""
        self.cache.build(max_len)

    def on_add(self, request: Request) -> None:
        cached = self.cache.total_time(request.num_cached_tokens)
        if request.ttft_deadline is not None:
            d = request.ttft_deadline
        else:
            d = max(self.deadline_k * (self.cache.total_time(request.prompt_len) - cached), self.deadline_min)
        if not d > 0:
            d = 1e-9  # a zero-work request with a zero floor: due at once
        t = self.cache.total_time(request.num_tokens)
        self._info[request] = [d, request.num_tokens, t, request.arrival_time + d - t + cached, cached]

    def on_waiting(self, request: Request) -> None:
        info = self._info.get(request)
        if info is not None:  # back in the queue (preempted): the cache may hold more of it now
            cached = self.cache.total_time(request.num_cached_tokens)
            info[3] += cached - info[4]
            info[4] = cached
        super().on_waiting(request)

    def on_remove(self, request: Request) -> None:
        super().on_remove(request)
        self._info.pop(request, None)

    def _fresh(self, request: Request) -> list:
        info = self._info[request]
        n = len(request.prompt_token_ids) + len(request.output_token_ids)
        if info[1] != n:  # output tokens were added (recompute after preemption)
            t = self.cache.total_time(n)
            info[1], info[2], info[3] = n, t, request.arrival_time + info[0] - t + info[4]
        return info

    def deadline(self, request: Request) -> float:
        """D: seconds after arrival by which the first token is due."""
        return self._info[request][0]

    def work(self, request: Request) -> float:
        """w_total: predicted seconds to prefill the prompt alone, less its cached prefix."""
        return self.cache.total_time(request.prompt_len) - self._info[request][4]

    def remaining(self, request: Request) -> float:
        info = self._fresh(request)
        done = request.num_computed_tokens
        if done == 0:
            return info[2] - info[4]
        return max(info[2] - self.cache.total_time(done), 0.0)

    def slack(self, request: Request, now: float) -> float:
        """arrival + D - now - T_remaining, in seconds."""
        info = self._fresh(request)
        done = request.num_computed_tokens
        if done == 0:
            return info[3] - now
        return info[3] - now + min(self.cache.total_time(done), info[2]) - info[4]

    def relative_slack(self, request: Request, now: float) -> float:
        return self.slack(request, now) / self._info[request][0]


class EDFPolicy(DeadlinePolicy):
    name = "edf"

    def key(self, request: Request, now: float) -> float:
        return request.arrival_time + self._info[request][0]

    def group_and_key(self, request: Request) -> tuple[Hashable, float]:
        return 0, request.arrival_time + self._info[request][0]


class LRSPolicy(DeadlinePolicy):
    name = "lrs"

    def key(self, request: Request, now: float) -> float:
        return self.slack(request, now)

    def group_and_key(self, request: Request) -> tuple[Hashable, float]:
        return 0, self._fresh(request)[3]

    def static_key_now(self, group: Hashable, static_key: float, now: float) -> float:
        return static_key - now

    def bulk_static_key_now(self, groups: list, static_keys: list[float], now: float) -> list[float]:
        return [k - now for k in static_keys]


class LARSPolicy(DeadlinePolicy):
    name = "lars"

    def key(self, request: Request, now: float) -> float:
        return self.slack(request, now) / self._info[request][0]

    def group_and_key(self, request: Request) -> tuple[Hashable, float]:
        info = self._fresh(request)
        return info[0], info[3]

    def static_key_now(self, group: Hashable, static_key: float, now: float) -> float:
        return (static_key - now) / group

    def bulk_static_key_now(self, groups: list, static_keys: list[float], now: float) -> list[float]:
        return [(k - now) / g for g, k in zip(groups, static_keys)]


class SLOPolicy(DeadlinePolicy):
    """EDF while every TTFT deadline can be met, Moore-Hodgson's sacrifice once some cannot.

    Each iteration the requests still waiting for their first token are checked in deadline
    order against a server that gives prefills `prefill_share` of its time (what the decodes in
    the batch leave), after a margin of one iteration, with every remaining time inflated by
    `inflate` (predictor error). While all fit, the order is exactly EDF. Otherwise the request
    with the most remaining work in the overrunning prefix is set aside, repeatedly, until the
    rest fit: the fewest deadlines are given up, and short requests are not all made late by one
    long one (EDF's overload cascade). Set-aside requests still run, after the others, in
    deadline order (a more important `priority_class` first: lower is more important), and are the
    first preemption victims; one whose remaining work fits in part of the least slack of the
    admitted EDF schedule runs before it instead (none of the admitted is made late, and a short
    request that missed waits the least it can, not behind a long one due much later). They rejoin
    the EDF order once they fit again with REJOIN more work than estimated. The scan assumes the
    prefill share averaged over recent iterations (SHARE_EMA), not this iteration's: with both, a
    request on the edge of feasibility stays on one side instead of trading places with another
    every iteration. Once the best set-aside
    request has waited more than STARVING x its deadline D, one iteration in round(1 /
    `min_share`) puts it first, so set-aside work always progresses (no starvation, even under a
    saturating stream of short requests) without taking time from requests that can still make
    their deadlines during a passing burst. Requests with a first token (decodes, recomputes after
    preemption) keep their own, already past, deadline: they go first. No space sharing (relative
    slack 0): the order alone decides who waits.

    The prefill share is what the decodes add to an iteration, over the budget less the
    iteration's fixed time (a chunk alone pays that too; counting the decode-only batch's whole
    time, 3.5 of 25 ms on the simulated A100 pair, made the scan see long prompts as late that
    were not). Deadline rescue (`rescue_stretch`; opt-in, off by default): when the scan sets
    requests aside, the same scan with exact estimates at 1.5x, 2x, ... the budget (prefill-time
    tables at those budgets: longer iterations pay their fixed time and each attention tile's walk
    of the keys less often) picks the least stretch at which fewer requests miss; while one does,
    every chunk's budget is stretched by it (`budget_scale`), and the rescue ends once everything
    fits at the budget with REJOIN more work. Decodes then wait up to that many budgets per token:
    the TPOT target is traded for a first token where the scan says that saves one (in the
    simulator it often did not: docs/simulator.md), never in overload (a hopeless request
    waiting), and never past a hard TPOT limit (`Scheduler.rescue_stretch`).

    priority_class: while every deadline can be met it changes nothing (all are met); when some
    cannot, every request of a less important class is given up before any of a more important
    one, and within a class the one with the most remaining work (`feasibility.sacrifice`)."""

    name = "slo"
    SET_ASIDE = 1e12
    """Key offset of a sacrificed request: after every request that can still make its deadline."""
    STARVING = 2.0
    """A set-aside request older than this many of its deadlines D gets the periodic share."""
    CLASS_STEP = 1e9
    """Key step per priority class among set-aside requests (classes clamped to +-100)."""
    SHARE_EMA = 0.1
    """Weight of the newest iteration in the prefill share the feasibility scan assumes: decodes
    come and go every iteration, and an instantaneous share made a borderline request flip
    between admitted and set aside on alternate iterations (two long prefills taking turns, both late)."""
    BORROW_FRACTION = 0.5
    """Of the admitted schedule's least slack, the part late requests may take (the rest covers
    estimates that turn out short)."""
    BORROW_SCAN = 64
    """Set-aside requests looked at per iteration for a place in the admitted schedule's slack."""
    YIELD_SLACK = 10.0
    """A request yields budget during a slow spell only with more than this many iterations
    (t_targets) of slack (`budget_scale`)."""
    RESCUE_STEPS = (1.5, 2.0)
    """Stretches of the budget tried below the allowed one (`rescue_stretch`), least first."""
    REJOIN = 0.05
    """A set-aside request rejoins the EDF order only if it fits with this much more remaining work
    (hysteresis: a request on the edge stays on one side)."""

    def __init__(self, prefill_cache, deadline_k: float = 1.5, deadline_min: float = 0.5,
                 inflate: float = 1.1, min_share: float = 0.1):
        super().__init__(prefill_cache, deadline_k, deadline_min)
        self.inflate, self.min_share = inflate, min_share
        self._share: float | None = None  # EMA of the prefill share (None before the first iteration)
        self._margin = 0.0
        self._slowdown = 1.0  # how much slower than predicted the device runs now, at least 1 (`on_iteration`)
        self._spell = 1.0  # how much slower than the packer's predictions (`on_iteration`)
        self.set_aside: set[Request] = set()
        # left the waiting queue, no first token yet -> (its computed tokens, its remaining estimate then) or None
        self._prefilling: dict[Request, tuple[int, float] | None] = {}
        # The waiting queue in three parts, kept up to date as requests come and go:
        self._live = LiveJobs()  # no first token, may still make its deadline: their scan jobs
        self._grown_by = 1.0 + self.REJOIN  # the factor the set-aside live jobs' estimates carry
        self._classed = 0  # live requests (of any state) with a priority class other than 0
        self._firsts: dict[Request, None] = {}  # with a first token (recompute after preemption)
        self._hopeless: dict[Request, tuple] = {}  # no first token, cannot make its deadline any more -> its entry
        # every given-up request's entry (class, deadline, seq, request, remaining s), sorted; an entry leaves
        # with its request (given up again after a preemption, it comes back with a new seq)
        self._hopeless_order: list[tuple] = []
        self._seq = 0
        self._round, self._iteration = max(1, round(1.0 / min_share)) if min_share > 0 else 0, 0
        self._ladder: list[tuple[float, object]] = []  # (stretch, prefill-time cache at it), ascending, up to the allowed
        self._caches: dict[float, object] = {}  # every stretch's prefill-time cache built so far
        self.rescue = 1.0  # this iteration's stretch of the budget (`candidates`; 1: none)

    def on_iteration(self, prefill_share: float, t_target: float, slowdown: float = 1.0, spell: float = 1.0,
                     stretch: float = 1.0) -> None:
        share = max(prefill_share, 0.05)
        if stretch != (self._ladder[-1][0] if self._ladder else 1.0):
            self._set_ladder(stretch)
        self._slowdown = max(1.0, slowdown)
        self._spell = spell
        self._share = share if self._share is None else self._share + self.SHARE_EMA * (share - self._share)
        self._margin = t_target if t_target < float("inf") else 0.0  # batch mode: no budget
        self._iteration += 1

    def _set_ladder(self, stretch: float) -> None:
        """The stretches a rescue may use now (RESCUE_STEPS below `stretch`, then it), with their
        prefill-time tables (built once per stretch)."""
        steps = [x for x in self.RESCUE_STEPS if x < stretch] + [stretch] if stretch > 1.0 else []
        for x in steps:
            if x not in self._caches:
                self._caches[x] = self.cache.stretched(x)
        self._ladder = [(x, self._caches[x]) for x in steps]
        for r in self._live:  # when each gives up depends on the largest stretch allowed
            i = self._info[r]
            self._live.schedule_give_up(r, self._give_up_at(r, r.arrival_time + i[0], i[2] - i[4]))

    def _give_up_at(self, request: Request, deadline: float, left: float) -> float:
        """When a waiting request with `left` seconds of work would be late even alone at full
        speed (and at the largest stretch of the budget allowed, if any): `candidates` gives it up."""
        t = deadline - self.inflate * left
        if self._ladder:
            t = max(t, deadline - self.inflate * self._fast(request, left, self._ladder[-1][1]))
        return t

    def build(self, max_len: int, stretch: float = 1.0) -> None:
        super().build(max_len, stretch)
        self._set_ladder(stretch)
        for _, cache in self._ladder:
            cache.build(max_len)

    def key(self, request: Request, now: float) -> float:
        d = request.arrival_time + self._info[request][0]
        if request not in self.set_aside and request not in self._hopeless:
            return d
        return d + self.SET_ASIDE + self.CLASS_STEP * max(-100, min(100, request.priority_class))

    def relative_slack(self, request: Request, now: float) -> float:
        return 0.0

    def budget_scale(self, request: Request, now: float) -> float:
        """During a slow spell (the device runs more than SPELL times slower than the packer's
        predictions), a request with more than YIELD_SLACK iterations of slack fills only
        1 / spell of the budget: the iteration stays near its budget in real time, so requests
        arriving meanwhile wait less, and the work that yields can afford it."""
        if self._spell > SPELL and self.slack(request, now) > self.YIELD_SLACK * self._margin:
            return 1.0 / self._spell
        return self.rescue

    def finish_budget(self, request: Request, start: float) -> float:
        """A prompt completing in this batch keeps its deadline: the batch's predicted time, slowed
        by how much slower than the predictions the last iteration ran and by the feasibility
        scan's margin for prediction error (`inflate`), must end by it. Without this, work packed
        after the prompt's last chunk moves its first token past the deadline exactly when the
        device is slow (three shorts in one 4x iteration, all late)."""
        if request.output_token_ids or request not in self._info:  # recompute: its first token is out
            return math.inf
        return (request.arrival_time + self._info[request][0] - start) / (self._spell * self.inflate)

    def on_add(self, request: Request) -> None:
        super().on_add(request)
        if request.priority_class:
            self._classed += 1

    def on_waiting(self, request: Request) -> None:
        self._prefilling.pop(request, None)  # preempted: counted from the queue from now on
        super().on_waiting(request)
        if request.output_token_ids:
            self._firsts[request] = None
            return
        # no output: its token count and so its estimate i[2] - i[4] stay what they are now while it waits
        i = self._info[request]
        d, left = request.arrival_time + i[0], i[2] - i[4]
        job = (d, left * self._grown_by if request in self.set_aside else left, request, request.priority_class)
        self._live.add(request, job, self._give_up_at(request, d, left))

    def on_leave_waiting(self, request: Request) -> None:
        super().on_leave_waiting(request)
        self._live.remove(request)
        self._firsts.pop(request, None)
        entry = self._hopeless.pop(request, None)
        if entry is not None:  # seqs are unique: no comparison reaches the request
            order = self._hopeless_order
            i = bisect.bisect_left(order, entry)
            assert order[i] is entry, "the given-up order lost an entry"
            del order[i]
        if request in self._info and not request.output_token_ids:
            self._prefilling[request] = None

    def on_remove(self, request: Request) -> None:
        super().on_remove(request)
        self.set_aside.discard(request)
        self._prefilling.pop(request, None)
        if request.priority_class:
            self._classed -= 1

    def _give_up(self, requests: list[Request]) -> None:
        """Waiting requests that cannot make their deadlines even alone at full speed leave the
        feasibility scan for good (time only moves on; a waiting request's estimate is fixed)."""
        for r in requests:
            self._live.remove(r)
            self._seq += 1
            i = self._info[r]  # its remaining estimate stays i[2] - i[4] while it waits (no output, nothing computed)
            entry = self._hopeless[r] = (r.priority_class, r.arrival_time + i[0], self._seq, r, i[2] - i[4])
            bisect.insort(self._hopeless_order, entry)

    def _given_up_after(self, last: tuple | None) -> Iterator[tuple]:
        """The given-up entries (class, deadline, seq >= 1, request, estimate) after `last` (None:
        all), in order, lazily, each read from the order as it is when taken: the packer takes
        requests out of it while it walks the candidates, and a list iterator would then skip one."""
        order = self._hopeless_order
        i = 0 if last is None else bisect.bisect_right(order, last)
        while i < len(order):
            last = order[i]
            yield last
            i = bisect.bisect_right(order, last)

    def _borrow_slack(self, admitted_jobs: list[tuple], sources: list, now: float):
        """(late requests to run before the admitted ones, the order of the rest): in the order of
        `sources` and then the given-up entries merged (each sorted by (class, deadline, tie); `tie`
        grows from source to source, so only entries of one source can share a key, and they keep
        their order), those whose remaining work fits in the least slack of the admitted EDF
        schedule (`spare_time`, on the scan's server), so none of the admitted is made late; at
        most BORROW_SCAN entries are looked at, so overload stays O(requests in time). Every
        estimate is stretched by the device's recent slowdown (`on_iteration`): during a slow spell
        the admitted schedule has less slack than the estimates say. The BORROW_SCAN entries looked
        at are the first of each source sorted together (C), not pulled one by one through a lazy
        merge; the given-up ones are a slice of their sorted list."""
        inflate = self.inflate * self._slowdown  # a device running slow leaves less slack than the estimates say
        spare = self.BORROW_FRACTION * spare_time(admitted_jobs, now, rate=self._share or 1.0, margin=self._margin,
                                                  inflate=inflate)
        if not spare > 0.0:
            return [], heapq.merge(*sources, self._given_up_after(None))
        scale = inflate / (self._share or 1.0)
        n = self.BORROW_SCAN
        sources = [iter(x) for x in sources]
        heads = []
        for x in sources:
            heads.extend(itertools.islice(x, n))
        given_up = self._hopeless_order[:n]
        heads += given_up
        sources.append(self._given_up_after(given_up[-1] if given_up else None))
        # (class, deadline) alone orders them as (class, deadline, tie) does: the sort is stable, and
        # the heads are in source order, so at an equal key the lower tie already comes first
        heads.sort(key=_class_deadline if self._classed else _deadline)
        window, remaining = heads[:n], self.remaining
        work = [(e[4] if len(e) > 4 else remaining(e[3])) * scale for e in window]  # a given-up entry carries its estimate
        if not work or min(work) > spare:  # nothing fits (most iterations in overload)
            return [], heapq.merge(heads, *sources, key=_class_deadline_tie)
        early, skipped = [], []
        k = 0
        for e, w in zip(window, work):
            k += 1
            if w <= spare:
                spare -= w
                early.append(e[3])
            else:
                skipped.append(e)
            if spare <= 0.0:
                break
        # what was not looked at: the rest of the heads (sorted), before each source's rest
        return early, itertools.chain(skipped, heapq.merge(heads[k:], *sources, key=_class_deadline_tie))

    def _regrow(self, changed, aside: set[Request], grow: float) -> None:
        """The live jobs of `changed` requests get estimates grown by `grow` if set `aside`, plain if not."""
        live, info = self._live, self._info
        for r in changed:
            if r in live:
                job, i = live.job(r), info[r]
                live.set_job(r, (job[0], (i[2] - i[4]) * grow if r in aside else i[2] - i[4], r, job[3]))
        self._grown_by = grow

    def _sleep_late_alone(self, aside: list[Request], start: float, scale: float) -> list[Request]:
        """The set-aside waiting requests whose jobs are late even alone by a clear margin turn
        dormant (out of the scans until their threshold is reached: `LiveJobs`); returns the
        others, in their order."""
        live, rest = self._live, []
        for r in aside:
            if r in live:
                job = live.job(r)
                threshold = late_alone_scale(job[0], job[1], start)
                if scale > threshold:
                    live.sleep(r, threshold, start)
                    continue
            rest.append(r)
        return rest

    def _fast(self, request: Request, left: float, cache) -> float:
        """`left`, an estimate of `request`'s remaining seconds at the budget, at `cache`'s stretch."""
        done = request.num_computed_tokens or request.num_cached_tokens
        full = self.cache.remaining_time(request.num_tokens, done)
        return left * cache.remaining_time(request.num_tokens, done) / full if full > 0 else left

    def _rescue(self, jobs: list[tuple], now: float, rate: float, was: float,
                grown_lost: int | None = None) -> tuple[list, list] | None:
        """(admitted, set aside) at the least stretch of the budget (`RESCUE_STEPS`, up to the
        allowed) at which fewer requests miss than at the budget, with exact estimates (nothing
        inflated: the stretch is for what can be saved, not for the margin), and `rescue` set to
        it; None if no stretch saves one. A rescue that ran last iteration (`was`) goes on at its
        stretch while that stretch still saves a request against the budget with REJOIN more
        work and the scan's `inflate` (hysteresis: the rescued prompt is stretched until it fits
        with the margins the rescue ends on, `candidates`), and no longer: a request no stretch
        can save any more (an arrival took its time, or its deadline passed while it prefills)
        does not keep the decodes slow (the simulator's seed-2 draw held a 3x stretch for 316 s
        that way and saved nothing). Longer iterations prefill
        faster (each chunk pays the iteration's fixed time and one walk of its keys per attention
        tile), and the decodes take the same time of each (the prefill share grows).
        grown_lost: how many miss with REJOIN more work, if the caller counted it already."""
        margin = self._margin
        lost = len(sacrifice(jobs, now, rate=rate, margin=margin)[1])
        pick = fallback = None
        for x, cache in self._ladder:
            fast = [(d, self._fast(r, left, cache), r, c) for d, left, r, c in jobs]
            fast_rate = 1.0 - (1.0 - rate) / x
            lost_x = len(sacrifice(fast, now, rate=fast_rate, margin=margin * x)[1])
            if lost_x < lost:
                pick = x, fast, fast_rate
                break
            if x == was:
                if grown_lost is None:
                    grown_lost = self._grown_lost(jobs, now, rate)
                if lost_x < grown_lost:
                    fallback = x, fast, fast_rate
        pick = pick or fallback
        if pick is None:
            return None
        x, fast, fast_rate = pick
        self.rescue = x
        return sacrifice(fast, now, rate=fast_rate, margin=margin * x, inflate=self.inflate)

    def _grown_lost(self, jobs: list[tuple], now: float, rate: float) -> int:
        """How many of `jobs` the scan sets aside with REJOIN more work each (and `inflate`)."""
        grown = [(d, left * (1.0 + self.REJOIN), r, c) for d, left, r, c in jobs]
        return len(sacrifice(grown, now, rate=rate, margin=self._margin, inflate=self.inflate)[1])

    def candidates(self, partials: list[Request], now: float) -> Iterator[Request]:
        """Requests with a first token first (deadline order), then the set-aside ones that fit in
        the admitted schedule's slack (`_borrow_slack`), then the admitted ones in EDF
        order, then the other set-aside ones (class, then deadline). The feasibility scan covers the
        requests that can still make their deadlines: a hopeless one (late even alone at full
        speed) is set aside for good without a scan. With one class the scan would set it aside
        too and nothing else; with classes it would give up less important in-time requests in
        a vain attempt to fit it. With one class and no rescue, a request the scan finds late even
        alone at this share by a clear margin turns dormant (`LiveJobs`): it stays set aside,
        out of the scans, until the share rises to its threshold (it only gets later while it
        waits); a running prefill late even alone is set aside without the scan (the scan would set
        it aside and change nothing else for it). In overload an iteration costs O(requests still
        in time and not dormant + running prefills), not O(queue). A waiting request's remaining
        time is its static estimate; a running prefill's is recomputed only when it made progress."""
        info, live = self._info, self._live
        set_aside, grow = self.set_aside, 1.0 + self.REJOIN  # set aside last time: must fit with REJOIN more
        hopeless = []
        fastest = self.inflate  # no prefill share is above 1, no margin below 0
        for r in live.due(now):  # those whose give-up time came: checked exactly
            i = info[r]
            d = r.arrival_time + i[0]
            left = i[2] - i[4]
            if d < now + fastest * left and (
                    not self._ladder or d < now + fastest * self._fast(r, left, self._ladder[-1][1])):
                hopeless.append(r)  # late even at the stretched budget, when one is allowed
            else:
                live.schedule_give_up(r, self._give_up_at(r, d, left))
        if hopeless:
            self._give_up(live.in_order(hopeless))
        if grow != self._grown_by:  # REJOIN changed (tests): every set-aside job's estimate follows
            self._regrow(set_aside, set_aside, grow)
        rate = self._share or 1.0
        # one rank, no rescue: jobs late alone by a clear margin stay out of the scan (`LiveJobs`)
        dormancy = not self._classed and not self._ladder
        start, scale = now + self._margin, self.inflate / rate
        if dormancy:
            live.wake(scale, start)
        else:
            live.wake_all()
        jobs = live.jobs()  # set aside last time: with REJOIN more work (`_regrow`)
        prefilling = self._prefilling
        late = []  # (deadline, request) of running prefills late even alone, with one rank: no scan needed
        for r, known in list(prefilling.items()):  # running prefills, in flight or not: they use the device too
            if r.output_token_ids:
                del prefilling[r]
                continue
            done = r.num_computed_tokens
            if known is None or known[0] != done:  # its estimate moves only with its progress
                known = prefilling[r] = (done, self.remaining(r))
            left = known[1]
            d, work = r.arrival_time + info[r][0], left * grow if r in set_aside else left
            if dormancy and late_alone(d, work * scale, start):
                late.append((d, r))  # the scan would set it aside and change nothing else for it
            else:
                jobs.append((d, work, r, r.priority_class))
        admitted, aside = sacrifice(jobs, now, rate=rate, margin=self._margin, inflate=self.inflate)
        if late:  # into the set-aside ones' deadline order; at an equal deadline after the scan's (whose own sort
            # puts the waiting before the running prefills too)
            late.sort(key=_first)
            aside = list(map(_second, heapq.merge(((r.arrival_time + info[r][0], r) for r in aside), late,
                                                  key=_first)))
        was, self.rescue = self.rescue, 1.0
        if self._ladder and not self._hopeless:
            # a rescue that ran goes on only while not all fit with REJOIN more work
            grown_lost = self._grown_lost(jobs, now, rate) if not aside and was > 1.0 else None
            if aside or grown_lost:
                res = self._rescue(jobs, now, rate, was, grown_lost)
                if res is not None:
                    admitted, aside = res
        now_aside = set(aside)
        if live.num_dormant:
            now_aside.update(live.dormant())
        self._regrow(set_aside.symmetric_difference(now_aside), now_aside, grow)
        self.set_aside = now_aside
        if dormancy and aside:  # with their grown estimates, as the next scan would see them
            aside = self._sleep_late_alone(aside, start, scale)
        waiting, partial_set = self._store(), set(partials)
        # With a first token: waiting after preemption, or already recomputing their context in
        # chunks (running partials that left the queue; no scan covers them either).
        recomputing = [r for r in partials if r.output_token_ids]
        firsts = sorted(((r.arrival_time + info[r][0], r) for r in itertools.chain(self._firsts, recomputing)),
                        key=_first) if self._firsts or recomputing else ()
        # (class, deadline, tie, request[, estimate]) in deadline order, lazily (the packer takes a
        # few); `tie` differs between these two and the given-up entries merged after them, so no
        # two entries compare their requests, and at equal deadlines the set-aside come first, then
        # the dormant, then the given-up
        aside = ((r.priority_class, r.arrival_time + info[r][0], -2, r) for r in aside
                 if r in waiting or r in partial_set)
        if self._classed:
            aside = sorted(aside, key=_class_deadline)  # stable: deadline order within a class
        dormant = ((0, d, -1, r) for d, _, r in live.dormant_in_order()) if live.num_dormant else ()
        sources = [aside, dormant]  # the given-up ones come after these (`_borrow_slack`)
        if admitted:
            admitted_set = set(admitted)
            early, later = self._borrow_slack([j for j in jobs if j[2] in admitted_set], sources, now)
        else:
            early, later = [], heapq.merge(*sources, self._given_up_after(None))  # nothing to run before: merged, lazily
        top = None
        if self._round and self._iteration % self._round == 0:  # the set-aside share
            top = next(later, None)
            if top is not None:
                later = itertools.chain([top], later)
        order = itertools.chain(map(_second, firsts), early, (r for r in admitted if r in waiting or r in partial_set),
                                map(_fourth, later))
        if top is not None and now - top[3].arrival_time > self.STARVING * info[top[3]][0]:
            first = top[3]
            order = itertools.chain([first], (r for r in order if r is not first))
        return order
