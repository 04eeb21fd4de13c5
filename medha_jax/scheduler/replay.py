"""Discrete-event replay: drive a real `Scheduler` on a simulated clock (tests, the simulator).

  arrivals (Requests with arrival_time) --admitted when the clock reaches them--> scheduler
  loop: batch = schedule(now); dt = device(Composition of batch); now += dt
        on_batch_done(batch, now, measured_time=dt); update_from_output(batch, token, now): each
        sampled request gets `token` appended and stops by the engine's rules (here: max_tokens)
  idle (empty batch): the clock jumps to the next arrival

`device` defaults to the scheduler's predictor (raw, no online correction), i.e. the predictor is
the device. Returns a `ReplayResult` with every request and a trace of iterations.
Pure Python, no JAX.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from medha_jax.request import Request
from medha_jax.scheduler.base import Scheduler
from medha_jax.scheduler.records import Composition


@dataclass(slots=True)
class Iteration:
    start: float
    end: float
    seqs: list[tuple[str, int, int]]
    """(request_id, start_pos, num_tokens) per scheduled sequence."""
    predicted: float | None


@dataclass(slots=True)
class ReplayResult:
    requests: list[Request]
    trace: list[Iteration] = field(default_factory=list)
    end_time: float = 0.0

    def ttft(self, request: Request) -> float | None:
        if request.first_token_time is None:
            return None
        return request.first_token_time - request.arrival_time

    def tokens_between(self, request_id: str, t0: float, t1: float) -> int:
        """Tokens of `request_id` computed by iterations that ended in (t0, t1]."""
        return sum(n for it in self.trace if t0 < it.end <= t1 for rid, _, n in it.seqs if rid == request_id)


def replay(scheduler: Scheduler, requests: Iterable[Request], *,
           device: Callable[[Composition], float] | None = None, token: int = 0,
           start_time: float | None = None, max_iterations: int = 1_000_000, keep_trace: bool = True,
           ) -> ReplayResult:
    pending = sorted(requests, key=lambda r: r.arrival_time)
    result = ReplayResult(list(pending))
    if device is None:
        if scheduler.predictor is None:
            raise ValueError("replay needs a device time model: pass device= or give the scheduler a predictor")
        device = scheduler.predictor.predict_raw
    now = start_time if start_time is not None else (pending[0].arrival_time if pending else 0.0)
    i = 0
    for _ in range(max_iterations):
        while i < len(pending) and pending[i].arrival_time <= now:
            scheduler.add_request(pending[i])
            i += 1
        if not scheduler.has_unfinished and i == len(pending):
            result.end_time = now
            return result
        batch = scheduler.schedule(now)
        if batch.is_empty:
            if i == len(pending):
                raise RuntimeError(f"scheduler stalled at t={now} with {scheduler.num_waiting} waiting, "
                                   f"{scheduler.num_running} running and nothing schedulable")
            now = max(now, pending[i].arrival_time)
            continue
        dt = device(Composition.from_batch(batch))
        start, now = now, now + dt
        scheduler.on_batch_done(batch, now, measured_time=dt)
        if keep_trace:
            result.trace.append(Iteration(start, now, [(s.request_id, s.start_pos, s.num_tokens) for s in batch.seqs],
                                          batch.predicted_time))
        scheduler.update_from_output(batch, token, now)
    raise RuntimeError(f"replay did not finish within {max_iterations} iterations")
