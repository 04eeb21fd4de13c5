"""The least device time any schedule needs to meet a set of long prompts' deadlines while every
request keeps its mean TPOT: a policy-independent lower bound on the analytic device.

  workload (each request's arrival, prompt and output tokens, TTFT deadline D) + the device model
  (`AnalyticPerfModel`, kvp 1) + the TPOT target T
  --> for a window [a, b] and the long prompts L that arrive at or after a and are due by b:
      need(k) = N(k) * F + max(N(k) * W, tokens * Lin) + work   (seconds)
  if need(k) > b - a, no schedule meets every deadline in L while every request's mean TPOT stays
  within T and all but k of the short requests meet their TTFT deadlines.

Why it holds, on the simulator's device (`sim/driver.py`: stages in lockstep, a tick as long as the
slowest stage's microbatch, a decode's next token `depth` ticks after its last; `tick_and_latency`):
- a tick with anything in the pipeline lasts at least F, its fixed time (every layer's fixed time,
  the LM head's weight read, the iteration overhead, the stage hand-off's latency), plus the
  larger of the stage's weight read W and its tokens' matmuls (Lin a token): over N ticks and
  `tokens` prefill tokens, at least N * F + max(N * W, tokens * Lin);
- each tick also holds the microbatch entering it, so every prompt's prefill adds its attention
  FLOPs and its tokens' elementwise and hand-off time at least once (`work`), whatever the
  chunking: a prompt of n tokens attends n(n+1)/2 key-query pairs in any chunks;
- a request with n >= 2 output tokens whose mean TPOT is within T has its last token within
  (n-1) T of its first, and `depth` ticks between consecutive tokens; if its first token also
  meets its deadline D, those depth (n-1) ticks lie in [arrival, arrival + D + (n-1) T];
- ticks in disjoint such intervals are distinct ticks, so N is at least the most ticks over
  pairwise disjoint intervals inside the window (weighted interval scheduling); a short request
  allowed to miss its TTFT deadline may decode outside the window, so N(k) drops the k largest of
  the chosen intervals and `work` the k largest short prefills.
Only a bound: overlapping decodes, decode attention and the long prompts' own decodes are not
counted, so a window where need(k) <= b - a is not shown feasible. Pure Python.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

from medha_jax.hardware.perf_model import AnalyticPerfModel


@dataclass(frozen=True)
class TickCosts:
    """Lower bounds on one pipeline tick's time (seconds, the stage's layers), from the device model."""
    fixed: float
    """Every tick: the layers' fixed time, the LM head's weight read, iteration overhead, hand-off latency."""
    weights: float
    """The stage's weight read, which a tick pays unless its tokens' matmuls take longer."""
    linear: float
    """Matmul time a token (the other side of that max)."""
    per_token: float
    """Elementwise and hand-off time a token."""
    per_pair: float
    """Attention FLOPs' time a key-query pair."""

    @classmethod
    def of(cls, perf: AnalyticPerfModel) -> "TickCosts":
        if perf.kvp != 1:
            raise ValueError(f"the TPOT bound models one batch per tick (kvp 1), got kvp={perf.kvp}")
        layers = perf._layers_stage
        pipe = perf.spp > 1
        return cls(fixed=layers * perf._layer_fixed + perf._head_w_s + perf.eff.iteration_overhead
                   + (perf._handoff_lat if pipe else 0.0),
                   weights=layers * perf._w_s, linear=layers * perf._lin_s_per_tok,
                   per_token=layers * (perf._elem_s_per_tok + perf._ar_s_per_tok)
                   + (perf._handoff_s_per_tok if pipe else 0.0),
                   per_pair=layers * perf._pair_s)

    def prefill(self, n: int) -> float:
        """Seconds an n-token prompt's prefill adds to the ticks it runs in, at least (no matmuls)."""
        return n * self.per_token + n * (n + 1) // 2 * self.per_pair


@dataclass(frozen=True)
class Request:
    arrival: float
    prompt_tokens: int
    output_tokens: int
    deadline: float
    """Seconds after arrival by which the first token is due."""


def disjoint_ticks(intervals: list[tuple[float, float, int]]) -> list[int]:
    """(start, end, ticks) intervals -> the ticks of a pairwise disjoint subset with the most ticks
    in all (weighted interval scheduling, O(n log n))."""
    iv = sorted(intervals, key=lambda x: x[1])
    ends = [e for _, e, _ in iv]
    best = [0] * (len(iv) + 1)  # best[i]: most ticks among the first i intervals (by end)
    for i, (s, _, w) in enumerate(iv):
        j = bisect.bisect_left(ends, s, 0, i)  # intervals ending before this one starts
        best[i + 1] = max(best[i], best[j] + w)
    chosen, i = [], len(iv)
    while i > 0:
        s, _, w = iv[i - 1]
        j = bisect.bisect_left(ends, s, 0, i - 1)
        if best[i] == best[i - 1]:
            i -= 1
        else:
            chosen.append(w)
            i = j
    return chosen


@dataclass(frozen=True)
class WindowBound:
    start: float
    end: float
    longs: tuple[int, ...]
    """Indices of the long requests that arrive in the window and are due by its end."""
    ticks: int
    """N(0): ticks the short requests' decodes need inside the window."""
    need: float
    """need(0), seconds."""
    max_short_misses: int
    """The largest k with need(k) > end - start (-1: not shown infeasible even with every short kept)."""

    @property
    def span(self) -> float:
        return self.end - self.start


def window_bound(reqs: list[Request], is_long: list[bool], costs: TickCosts, t_target: float, depth: int,
                 start: float, end: float) -> WindowBound:
    longs = tuple(i for i, r in enumerate(reqs) if is_long[i] and r.arrival >= start
                  and r.arrival + r.deadline <= end)
    shorts = [r for i, r in enumerate(reqs) if not is_long[i] and r.arrival >= start]
    intervals = [(r.arrival, r.arrival + r.deadline + (r.output_tokens - 1) * t_target, depth * (r.output_tokens - 1))
                 for r in shorts if r.output_tokens >= 2
                 and r.arrival + r.deadline + (r.output_tokens - 1) * t_target <= end]
    chosen = sorted(disjoint_ticks(intervals), reverse=True)
    short_work = sorted((costs.prefill(r.prompt_tokens) for r in shorts if r.arrival + r.deadline <= end),
                        reverse=True)
    long_tokens = sum(reqs[i].prompt_tokens for i in longs)
    long_work = sum(costs.prefill(reqs[i].prompt_tokens) for i in longs)

    def need(k: int) -> float:
        n = sum(chosen[k:])
        return (n * costs.fixed + max(n * costs.weights, long_tokens * costs.linear) + long_work
                + sum(short_work[k:]))

    span = end - start
    k_max = -1
    if longs:
        lo, hi = 0, max(len(chosen), len(short_work))  # need(k) falls with k: the last k still over the span
        if need(0) > span:
            while lo < hi:
                mid = (lo + hi + 1) // 2
                lo, hi = (mid, hi) if need(mid) > span else (lo, mid - 1)
            k_max = lo
    return WindowBound(start, end, longs, sum(chosen), need(0), k_max)


def tightest_window(reqs: list[Request], is_long: list[bool], perf: AnalyticPerfModel,
                    t_target: float) -> WindowBound | None:
    """Over the windows from a long request's arrival to a long request's deadline, the one shown
    infeasible with the most short misses allowed (ties, and where none is shown infeasible: the
    one whose need comes closest to its span); None without long requests."""
    costs = TickCosts.of(perf)
    starts = sorted({r.arrival for i, r in enumerate(reqs) if is_long[i]})
    ends = sorted({r.arrival + r.deadline for i, r in enumerate(reqs) if is_long[i]})
    best = None
    for a in starts:
        for b in ends:
            if b <= a:
                continue
            w = window_bound(reqs, is_long, costs, t_target, perf.spp, a, b)
            if w.longs and (best is None or (w.max_short_misses, w.need / w.span)
                            > (best.max_short_misses, best.need / best.span)):
                best = w
    return best
