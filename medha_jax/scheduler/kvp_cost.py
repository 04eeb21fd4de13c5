"""KVP-aware iteration cost: every kvp group runs the whole batch; the slowest group sets the time.

The model replicates the batch over the kvp groups (each group computes every token's
projections and MLP, and attention of every query over the keys it holds; `model/llama.py`), so
group g's share of a sequence with q new tokens after kv cached ones, with M positions per
group (group g holds [g*M, (g+1)*M)):

    c = clamp(kv - g*M, 0, M)      keys of the sequence cached on g before the iteration
    e = clamp(kv + q - g*M, 0, M)  keys on g after it (the new ones land on g where e > c)
    prefill chunk: tokens q, chunk_kv q*c, chunk_sq q*(e - c), context e, tile work over c + (e - c)/2
    decode:        tokens 1; where the sequence has keys on g: decodes 1, decode_kv c, context e,
                   decode span up to c (every sequence is a slot of every group's batch)

and each group's time is the runtime predictor's linear model over its own feature sums
(`predictor.BatchCost`); the iteration's predicted time is the largest. This is the Medha rule
"the iteration time is the slowest group's". The q*(e-c) term is exact for the group that takes
the whole chunk and splits a chunk that straddles two groups. The prefill-time cache of LARS
(Algorithm 3) still simulates one group (it overestimates the remaining time of prefills that
spread over several groups). Pure Python.
"""

from __future__ import annotations

from medha_jax.scheduler.predictor import BatchCost, RuntimePredictor, tile_work


class KVPBatchCost:
    """Same interface as `BatchCost` (add, add_decodes, time, time_with) over `kvp` groups."""

    __slots__ = ("groups", "M")

    def __init__(self, predictor: RuntimePredictor, group_tokens: int, kvp: int, raw: bool = False):
        self.groups = [BatchCost(predictor, raw=raw) for _ in range(kvp)]
        self.M = group_tokens

    def _parts(self, q: int, kv: int, g: int) -> tuple:
        """(tokens, chunk_kv, chunk_sq, decodes, decode_kv, context, tile work, decode kv on g) of one
        sequence on group g."""
        base = g * self.M
        c = min(max(kv - base, 0), self.M)
        e = min(max(kv + q - base, 0), self.M)
        if q == 1 and kv > 0:
            return (1, 0, 0, 1, c, e, 0.0, c) if e else (1, 0, 0, 0, 0, 0, 0.0, 0)
        tiles = tile_work(q, c, e - c) if e else 0.0
        return q, q * c, q * (e - c), 0, 0, e, tiles, 0

    def add(self, q: int, kv: int) -> None:
        for g, cost in enumerate(self.groups):
            t, ckv, csq, d, dkv, ctx, tiles, gkv = self._parts(q, kv, g)
            cost.n += 1
            cost.tokens += t
            cost.chunk_kv += ckv
            cost.chunk_sq += csq
            cost.decodes += d
            cost.decode_kv += dkv
            cost.max_ctx = max(cost.max_ctx, ctx)
            cost.tiles += tiles
            cost.max_dkv = max(cost.max_dkv, gkv)

    def add_decode_seqs(self, kvs) -> None:
        """Decodes with these cached lengths."""
        for kv in kvs:
            self.add(1, kv)

    def time(self) -> float:
        return max(cost.time() for cost in self.groups)

    def time_with(self, q: int, kv: int) -> float:
        """Predicted seconds if q tokens over kv cached ones were added (the slowest group)."""
        worst = 0.0
        for g, cost in enumerate(self.groups):
            t, ckv, csq, d, dkv, ctx, tiles, gkv = self._parts(q, kv, g)
            worst = max(worst, cost._t(cost.tokens + t, cost.chunk_kv + ckv, cost.chunk_sq + csq,
                                       cost.decodes + d, cost.decode_kv + dkv, max(cost.max_ctx, ctx),
                                       cost.tiles + tiles, cost.n + 1, max(cost.max_dkv, gkv)))
        return worst


def batch_cost(predictor: RuntimePredictor, kv_manager, raw: bool = False):
    """A cost accumulator for this KV layout: plain `BatchCost` with one group, else per group."""
    if kv_manager.kvp == 1:
        return BatchCost(predictor, raw=True) if raw else predictor.batch_cost()
    return KVPBatchCost(predictor, kv_manager.max_tokens_per_kvp_group, kv_manager.kvp, raw=raw)


def predict_pairs(predictor: RuntimePredictor, kv_manager, pairs, raw: bool = False) -> float:
    """Predicted seconds of an iteration of (q_tokens, kv_len) pairs on this KV layout."""
    cost = batch_cost(predictor, kv_manager, raw=raw)
    for q, kv in pairs:
        cost.add(q, kv)
    return cost.time()
