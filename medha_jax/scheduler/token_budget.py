"""Phase 2 for fcfs / srpt: prefills under a token budget (no runtime predictor).

  Scheduler.schedule -> decodes already in the batch -> TokenBudgetPacker.pack_prefills:
      candidates (running partial prefills + waiting) in policy order (arrival for fcfs)
      chunked (Sarathi):   chunk = min(remaining, max_num_batched_tokens - tokens so far);
                           vLLM's long-prefill limits when long_prefill_token_threshold > 0: a
                           prompt longer than it is long, its chunks are capped at it, and at
                           most max_long_partial_prefills long prompts get a chunk per iteration
                           (so short prompts behind a long one still get the rest of the budget)
      whole (nonchunked):  each prompt whole, in one iteration; the first always goes in, later
                           ones only while the batch stays within max_num_batched_tokens

With per-group kvp batches (`Scheduler.groups` > 1) every budget is one group's: a request not
placed yet goes to the group with the fewest tokens this iteration that has free pages, and its
chunk stops at the end of the kvp block it is in (`Scheduler.room`).

A waiting request that cannot get its pages stops admission (strict arrival order; it waits for
memory rather than being overtaken); a running partial prefill that cannot get pages after
preempting lower-priority partial prefills is skipped this iteration. Pure Python, no JAX.
"""

from __future__ import annotations

from medha_jax.batch import ScheduledBatch


class TokenBudgetPacker:
    def __init__(self, chunked: bool = True):
        self.chunked = chunked

    def max_batch_tokens(self, cfg) -> int | None:
        return cfg.max_num_batched_tokens if self.chunked else None

    def pack_prefills(self, sched, batch: ScheduledBatch, now: float) -> None:
        cfg = sched.config
        kv = sched.kv
        budget = cfg.max_num_batched_tokens  # per batch (per kvp group with per-group batches)
        first = True
        long_cap = cfg.long_prefill_token_threshold if self.chunked else 0
        longs = 0
        full = sched.all_full(batch)  # no batch takes another token (updated as chunks go in)
        for req in sched.prefill_candidates(now):
            if full:
                break
            sched.offer_prefix(req)  # a waiting request's cached prefix is not recomputed
            h = None
            if sched.groups > 1:
                h = kv.first_groups.get(req.request_id)
                if h is None:  # not placed yet: the group with the fewest tokens that has free pages
                    h = min(range(sched.groups),
                            key=lambda g: (kv.allocators[g].num_free == 0, batch.group_tokens[g]))
            g = sched.run_group(req, req.num_computed_tokens, h)
            tokens_left, rows_left = sched.room(batch, req, g)
            if rows_left <= 0:
                continue
            remaining = req.num_remaining_tokens
            if self.chunked:
                n = min(remaining, tokens_left)
                if n <= 0:
                    continue
                if long_cap and req.prompt_len > long_cap:
                    if longs >= cfg.max_long_partial_prefills:
                        continue
                    n = min(n, long_cap)
                    longs += 1
                n = sched.rows_for(req, n, batch, g)  # a prompt being scored: one logits row per token
                if n <= 0:
                    continue
            else:
                n = remaining
                if not first and batch.group_tokens[g] + n > budget:
                    if sched.groups == 1:
                        break
                    continue
            waiting = req in sched.waiting
            if not sched.reserve(req, n, batch, now, h):
                if waiting:
                    break
                continue
            sched.add_seq(batch, req, n, now)
            full = sched.all_full(batch)
            first = False

