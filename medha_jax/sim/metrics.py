"""Per-request outcomes -> the numbers the report shows, per request class.

  SimResult (requests with timings) + reference prefill time w(n) of the device
  --request_outcomes--> one Outcome per request (TTFT, TPOT, deadline met / missed / undecided)
  --summarize--> per class ("short", "long", "all", and "follow_up" when the workload has
                 conversations: their later turns, which leave "short" and "long"): TTFT
                 P50/P90/P99, normalised TTFT (TTFT / w), TPOT P50/P99 and the share of
                 requests whose TPOT exceeds the target (the scheduler's t_target), deadline-miss rate,
                 completions, throughput
  SimResult --device_summary--> tokens computed, busy seconds, prefix-cache hits

Deadline bookkeeping at the horizon: a request that got its first token is judged by its TTFT; one
without a first token has missed if its deadline has already passed at the horizon, and is left
undecided otherwise (it arrived too late to tell). A settled run (`simulate(settle=True)`) went on
past the horizon until no request that arrived by then is undecided, and judges at that time
instead; completions (and throughput) still count what finished by the horizon. TTFT
percentiles are over requests that got a first token; `no_first_token` counts the others, so a
policy that starves requests cannot look good by leaving them out. Pure Python + numpy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from medha_jax.sim.driver import SimResult

LONG_PROMPT = 32768
"""Prompt length from which a request counts as long in the report."""


@dataclass(slots=True)
class Outcome:
    request_id: str
    arrival: float
    prompt: int
    output: int
    is_long: bool
    deadline: float | None
    work: float
    """Seconds the prompt takes alone on the device (adaptive chunks): the reference for normalising."""
    ttft: float | None
    tpot: float | None
    max_tbt: float | None
    finished: bool
    missed: bool | None
    """True/False when decided at the horizon, None when undecided (or no deadline)."""
    follow_up: bool = False
    """A later turn of a conversation (its spec follows an earlier request)."""
    cached: int = 0
    """Prompt tokens it took from the prefix cache when last admitted."""


def request_outcomes(result: SimResult, work_of, long_prompt: int = LONG_PROMPT) -> list[Outcome]:
    out = []
    h = result.horizon
    judged_at = h if result.decided_at is None else result.decided_at
    for req in result.requests:
        spec = result.specs[int(req.request_id[1:])]
        ttft = None if req.first_token_time is None else req.first_token_time - req.arrival_time
        n = req.num_output_tokens
        st = result.token_stats.get(req.request_id)
        tpot = (st.last - req.first_token_time) / (n - 1) if st is not None and n > 1 else None
        d = req.ttft_deadline
        if d is None:
            missed = None
        elif ttft is not None:
            missed = ttft > d
        else:
            missed = True if req.arrival_time <= h and judged_at - req.arrival_time > d else None
        out.append(Outcome(req.request_id, req.arrival_time, req.prompt_len, req.sampling_params.max_tokens,
                           req.prompt_len >= long_prompt, d, work_of(req.prompt_len), ttft, tpot,
                           st.max_gap if st is not None and n > 1 else None,
                           req.is_finished and (result.decided_at is None or req.finish_time <= h), missed,
                           spec.follows is not None, req.num_cached_tokens if req.first_scheduled_time is not None else 0))
    return out


def _pct(values, qs):
    if not values:
        return [math.nan] * len(qs)
    return [float(v) for v in np.percentile(np.asarray(values, dtype=float), qs)]


def summarize(outcomes: list[Outcome], horizon: float, tpot_target: float | None = None) -> dict:
    """{class: {metric: value}} for classes short, long, all (and follow_up, see the module
    docstring); with `tpot_target`, also the fraction of requests whose TPOT exceeds it."""
    firsts = [o for o in outcomes if not o.follow_up]
    groups = {"short": [o for o in firsts if not o.is_long], "long": [o for o in firsts if o.is_long],
              "all": outcomes}
    if len(firsts) < len(outcomes):
        groups["follow_up"] = [o for o in outcomes if o.follow_up]
    out = {}
    for name, g in groups.items():
        ttft = [o.ttft for o in g if o.ttft is not None]
        norm = [o.ttft / o.work for o in g if o.ttft is not None and o.work > 0]
        tpot = [o.tpot for o in g if o.tpot is not None]
        decided = [o for o in g if o.missed is not None]
        p50, p90, p99 = _pct(ttft, [50, 90, 99])
        n50, n90, n99 = _pct(norm, [50, 90, 99])
        t50, t99 = _pct(tpot, [50, 99])
        finished = [o for o in g if o.finished]
        out[name] = {
            "requests": len(g), "first_token": len(ttft), "no_first_token": len(g) - len(ttft),
            "completed": len(finished),
            "ttft_p50": p50, "ttft_p90": p90, "ttft_p99": p99,
            "norm_ttft_p50": n50, "norm_ttft_p90": n90, "norm_ttft_p99": n99,
            "tpot_p50": t50, "tpot_p99": t99,
            "tpot_over_target": (sum(t > tpot_target * (1 + 1e-9) for t in tpot) / len(tpot)
                                 if tpot_target is not None and tpot else math.nan),
            "deadline_decided": len(decided),
            "deadline_miss_rate": (sum(o.missed for o in decided) / len(decided)) if decided else math.nan,
            "throughput_rps": len(finished) / horizon if horizon > 0 else math.nan,
            "output_tokens_per_s": sum(o.output for o in finished) / horizon if horizon > 0 else math.nan,
            "prompt_tokens": sum(o.prompt for o in g),
            "cached_tokens": sum(o.cached for o in g),
        }
    return out


def device_summary(result: SimResult, prefix_caching: bool) -> dict:
    """What the device did: tokens computed (prefill chunks + decodes), seconds busy, and the
    prompt tokens admitted requests took from the prefix cache instead."""
    return {"prefix_caching": prefix_caching, "computed_tokens": result.batch_tokens, "busy_s": result.busy_time,
            "prefix_hit_tokens": result.prefix_hit_tokens, "prefix_queried_tokens": result.prefix_queried_tokens,
            "prefix_evicted_tokens": result.prefix_evicted_tokens,
            "iterations": result.iterations, "not_arrived": result.not_arrived}


def offered_load(specs, work_of, horizon: float) -> dict:
    """Prefill work arriving per second of device time, per class (> 1: the device cannot keep up
    even running nothing but prefills back to back)."""
    short = sum(work_of(s.prompt_tokens) for s in specs if s.prompt_tokens < LONG_PROMPT)
    long_ = sum(work_of(s.prompt_tokens) for s in specs if s.prompt_tokens >= LONG_PROMPT)
    return {"short": short / horizon, "long": long_ / horizon, "all": (short + long_) / horizon}
