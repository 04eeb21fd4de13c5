"""Priority policies: in which order prefill candidates are considered (lower key first).

  Scheduler.schedule(now) -> policy.begin(now) -> packer asks policy.order(candidates, now)
  Scheduler preemption    -> policy.key(request, now): the largest key is the lowest priority

  fcfs: arrival time.
  edf:  absolute TTFT deadline, arrival + D.
  lrs:  remaining slack s = arrival + D - now - T_remaining (seconds).
  lars: relative slack s / D (Medha's Length-Aware Relative Slack).

D is the request's `ttft_deadline` or max(deadline_k * T_prefill(prompt), deadline_min), fixed
when the request arrives; T_prefill and T_remaining come from the prefill-time cache (the total
work w_total of a request is T_prefill(prompt_len)). The paper writes LARS as s / w_total; this
follows the authors' released code and DESIGN.md and divides by D, which equals 1.5 * w_total
for every request whose deadline is derived from its length and above the floor. Every deadline
policy also reports `relative_slack` (the LARS value), which the packer uses for space sharing.
Pure Python, no JAX.
"""

from __future__ import annotations

import heapq
from operator import attrgetter

from medha_jax.request import Request

_arrival = attrgetter("arrival_time")


class Policy:
    """Base: stateless hooks the scheduler calls; subclasses define `key`."""

    name = "base"

    def begin(self, now: float) -> None:
        """Called once at the start of every `schedule(now)`."""

    def on_add(self, request: Request) -> None:
        """A request joined the scheduler."""

    def on_remove(self, request: Request) -> None:
        """A request left the scheduler (finished or aborted)."""

    def key(self, request: Request, now: float) -> float:
        raise NotImplementedError

    def order(self, requests: list[Request], now: float) -> list[Request]:
        """The requests sorted best first (stable: ties keep arrival order)."""
        key = self.key
        return sorted(requests, key=lambda r: key(r, now))

    def top(self, requests: list[Request], now: float, k: int) -> list[Request]:
        """The k best requests, best first (the packer never looks further)."""
        return self.order(requests, now)[:k]


class FCFSPolicy(Policy):
    name = "fcfs"

    def key(self, request: Request, now: float) -> float:
        return request.arrival_time

    def order(self, requests: list[Request], now: float) -> list[Request]:
        return sorted(requests, key=_arrival)


class DeadlinePolicy(Policy):
    """Shared bookkeeping for edf / lrs / lars: per-request D and prefill-time estimates."""

    def __init__(self, prefill_cache, deadline_k: float = 1.5, deadline_min: float = 0.5):
        self.cache = prefill_cache
        self.deadline_k = deadline_k
        self.deadline_min = deadline_min
        # request -> [D, num_tokens the estimate is for, T_prefill(num_tokens)]
        self._info: dict[Request, list] = {}

    def on_add(self, request: Request) -> None:
        t_prompt = self.cache.total_time(request.prompt_len)
        if request.ttft_deadline is not None:
            d = request.ttft_deadline
        else:
            d = max(self.deadline_k * t_prompt, self.deadline_min)
        if not d > 0:
            d = 1e-9  # a zero-work request with a zero floor: due at once
        self._info[request] = [d, request.num_tokens, self.cache.total_time(request.num_tokens)]

    def on_remove(self, request: Request) -> None:
        self._info.pop(request, None)

    def deadline(self, request: Request) -> float:
        """D: seconds after arrival by which the first token is due."""
        return self._info[request][0]

    def work(self, request: Request) -> float:
        """w_total: predicted seconds to prefill the prompt alone."""
        return self.cache.total_time(request.prompt_len)

    def remaining(self, request: Request) -> float:
        info = self._info[request]
        n = request.num_tokens
        if info[1] != n:  # output tokens were added (recompute after preemption)
            info[1], info[2] = n, self.cache.total_time(n)
        done = request.num_computed_tokens
        if done == 0:
            return info[2]
        return max(info[2] - self.cache.total_time(done), 0.0)

    def slack(self, request: Request, now: float) -> float:
        return request.arrival_time + self._info[request][0] - now - self.remaining(request)

    def relative_slack(self, request: Request, now: float) -> float:
        return self.slack(request, now) / self._info[request][0]

    def top(self, requests: list[Request], now: float, k: int) -> list[Request]:
        key = self.key
        if len(requests) <= k:
            return sorted(requests, key=lambda r: key(r, now))
        return heapq.nsmallest(k, requests, key=lambda r: key(r, now))


class EDFPolicy(DeadlinePolicy):
    name = "edf"

    def key(self, request: Request, now: float) -> float:
        return request.arrival_time + self._info[request][0]


class LRSPolicy(DeadlinePolicy):
    name = "lrs"

    def key(self, request: Request, now: float) -> float:
        return self.slack(request, now)


class LARSPolicy(DeadlinePolicy):
    name = "lars"

    def key(self, request: Request, now: float) -> float:
        return self.relative_slack(request, now)
