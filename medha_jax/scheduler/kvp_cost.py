"""KVP-aware iteration cost: each kvp group's share of the batch, the slowest group sets the time.

A sequence placed on first group h keeps block b = positions [b*M, (b+1)*M) on group (h + b) % kvp
(`kvp_layout`). Its share on group g, whose block of it is b = (g - h) % kvp, starting at g0 = b*M:

    c = clamp(kv - g0, 0, M)      keys of the sequence cached on g before the iteration
    e = clamp(kv + q - g0, 0, M)  keys on g after it (the new ones land on g where e > c)
    prefill chunk: chunk_kv q*c, chunk_sq q*(e - c), context e, tile work (wide, mid, small) over c + (e - c)/2
    decode:        where the sequence has keys on g: decodes 1, decode_kv c, context e, span c

and its q query tokens (projections, MLP, sampling) count on
    every group   when the groups replicate one batch (`KVCacheManager.per_group_batches` off:
                  the engine today, `model/llama.py`)
    its owner     when each group runs its own batch (Mnemosyne): the group holding its last
                  position; the other groups holding its keys only add their attention share

Each group's time is the runtime predictor's linear model over its own feature sums
(`predictor.BatchCost`); the iteration's predicted time is the largest. This is the Medha rule
"the iteration time is the slowest group's". The q*(e-c) term is exact for the group that takes
the whole chunk and splits a chunk that straddles two groups. The prefill-time cache of LARS
(Algorithm 3) still simulates one group (it overestimates the remaining time of prefills that
spread over several groups). Pure Python.
"""

from __future__ import annotations

from medha_jax.kvp_layout import owner
from medha_jax.scheduler.attention_tiling import tile_walks, top_two
from medha_jax.scheduler.predictor import BatchCost, RuntimePredictor


class KVPBatchCost:
    """Same interface as `BatchCost` (add, time, time_with) over `kvp` groups; each sequence is
    given with its first group (0 when every request starts on group 0)."""

    __slots__ = ("groups", "M", "kvp", "replicated", "tiling")

    def __init__(self, predictor: RuntimePredictor, group_tokens: int, kvp: int, raw: bool = False,
                 replicated: bool = True):
        self.groups = [BatchCost(predictor, raw=raw) for _ in range(kvp)]
        self.M = group_tokens
        self.kvp = kvp
        self.replicated = replicated
        self.tiling = predictor.tiling

    def _parts(self, q: int, kv: int, h: int, g: int) -> tuple | None:
        """(tokens, chunk_kv, chunk_sq, decodes, decode_kv, context, wide-, mid- and small-tile work,
        tile steps, decode kv on g) of one sequence on group g, or None when g has nothing of it to do."""
        M = self.M
        base = ((g - h) % self.kvp) * M  # the block of the sequence that g holds
        c = min(max(kv - base, 0), M)
        e = min(max(kv + q - base, 0), M)
        own = self.replicated or owner(q, kv, h, M, self.kvp) == g
        t = q if own else 0
        if not e:
            return (t, 0, 0, 0, 0, 0, 0.0, 0.0, 0.0, 0.0, 0) if own else None
        if q == 1 and kv > 0:
            return t, 0, 0, 1, c, e, 0.0, 0.0, 0.0, 0.0, c
        return t, q * c, q * (e - c), 0, 0, e, *tile_walks(self.tiling, q, c, e - c), 0

    def add(self, q: int, kv: int, h: int = 0) -> None:
        for g, cost in enumerate(self.groups):
            parts = self._parts(q, kv, h, g)
            if parts is None:
                continue
            t, ckv, csq, d, dkv, ctx, tiles, mid, small, steps, gkv = parts
            cost.n += 1
            cost.tokens += t
            cost.chunk_kv += ckv
            cost.chunk_sq += csq
            cost.decodes += d
            cost.decode_kv += dkv
            cost.max_ctx = max(cost.max_ctx, ctx)
            cost.tiles += tiles
            cost.mid += mid
            cost.small += small
            cost.steps += steps
            cost.longest = top_two(cost.longest, gkv)

    def fixed(self) -> float:
        """What every iteration pays however little it holds (`BatchCost.fixed`; the groups run
        in lockstep on one model, so it is each group's)."""
        return self.groups[0].fixed()

    def time(self) -> float:
        return max(cost.time() for cost in self.groups)

    def prefill_time(self) -> float:
        """`BatchCost.prefill_time` of the slowest group."""
        return max(cost.prefill_time() for cost in self.groups)

    def group_time(self, g: int) -> float:
        """Predicted seconds of group g's share alone."""
        return self.groups[g].time()

    def time_with(self, q: int, kv: int, h: int = 0) -> float:
        """Predicted seconds, with q tokens over kv cached ones added, of the slowest group they
        would run on (replicated: of every group). The packer fits a chunk to the budget by it: a
        group already over the budget (say, with decodes alone) does not stop the others' chunks."""
        worst = 0.0
        for g, cost in enumerate(self.groups):
            parts = self._parts(q, kv, h, g)
            if parts is None:
                continue
            tk, ckv, csq, d, dkv, ctx, tiles, mid, small, steps, gkv = parts
            t = cost._t(cost.tokens + tk, cost.chunk_kv + ckv, cost.chunk_sq + csq, cost.decodes + d,
                        cost.decode_kv + dkv, max(cost.max_ctx, ctx), cost.tiles + tiles, cost.mid + mid,
                        cost.small + small, cost.steps + steps, cost.n + 1, top_two(cost.longest, gkv))
            worst = max(worst, t)
        return worst


def batch_cost(predictor: RuntimePredictor, kv_manager, raw: bool = False):
    """A cost accumulator for this KV layout: plain `BatchCost` with one group, else per group."""
    if kv_manager.kvp == 1:
        return BatchCost(predictor, raw=True) if raw else predictor.batch_cost()
    return KVPBatchCost(predictor, kv_manager.max_tokens_per_kvp_group, kv_manager.kvp, raw=raw,
                        replicated=not kv_manager.per_group_batches)


def predict_pairs(predictor: RuntimePredictor, kv_manager, pairs, groups=None, raw: bool = False) -> float:
    """Predicted seconds of an iteration of (q_tokens, kv_len) pairs on this KV layout; `groups`:
    each sequence's first group (None: all 0)."""
    cost = batch_cost(predictor, kv_manager, raw=raw)
    if groups is None or kv_manager.kvp == 1:
        for q, kv in pairs:
            cost.add(q, kv)
    else:
        for (q, kv), h in zip(pairs, groups):
            cost.add(q, kv, h)
    return cost.time()
