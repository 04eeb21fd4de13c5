"""Priority policies: in which order prefill candidates are considered (lower key first).

  Scheduler.schedule(now) -> policy.begin(now) -> packer asks policy.order(candidates, now)
  Scheduler preemption    -> policy.key(request, now): the largest key is the lowest priority

  fcfs: arrival time.
Pure Python, no JAX.
"""

from __future__ import annotations

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


class FCFSPolicy(Policy):
    name = "fcfs"

    def key(self, request: Request, now: float) -> float:
        return request.arrival_time

    def order(self, requests: list[Request], now: float) -> list[Request]:
        return sorted(requests, key=_arrival)
