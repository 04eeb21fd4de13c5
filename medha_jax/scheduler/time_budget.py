"""Phase 2 for edf / lrs / lars: prefill chunks under a time budget (Algorithms 1 and 2).

  decodes already in the batch --BatchCost (kvp > 1: per group, the slowest counts)--> t_pred
      --> the policy's prefill share: 1 - (t_pred - fixed) / (t_target - fixed), fixed = what every
          iteration pays (a chunk alone pays it too), and how far the budget may stretch now
  for each prefill candidate, best priority first (at most max_prefill_candidates looked at):
      stop when t_pred reaches t_target (first prefill) or multi_prefill_fraction * t_target (others)
      waiting: offered its cached prefix (prefix caching), so the chunk starts after it
      long (>= long_threshold tokens processed): skip if the batch already holds a long prefill
          on one of its kvp groups; else space sharing: budget t_target * (1 - clamp(rho, 0, rho_max))
          with rho its relative slack
      budget x policy.budget_scale(request) (slo: < 1 for work with ample slack during a slow spell;
          > 1 while its deadline rescue stretches the budget),
          at most what the prompts this batch completes allow (`policy.finish_budget`; slo: the
          time left to the earliest of their deadlines at the device's current speed; in batch
          mode only deadlines the requests gave count, derived ones do not)
      chunk = largest multiple of chunk_granularity (min_chunk..max_chunk, last chunk exact) whose
          predicted batch time fits the budget (binary search, accept within accept_within; where
          a chunk of a multiple of the predictor's chunk_period can cost less than a smaller one,
          the search allows for it), cut back to whole chunk_periods when those give more tokens
          per second of batch time (`chunking.budget_chunk`; not the prompt's last chunk)
      whole tiles (a tiled profile, decodes in the batch, not the prompt's last chunk): a chunk
          that is no whole number of the widest tiles and costs TILE_GAIN more per token than the
          next whole tile (mid or widest, whichever costs less per token) grows to that tile if
          the decodes banked the time (`tpot_bank`: ahead of their mean-TPOT schedule; at most
          bank_cap * t_target), or waits one iteration if they would bank it while this one runs
          without it (never twice in a row)
      pages reserved (running prefills may preempt lower-priority partial prefills) -> into batch
  batch.predicted_time = the predictor's estimate for the whole batch

The budget is one iteration's: `Scheduler.t_target`, the per-token target over the pipeline depth
(a stream-pipelined engine's token passes spp ticks). In batch mode with no live TPOT target (`Scheduler.t_target` is infinite) every budget is
infinite: chunks are as large as the token cap and max_chunk allow, in the policy's order.
Adaptive chunking falls out: as a prefill's KV grows, each token costs more attention time, so the
chunk that fits shrinks. Departure from the paper's hard budget (bank_cap > 1): on the CPU's XLA
attention a 64- or 96-token chunk costs 1.3x more per token than a 128-token one at any context
(two or three 32-query tiles walk the keys that one 128-query tile walks once; the start-up
profile at the convoy benchmark's shapes), and under that benchmark's budget a long prompt's
chunks past ~20K cached keys were 64 tokens beside decodes; likewise a 128-token chunk costs
~1.15x more per token than a 256-token one (the 128-query tile gathers each key block for half
the queries), and with the budget fitting 128 tokens and not 256 (17K-22K cached keys at the
convoy's load 0.2) those iterations used 0.09 of the 0.15 s budget. What a TPOT target bounds, each
decode's mean time per output token, is kept; one iteration may take up to bank_cap * t_target.
If nothing at all would run (no decodes, no chunk fits the budget), the best candidate still gets
`min_chunk` tokens so that a prefill whose smallest chunk overruns t_target is slow rather than
stuck. A waiting request that cannot get pages stops the admission
of further waiting requests this iteration (memory is not given to later arrivals first).
Pure Python, no JAX.
"""

from __future__ import annotations

import heapq
import math
from itertools import repeat

from medha_jax.batch import ScheduledBatch
from medha_jax.kvp_layout import owner
from medha_jax.scheduler.chunking import budget_chunk
from medha_jax.scheduler.kvp_cost import batch_cost
from medha_jax.scheduler.tpot_bank import decode_slack


TILE_GAIN = 0.1
"""A chunk ending inside an attention tile is grown to the whole tile (or waits for it) only when
it costs this much more per token than the whole tile."""


class TimeBudgetPacker:
    def __init__(self, predictor):
        if predictor is None:
            raise ValueError("time-budget policies (edf, lrs, lars) need a runtime predictor")
        self.predictor = predictor

    def max_batch_tokens(self, cfg) -> int:
        return cfg.max_num_batched_tokens

    def pack_prefills(self, sched, batch: ScheduledBatch, now: float) -> None:
        cfg = sched.config
        t_target = sched.t_target
        multi_limit = cfg.multi_prefill_fraction * t_target if cfg.multi_prefill else 0.0
        chunk_kw = dict(granularity=cfg.chunk_granularity, min_chunk=cfg.min_chunk,
                        max_chunk=cfg.max_chunk, accept_within=cfg.accept_within,
                        period=self.predictor.chunk_period)
        cost = batch_cost(self.predictor, sched.kv)
        kv = sched.kv
        # whole tiles need a tiled profile and decodes to bank time (phase 1 put only decodes here)
        whole_tiles = (self.predictor.chunk_period > 0 and cfg.bank_cap > 1.0 and cfg.depth == 1
                       and not kv.per_group_batches and t_target < math.inf and bool(batch.decodes))
        starts = batch.decode_starts
        if kv.kvp == 1:
            cost.add_decodes(len(starts), sum(starts), *heapq.nlargest(2, starts))
        else:
            for start, g in zip(starts, batch.decode_groups or repeat(0)):
                cost.add(1, start, g)
        t_pred = cost.time()
        # per_group: the groups run in lockstep, so a group's chunk that outlasts the others idles
        # them; with k groups decoding, each may use its 1/k share of the budget their decodes
        # leave, or as much as the slowest group already takes (a group alone gets it all)
        fair = math.inf
        if kv.per_group_batches and t_target < math.inf:
            busy = sum(cost.group_time(g) > 0 for g in range(kv.kvp))
            fair = t_pred + (t_target - t_pred) / max(busy, 1)
        # t_target inf: batch mode; the policy's margin is one token's time (a tick plus the pipeline fill)
        pred = self.predictor
        # the share of the budget the decodes leave to prefill progress: a chunk alone pays the
        # iteration's fixed time too, so only what the decodes add to it is theirs
        # (both at the correction of an iteration with a chunk, which adding one makes this batch)
        fixed, t_dec = cost.fixed(), cost.prefill_time()
        if t_target > fixed and t_dec > fixed:
            share = 1.0 - (t_dec - fixed) / (t_target - fixed)
        else:  # no decodes, or a budget below the fixed time (then the whole batch counts)
            share = 1.0 - t_dec / t_target
        sched.policy.on_iteration(max(0.0, share), sched.token_target, pred.slowdown,
                                  pred.spell_ratio, sched.rescue_stretch)
        per_group = kv.per_group_batches
        prefills_on = [0] * kv.kvp  # prefill chunks per kvp group (per_group: each group's own budget)
        long_groups: set[int] = set()
        n_prefills = 0
        admit_waiting = True
        policy = sched.policy
        waiting = sched.waiting
        examined = 0
        start = max(now, sched.busy_until)  # when this batch runs (after any still in flight)
        keep = math.inf  # the batch's time limit so that the prompts it completes keep their deadlines
        full = sched.all_full(batch)  # no batch takes another token (updated as chunks go in)
        for req in sched.prefill_candidates(now):
            examined += 1
            if (examined > cfg.max_prefill_candidates or full
                    or (t_pred >= (t_target if n_prefills == 0 else multi_limit) if not per_group
                        else all(cost.group_time(g) >= (t_target if p == 0 else multi_limit)
                                 for g, p in enumerate(prefills_on)))):
                break
            is_waiting = req in waiting
            if is_waiting:
                if not admit_waiting:
                    continue
                sched.offer_prefix(req)
            processed = req.num_computed_tokens
            h = kv.first_groups.get(req.request_id)
            if h is None:  # not placed yet: the group with the most time left this iteration (and free pages)
                h = (min(range(kv.kvp), key=lambda g: (kv.allocators[g].num_free == 0, cost.group_time(g),
                                                       -kv.allocators[g].num_free))
                     if per_group else kv.first_group(req))
            t_here = t_pred
            g_own = sched.run_group(req, processed, h) if per_group else 0  # the batch its chunk runs in
            if per_group:  # is that group's batch full?
                t_here = cost.group_time(g_own)
                if t_here >= (t_target if prefills_on[g_own] == 0 else multi_limit):
                    continue
            groups = None
            budget = t_target
            if processed >= cfg.long_threshold:
                groups = kv.groups_of(req, processed + 1)
                if not long_groups.isdisjoint(groups):
                    continue
                rho = min(max(policy.relative_slack(req, now), 0.0), cfg.rho_max)
                budget = t_target * (1.0 - rho)
            budget = min(budget * policy.budget_scale(req, now), keep)
            if per_group:
                budget = min(budget, max(fair, t_pred))
            if budget <= t_here:
                continue
            tokens_left, rows_left = sched.room(batch, req, g_own)
            if tokens_left <= 0 or rows_left <= 0:
                continue
            n, _ = budget_chunk(lambda q: cost.time_with(q, processed, h), req.num_remaining_tokens, budget,
                                limit=tokens_left, **chunk_kw)
            if n == 0:
                if not batch.is_empty:
                    continue
                n = min(req.num_remaining_tokens, cfg.min_chunk, tokens_left)
            elif whole_tiles and n % self.predictor.tiling.tile_q:
                n = self._whole_tiles(sched, batch, cost, req, processed, h, n, tokens_left, t_pred, now, keep)
                if n == 0:
                    continue
            n = sched.rows_for(req, n, batch, g_own)  # a prompt being scored: one logits row per token
            if n <= 0:
                continue
            if not sched.reserve(req, n, batch, now, h if per_group else None):
                if is_waiting:
                    admit_waiting = False
                continue
            completes = n >= req.num_remaining_tokens
            sched.add_seq(batch, req, n, now)
            full = sched.all_full(batch)
            cost.add(n, processed, h)
            t_pred = cost.time()
            # its first token leaves after cfg.depth ticks, each about this long; in batch mode
            # (no budget) only a deadline the request gave bounds the batch, not a derived one
            if completes and (t_target < math.inf or req.ttft_deadline is not None):
                limit = policy.finish_budget(req, start) / cfg.depth
                if limit >= t_pred:  # still reachable: later chunks may not take it away
                    keep = min(keep, limit)
            n_prefills += 1
            prefills_on[owner(n, processed, h, kv.max_tokens_per_kvp_group, kv.kvp)] += 1
            if groups is not None:
                long_groups.update(groups)
        batch.predicted_time = None if batch.is_empty else t_pred

    def _whole_tiles(self, sched, batch: ScheduledBatch, cost, req, processed: int, h: int, n: int, limit: int,
                     t_pred: float, now: float, keep: float) -> int:
        """The chunk for `req` when its budgeted chunk `n` is no whole number of the widest tiles:
        the next whole tile that costs the least per token (of chunk_period tokens, the mid tile,
        or of tile_q, the widest; capped at the prompt's remainder) if the decodes' banked time
        covers it; 0 (wait) if they would bank enough while this iteration runs without it and
        `req` did not wait last iteration; else n."""
        p = self.predictor
        last = min(req.num_remaining_tokens, limit)
        per_token = best = p.chunk_time(n, processed) / n
        up = n
        for period in (p.chunk_period, p.tiling.tile_q):
            m = min((n // period + 1) * period, last)
            if m > n and (rate := p.chunk_time(m, processed) / m) < best:
                up, best = m, rate
        if up == n or per_token <= (1.0 + TILE_GAIN) * best:
            return n
        slack = decode_slack(batch, max(now, sched.busy_until), sched.token_target)
        if slack is None:
            return n
        t_target = sched.t_target
        cap = min(sched.config.bank_cap * t_target, keep)
        t_up = cost.time_with(up, processed, h)
        if t_up <= min(cap, slack):
            return up
        if req not in sched.passed_over_last and t_up <= min(cap, slack + t_target - t_pred):
            sched.passed_over.add(req)
            return 0
        return n
