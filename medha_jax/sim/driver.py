"""The discrete-event loop: a real `Scheduler` on a simulated clock, a simulated device in place of
the executor. It does what the engine loop does, with time taken from the device model.

  RequestSpecs --(arrival reached)--> Request (prompt = range(n): lengths only, no token ids)
      --> scheduler.add_request
  loop at `now` (the time stage 0 of the device is free):
      apply pipeline exits due by now: scheduler.update_from_output(batch, 0, exit) appends a
      token to each sampled sequence and finishes the requests that stop (the engine's rules;
      here a request stops at its output length, FINISHED_LENGTH)
      batch = scheduler.schedule(now); (tick, latency) = device.run(composition)
      stages: stage k of this batch starts when stage k-1 of it and stage k of the previous batch
              are done, each taking `tick`; the batch leaves the last stage at `exit`
      scheduler.on_batch_done(batch, end of stage 0, measured_time=latency)
      exit event queued at `exit` with the batch, if any sequence of it samples
      now = end of stage 0 (or, with nothing to run, the next arrival / exit)
  stop at `horizon` (no batch starts after it) or when everything has finished
  -> SimResult; per-request decode timing (TokenStats) is read off each request's token_times

Stream pipeline parallelism (depth = spp > 1): the scheduler is told a batch is done when it leaves
stage 0, so chunk i+1 of a prefill can enter the pipeline one tick after chunk i (it needs chunk i's
KV, which each stage has written, not its output); a sampled token only exists when its batch
leaves the last stage, and until then its request has nothing to compute, so a decode waits for
its previous token (Medha 3.3, Mnemosyne eq. 8). With depth 1 this is the plain engine loop.
Pure Python, no JAX.
"""

from __future__ import annotations

import heapq
import time
from dataclasses import dataclass, field

from medha_jax.batch import ScheduledBatch
from medha_jax.request import Request
from medha_jax.sampling_params import SamplingParams
from medha_jax.scheduler.base import Scheduler
from medha_jax.sim.workload import RequestSpec


@dataclass(slots=True)
class TokenStats:
    """Per-request decode timing: when the last token came and the longest gap between two."""

    last: float = 0.0
    max_gap: float = 0.0


@dataclass
class SimResult:
    requests: list[Request]
    specs: list[RequestSpec]
    horizon: float
    end_time: float
    iterations: int
    busy_time: float
    """Seconds stage 0 was occupied (sum of ticks)."""
    wall_seconds: float
    token_stats: dict[str, TokenStats] = field(default_factory=dict)
    num_preemptions: int = 0
    batch_tokens: int = 0


def make_request(i: int, spec: RequestSpec) -> Request:
    return Request(request_id=f"r{i}", prompt_token_ids=range(spec.prompt_tokens),
                   sampling_params=SamplingParams(max_tokens=spec.output_tokens), arrival_time=spec.arrival,
                   ttft_deadline=spec.ttft_deadline)


def simulate(scheduler: Scheduler, specs: list[RequestSpec], device, *, horizon: float | None = None,
             max_iterations: int = 50_000_000, observer=None) -> SimResult:
    """Replay `specs` through `scheduler` on `device` until `horizon` (None: until all finish).

    `observer(start, stage0_end, exit, batch)`, when given, sees every batch as it is issued."""
    t_wall = time.perf_counter()
    specs = sorted(specs, key=lambda s: s.arrival)
    reqs = [make_request(i, s) for i, s in enumerate(specs)]
    depth = device.depth
    free = [0.0] * depth  # when each stage finishes its current batch
    exits: list[tuple[float, int, ScheduledBatch]] = []  # heap of (exit time, seq no, batch that samples)
    end = float("inf") if horizon is None else horizon
    now = specs[0].arrival if specs else 0.0
    i = n_iter = seq_no = tokens = 0
    busy = 0.0
    run = device.run
    add = scheduler.add_request
    update = scheduler.update_from_output
    while True:
        while i < len(reqs) and reqs[i].arrival_time <= now:
            add(reqs[i])
            i += 1
        while exits and exits[0][0] <= now:
            t_exit, _, done = heapq.heappop(exits)
            update(done, 0, t_exit)
        if now >= end:
            break
        if not scheduler.has_unfinished and i == len(reqs) and not exits:
            break
        batch = scheduler.schedule(now)
        if batch.is_empty:
            nxt = min(reqs[i].arrival_time if i < len(reqs) else end, exits[0][0] if exits else end)
            if nxt == float("inf"):
                raise RuntimeError(f"simulation stalled at t={now:.3f}: {scheduler.num_waiting} waiting, "
                                   f"{scheduler.num_running} running, nothing schedulable and nothing arriving")
            now = max(nxt, now)
            continue
        seqs = [(s.num_tokens, s.start_pos) for s in batch.seqs]
        samples = any(s.samples for s in batch.seqs)
        tick, latency = run(seqs)
        t = now
        for k in range(depth):
            t = (free[k] if free[k] > t else t) + tick
            free[k] = t
        stage0 = free[0]
        if observer is not None:
            observer(now, stage0, free[-1], batch)
        scheduler.on_batch_done(batch, stage0, measured_time=latency)
        if samples:
            seq_no += 1
            heapq.heappush(exits, (free[-1], seq_no, batch))
        busy += tick
        tokens += sum(q for q, _ in seqs)
        n_iter += 1
        if n_iter >= max_iterations:
            raise RuntimeError(f"simulation did not finish within {max_iterations} iterations (t={now:.1f})")
        now = stage0
    return SimResult(reqs, specs, end if horizon is not None else now, now, n_iter, busy,
                     time.perf_counter() - t_wall, token_stats(reqs), scheduler.num_preemptions, tokens)


def token_stats(reqs: list[Request]) -> dict[str, TokenStats]:
    """Last token time and longest inter-token gap of every request that got a token."""
    stats = {}
    for req in reqs:
        times = req.token_times
        if times:
            stats[req.request_id] = TokenStats(times[-1], max((b - a for a, b in zip(times, times[1:])), default=0.0))
    return stats

