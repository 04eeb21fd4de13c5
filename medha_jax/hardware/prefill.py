"""Whole-request latencies from the per-iteration model: one prefill streamed through SPP, one decode.

  prompt length n --static_chunks / adaptive_chunks--> [(q, kv), ...] chunk plan
  chunk plan --streamed_prefill_time(perf)--> seconds, chunk i+1 entering stage 0 as soon as
              chunk i has left it (SPP; Mnemosyne eq. 8: ~ T_p / spp + fill + hand-offs)
  context n --decode_time(perf)--> seconds per output token (decode-only batch)

Used by the scaling study (benchmarks/scaling_model.py), the checks against the papers'
reported figures, and the LoongServe-like baseline's cost coefficients. Pure Python.
"""

from __future__ import annotations


def static_chunks(n: int, chunk: int) -> list[tuple[int, int]]:
    """Fixed-size chunks (the last one may be shorter)."""
    if n < 1 or chunk < 1:
        raise ValueError(f"need n >= 1 and chunk >= 1, got n={n}, chunk={chunk}")
    return [(min(chunk, n - kv), kv) for kv in range(0, n, chunk)]


def adaptive_chunks(perf, n: int, t_target: float, *, granularity: int = 32, max_chunk: int = 8192,
                    step: int = 1) -> list[tuple[int, int]]:
    """Largest chunk (multiple of `granularity`, at most `max_chunk`) whose iteration fits `t_target`
    alone on the device: Medha's adaptive chunking without co-batched decodes. If even one granule
    exceeds the budget the smallest chunk runs anyway (the request must progress).

    `step` > 1 reuses each chosen size for `step` chunks (the chosen size only shrinks as the KV
    grows, so this trades a little accuracy for speed at 10M-token scale)."""
    if n < 1 or t_target <= 0:
        raise ValueError(f"need n >= 1 and t_target > 0, got n={n}, t_target={t_target}")
    out: list[tuple[int, int]] = []
    kv = 0
    hi_units = max_chunk // granularity
    while kv < n:
        lo, hi = 1, hi_units
        while lo < hi:  # largest units with time <= t_target
            mid = (lo + hi + 1) // 2
            if perf.iteration_time(((mid * granularity, kv),)) <= t_target:
                lo = mid
            else:
                hi = mid - 1
        c = lo * granularity
        for _ in range(step):
            if kv >= n:
                break
            q = min(c, n - kv)
            out.append((q, kv))
            kv += q
    return out


def streamed_prefill_time(perf, chunks) -> float:
    """Seconds until the last chunk leaves the last stage when chunks stream through `perf.spp`
    stages back to back (each stage takes `perf.stage_time` of the chunk, hand-off included)."""
    spp = perf.spp
    ends = [0.0] * spp  # when each stage finished its previous chunk
    for q, kv in chunks:
        tau = perf.stage_time(((q, kv),))
        prev = 0.0
        for k in range(spp):
            start = ends[k] if ends[k] > prev else prev
            ends[k] = prev = start + tau
    return ends[-1]


def decode_time(perf, context: int, batch: int = 1) -> float:
    """Seconds per output token of `batch` decodes at `context` tokens each (decode-only batch)."""
    if context < 1 or batch < 1:
        raise ValueError(f"need context >= 1 and batch >= 1, got {context}, {batch}")
    return perf.iteration_time(((1, context),) * batch)
