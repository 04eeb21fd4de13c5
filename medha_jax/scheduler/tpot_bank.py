"""Time the decodes of a batch have banked by running ahead of their mean-TPOT schedule.

  decodes in the batch (first token time t1, or start while it is on the device; m tokens sampled,
  pending ones included)
  + when this iteration starts (after the one in flight, as predicted) + the token target T
  --> slack = min over decodes of (t1 + m * T - start): how long this iteration may take while
      every decode's (m+1)-th token keeps the mean time per output token after the first within T

A request's TPOT is that mean (what `RequestOutput.metrics.tpot` and the server's histogram report,
and what vLLM and the Medha paper's evaluation measure). While an iteration takes less than T, each
of its decodes gets ahead of that schedule; the time-budget packer may spend that lead on one
longer iteration, to run a prefill chunk in a whole attention tile instead of a partial one that
costs more per token (`TimeBudgetPacker._whole_tiles`). Pure Python.
"""

from __future__ import annotations

from itertools import chain

from medha_jax.batch import ScheduledBatch


def decode_slack(batch: ScheduledBatch, start: float, token_target: float) -> float | None:
    """Least slack over the batch's decodes (seconds, may be negative: behind schedule); None when
    the batch holds no decode. A decode whose first token is still on the device (asynchronous
    scheduling: its prompt's last chunk is in the step in flight) gets it when that step ends, at
    `start`: its schedule starts there, one token_target of slack. Returning None for it instead
    (the time unknown) kept whole tiles off in most iterations of the convoy's load-0.2 workload,
    where a short request's first token is pending about every other step."""
    slack = None
    one_token = (s.request for s in batch.chunks if s.num_tokens == 1 and s.request.has_sampled)
    for r in chain(one_token, batch.decodes):  # the decodes (a prefill chunk banks nothing)
        t1 = start if r.first_token_time is None else r.first_token_time
        s = t1 + (r.num_output_tokens + r.num_pending_tokens) * token_target - start
        slack = s if slack is None else min(slack, s)
    return slack
