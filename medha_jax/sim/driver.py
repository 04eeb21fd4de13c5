"""The discrete-event loop: a real `Scheduler` on a simulated clock, a simulated device in place of
the executor. It does what the engine loop does, with time taken from the device model.

  RequestSpecs --(arrival reached)--> Request (prompt token ids from the spec's segments, or ids
      of its own; sim/tokens.py) --> scheduler.add_request
      a follow-up turn (spec.follows = j) arrives spec.arrival seconds after request j's last
      token (closed loop); if j has not finished at the horizon, it never arrives
  loop at `now` (the start of a device tick):
      apply token exits due by now: scheduler.update_from_output(batch, 0, exit) appends a
      token to each sampled sequence and finishes the requests that stop (the engine's rules;
      here a request stops at its output length, FINISHED_LENGTH)
      batch = scheduler.schedule(now) (may be empty while earlier batches are still in the pipeline)
      (tick, latency) = device.run(composition): the batch's stage time
      the tick lasts as long as the slowest stage's batch (the stages run in lockstep, as the
      engine's one jitted tick does); the batch that was at the last stage leaves at its end
      scheduler.on_batch_done(batch, end of tick, measured_time=tick)
      exit event queued at the end of the tick for the batch that left, if any sequence of it samples
      now = end of the tick (or, with nothing to run or in flight, the next arrival)
  stop at `horizon` (no batch starts after it) or when everything has finished; with `settle`,
  go on past the horizon (admitting nothing new) until every request that arrived by then has its
  first token or has passed its deadline, so that every policy is judged on the same requests
  (without it, a request still waiting at the horizon with its deadline ahead is undecided and
  left out of the miss rate: one policy's denominator could lack a request another's has)
  -> SimResult; per-request decode timing (TokenStats) is read off each request's token_times;
     prefix-cache hits from the KV manager's counters (the device is only charged for the
     tokens the scheduler schedules, so a cached prefix costs nothing but its attention reads)

Stream pipeline parallelism (depth = spp > 1), as `medha_jax.engine` runs it: one tick moves every
stage's microbatch one stage on. The scheduler is told a batch is done when it leaves stage 0, so
chunk i+1 of a prefill can enter the pipeline one tick after chunk i (it needs chunk i's KV, which
each stage has written, not its output); a sampled token only exists when its batch leaves the
last stage, `depth` ticks after it entered, and until then its request has nothing to compute, so
a decode's token period is `depth` ticks (Medha 3.3, Mnemosyne eq. 8). With nothing new to feed,
the pipeline still ticks until the batches in it have left. With depth 1 this is the plain engine
loop.
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
from medha_jax.scheduler.records import Composition
from medha_jax.sim.tokens import OWN_SEGMENTS, SegmentTokens
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
    """Seconds the device ticked (a tick lasts as long as its slowest stage's batch)."""
    wall_seconds: float
    token_stats: dict[str, TokenStats] = field(default_factory=dict)
    num_preemptions: int = 0
    batch_tokens: int = 0
    """Tokens the device computed (prefill chunks + decodes)."""
    prefix_hit_tokens: int = 0
    """Prompt tokens admitted requests took from the prefix cache (0 without prefix caching)."""
    prefix_queried_tokens: int = 0
    """Prompt tokens admitted requests looked up in the prefix cache."""
    prefix_evicted_tokens: int = 0
    """Cached tokens evicted to make room (the pool is finite: the device's KV memory)."""
    not_arrived: int = 0
    """Follow-up turns that never arrived: an earlier turn had not finished by the horizon."""
    decided_at: float | None = None
    """With `settle`: when the last deadline of a request that arrived by the horizon was decided
    (deadlines of requests without a first token are judged at this time instead of the horizon)."""


def make_request(i: int, spec: RequestSpec, arrival: float) -> Request:
    segments = spec.segments or ((OWN_SEGMENTS + i, spec.prompt_tokens),)
    return Request(request_id=f"r{i}", prompt_token_ids=SegmentTokens(segments),
                   sampling_params=SamplingParams(max_tokens=spec.output_tokens), arrival_time=arrival,
                   ttft_deadline=spec.ttft_deadline)


def simulate(scheduler: Scheduler, specs: list[RequestSpec], device, *, horizon: float | None = None,
             max_iterations: int = 50_000_000, observer=None, settle: bool = False) -> SimResult:
    """Replay `specs` through `scheduler` on `device` until `horizon` (None: until all finish);
    with `settle`, past it until every admitted request's deadline is decided (module docstring).

    `observer(start, tick_end, batch)`, when given, sees every batch as it enters stage 0.
    Request "r{i}" is the result's specs[i]: `specs` sorted by arrival, or, when some follow
    others (their `follows` indices refer to the order given), `specs` as given. Follow-ups that
    never arrived are left out (`not_arrived`); requests arriving after the horizon are kept (no
    first token)."""
    t_wall = time.perf_counter()
    if all(s.follows is None for s in specs):
        specs = sorted(specs, key=lambda s: s.arrival)  # then "r{i}" is the i-th to arrive
    arrivals = [(s.arrival, i) for i, s in enumerate(specs) if s.follows is None]  # heap of (time, index)
    heapq.heapify(arrivals)
    followers: dict[int, list[int]] = {}
    for i, s in enumerate(specs):
        if s.follows is not None:
            followers.setdefault(s.follows, []).append(i)
    released: dict[int, Request] = {}
    index_of: dict[str, int] = {}
    depth = device.depth
    pipe: list = [None] * depth  # pipe[k]: (batch, its stage time, samples) at stage k, or None
    exits: list[tuple[float, int, ScheduledBatch]] = []  # heap of (exit time, seq no, batch that samples)
    end = float("inf") if horizon is None else horizon
    now = arrivals[0][0] if arrivals else 0.0
    n_iter = seq_no = tokens = 0
    in_pipe = False
    busy = 0.0
    run = device.run
    spread = scheduler.kv.per_group_batches  # requests on different kvp groups: the device needs to know which
    add = scheduler.add_request
    update = scheduler.update_from_output

    pending: list[Request] | None = None  # settling: admitted requests whose deadline is undecided

    def undecided(reqs) -> list[Request]:
        return [r for r in reqs if r.first_token_time is None and not r.is_finished
                and r.ttft_deadline is not None and r.arrival_time + r.ttft_deadline > now]

    def arrive():
        while arrivals and arrivals[0][0] <= (min(now, end) if settle else now):
            t, j = heapq.heappop(arrivals)
            req = released[j] = make_request(j, specs[j], t)
            index_of[req.request_id] = j
            add(req)

    while True:
        arrive()
        followed = False
        while exits and exits[0][0] <= now:
            t_exit, _, done = heapq.heappop(exits)
            for req in update(done, 0, t_exit):
                for j in followers.get(index_of[req.request_id], ()):
                    heapq.heappush(arrivals, (t_exit + specs[j].arrival, j))
                    followed = True
        if followed:
            arrive()
        if now >= end:
            if not settle:
                break
            pending = undecided(released.values() if pending is None else pending)
            if not pending:
                break
        if not scheduler.has_unfinished and not arrivals and not exits:
            break
        batch = scheduler.schedule(now)
        if batch.is_empty:
            if not in_pipe:
                nxt = min(arrivals[0][0] if arrivals else end, exits[0][0] if exits else end)
                if pending:  # settling: nothing runs, so the next thing to happen is a deadline passing
                    nxt = min(exits[0][0] if exits else float("inf"),
                              min(r.arrival_time + r.ttft_deadline for r in pending) + 1e-9)
                if nxt == float("inf"):
                    raise RuntimeError(f"simulation stalled at t={now:.3f}: {scheduler.num_waiting} waiting, "
                                       f"{scheduler.num_running} running, nothing schedulable and nothing arriving")
                now = max(nxt, now)
                continue
            entry = None
        else:
            comp = Composition.from_batch(batch)
            seqs = comp.seqs
            groups = (comp.groups or [0] * len(seqs)) if spread else None
            samples = bool(batch.decodes) or any(s.samples for s in batch.chunks)
            entry = (batch, (run(seqs, groups) if spread else run(seqs))[0], samples)
            tokens += sum(q for q, _ in seqs)
            n_iter += 1
            if n_iter >= max_iterations:
                raise RuntimeError(f"simulation did not finish within {max_iterations} iterations (t={now:.1f})")
        pipe = [entry] + pipe[:-1]  # every microbatch one stage on (the last stage's left last tick)
        tick = max(e[1] for e in pipe if e is not None)  # lockstep: the slowest stage sets the tick
        t_end = now + tick
        if entry is not None:
            if observer is not None:
                observer(now, t_end, batch)
            scheduler.on_batch_done(batch, t_end, measured_time=entry[1])
        leaving, pipe[-1] = pipe[-1], None
        if leaving is not None and leaving[2]:
            seq_no += 1
            heapq.heappush(exits, (t_end, seq_no, leaving[0]))
        in_pipe = any(e is not None for e in pipe)
        busy += tick
        now = t_end
    for _, j in arrivals:  # arriving after the horizon: counted (no first token), as in a trace
        if specs[j].follows is None:
            released[j] = make_request(j, specs[j], specs[j].arrival)
    reqs = [released[j] for j in sorted(released)]
    prefix = scheduler.kv.prefix
    return SimResult(reqs, specs, end if horizon is not None else now, now, n_iter, busy,
                     time.perf_counter() - t_wall, token_stats(reqs), scheduler.num_preemptions, tokens,
                     prefix.hit_tokens if prefix is not None else 0, prefix.queried_tokens if prefix is not None else 0,
                     prefix.evicted_pages * prefix.page_size if prefix is not None else 0, len(specs) - len(reqs),
                     now if settle and horizon is not None else None)


def token_stats(reqs: list[Request]) -> dict[str, TokenStats]:
    """Last token time and longest inter-token gap of every request that got a token."""
    stats = {}
    for req in reqs:
        times = req.token_times
        if times:
            stats[req.request_id] = TokenStats(times[-1], max((b - a for a, b in zip(times, times[1:])), default=0.0))
    return stats

