"""Analytic (roofline) time of one engine iteration on a (tp, spp, kvp) mesh of modelled devices.

  Composition ((q_tokens, kv_len) per sequence)
      -> per kvp group: tokens whose linear layers run there, attention (query, key) pairs and KV
         bytes of the KV shard it holds (progressive onboarding from each sequence's first group
         h: group (h + b) % kvp holds positions [b*M, (b+1)*M), `medha_jax.kvp_layout`). Each
         group runs its own batch (Mnemosyne): a sequence's tokens run on the group holding its
         last position; with `kvp_replicated` every group runs every token (one batch replicated
         over the groups, the design medha-jax's engine runs today)
      -> per layer:  max(GEMM FLOPs / (peak * gemm_eff), weight bytes / (HBM * mem_eff))
                   + prefill attention  max(FLOPs / (peak * attn_eff), KV bytes / (HBM * mem_eff))
                   + decode attention   (same roofline, its own kernel)
                   + unfused elementwise passes over the hidden state
                   + 2 TP all-reduces over NVLink (ring: 2 (tp-1)/tp bytes / bw + latency)
                   + launch overhead
                   slowest kvp group, plus the KVP merge (queries out, partial (o, lse) back over
                   InfiniBand) for the tokens of sequences spanning groups (replicated: all
                   tokens); its cost depends on query tokens only
      -> stage  = ceil(L / spp) layers (+ LM head on the last stage)
      -> iteration latency = L layers + LM head + (spp - 1) stage hand-offs + iteration overhead
         pipeline tick     = one stage + one hand-off + iteration overhead (what SPP streams at)

`predict(composition)` returns the iteration latency, so the model plugs into the scheduler
wherever a fitted `RuntimePredictor` would (`observe` is a no-op: the model does not learn).
Every coefficient comes from `DeviceSpec`, `Efficiency` and `ModelShape`; see docs/simulator.md.
Pure Python, no JAX.
"""

from __future__ import annotations

import math

from medha_jax.hardware.device_specs import DeviceSpec, Efficiency, default_efficiency
from medha_jax.hardware.models import ModelShape
from medha_jax.kvp_layout import owner, shards


def pairs_in_shard(kv: int, q: int, a: int, b: int) -> int:
    """Causal (query, key) pairs of queries at positions [kv, kv+q) against keys in [a, b).

    Query p attends keys [0, p]; its pairs in the shard are clamp(p + 1 - a, 0, b - a)."""
    if b <= a or q <= 0:
        return 0
    lo, hi = kv + 1 - a, kv + q - a  # (p + 1 - a) over the queries, increasing by 1
    width = b - a
    total = 0
    # part below 0 contributes nothing; part in [1, width] is an arithmetic series; above: width
    s_lo, s_hi = max(lo, 1), min(hi, width)
    if s_hi >= s_lo:
        total += (s_lo + s_hi) * (s_hi - s_lo + 1) // 2
    full_lo = max(lo, width + 1)
    if hi >= full_lo:
        total += (hi - full_lo + 1) * width
    return total


class AnalyticPerfModel:
    """Iteration time of a modelled deployment: `model` on `tp * spp * kvp` copies of `device`."""

    def __init__(self, model: ModelShape, device: DeviceSpec, *, tp: int = 1, spp: int = 1, kvp: int = 1,
                 efficiency: Efficiency | None = None, max_tokens_per_kvp_group: int | None = None,
                 kvp_replicated: bool = False):
        for name, v in (("tp", tp), ("spp", spp), ("kvp", kvp)):
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
        if tp > device.devices_per_node:
            raise ValueError(f"tp={tp} exceeds the {device.devices_per_node} devices of one node "
                             f"({device.name}): tensor parallelism stays inside the NVLink domain")
        if model.num_heads % tp:
            raise ValueError(f"tp={tp} does not divide num_heads={model.num_heads} of {model.name}")
        if spp > model.num_layers:
            raise ValueError(f"spp={spp} exceeds the {model.num_layers} layers of {model.name}")
        if kvp > 1 and (max_tokens_per_kvp_group is None or max_tokens_per_kvp_group < 1):
            raise ValueError("kvp > 1 needs max_tokens_per_kvp_group (tokens one kvp group holds per request)")
        self.model, self.device, self.tp, self.spp, self.kvp = model, device, tp, spp, kvp
        self.eff = efficiency if efficiency is not None else default_efficiency(device)
        self.max_tokens_per_kvp_group = max_tokens_per_kvp_group if kvp > 1 else None
        self.kvp_replicated = kvp_replicated and kvp > 1
        e, m = self.eff, model
        kv_shards = min(tp, m.num_kv_heads)  # kv heads beyond tp are split, fewer are replicated
        gemm_rate = device.peak_flops * e.gemm
        attn_rate = device.peak_flops * e.attention
        mem_rate = device.hbm_bandwidth * e.memory
        # per layer, per device
        self._lin_s_per_tok = 2.0 * m.layer_params / tp / gemm_rate
        self._w_s = m.layer_params * m.weight_bytes / tp / mem_rate
        self._pair_s = m.attn_flops_per_pair / tp / attn_rate
        self._kv_s_per_tok = m.kv_bytes_per_token_layer / kv_shards / mem_rate
        self._elem_s_per_tok = e.elementwise_passes * m.hidden_size * m.act_bytes / mem_rate
        act_tok = m.hidden_size * m.act_bytes  # bytes of one token's hidden state
        if tp > 1:
            link = device.nvlink_bandwidth * e.link
            self._ar_lat = 2 * device.nvlink_latency
            self._ar_s_per_tok = 2 * (2.0 * (tp - 1) / tp * act_tok / link)
        else:
            self._ar_lat = self._ar_s_per_tok = 0.0
        self._layer_fixed = self._ar_lat + e.layer_overhead
        # LM head on the last stage: one logit row per sequence
        self._head_s_per_seq = 2.0 * m.hidden_size * m.vocab_size / tp / gemm_rate
        self._head_w_s = m.hidden_size * m.vocab_size * m.weight_bytes / tp / mem_rate
        # SPP hand-off: each TP rank sends 1/tp of the activations to its peer in the next stage,
        # which all-gathers them over NVLink; stages of tp == devices_per_node cross nodes
        stages_per_node = max(1, device.devices_per_node // tp)
        cross = spp > 1 and stages_per_node < spp
        net = (device.net_bandwidth if cross else device.nvlink_bandwidth) * e.link
        self._handoff_lat = (device.net_latency if cross else device.nvlink_latency) + (device.nvlink_latency if tp > 1 else 0.0)
        gather = (tp - 1) / tp * act_tok / (device.nvlink_bandwidth * e.link) if tp > 1 else 0.0
        self._handoff_s_per_tok = act_tok / tp / net + gather
        # KVP merge per layer: queries of spanning sequences out, (o, lse) back, over InfiniBand
        q_tok = m.num_heads * m.head_dim * m.act_bytes / tp
        self._merge_lat = 2 * device.net_latency
        self._merge_s_per_tok = 2 * q_tok / (device.net_bandwidth * e.link)
        self._layers_total = m.num_layers
        self._layers_stage = math.ceil(m.num_layers / spp)

    # ---- description --------------------------------------------------------------------
    @property
    def num_devices(self) -> int:
        return self.tp * self.spp * self.kvp

    @property
    def name(self) -> str:
        rep = "-replicated" if self.kvp_replicated else ""
        return f"{self.model.name}/{self.device.name}x{self.num_devices}/tp{self.tp}-spp{self.spp}-kvp{self.kvp}{rep}"

    def describe(self) -> dict:
        return {"kind": "analytic", "name": self.name, "model": self.model.name, "device": self.device.name,
                "tp": self.tp, "spp": self.spp, "kvp": self.kvp,
                "max_tokens_per_kvp_group": self.max_tokens_per_kvp_group, "kvp_replicated": self.kvp_replicated,
                "efficiency": {f: getattr(self.eff, f) for f in self.eff.__slots__}}

    def kv_capacity_tokens(self, memory_fraction: float = 0.9, activation_reserve: float = 4e9) -> int:
        """KV tokens one kvp group can hold: HBM left after weights and an activation reserve."""
        m = self.model
        weights = (m.layer_params * self._layers_stage + m.vocab_size * m.hidden_size) * m.weight_bytes / self.tp
        free = self.device.hbm_bytes * memory_fraction - weights - activation_reserve
        per_tok = m.kv_bytes_per_token_layer * self._layers_stage / min(self.tp, m.num_kv_heads)
        if free <= 0:
            raise ValueError(f"{self.name}: weights ({weights / 1e9:.1f} GB per device) leave no room for KV")
        return int(free // per_tok)

    # ---- the model -------------------------------------------------------------------------
    def _layer(self, T: int, pf_pairs: int, pf_kv: int, dec_pairs: int, dec_kv: int) -> float:
        """Seconds of one layer on one device for a group's aggregated work."""
        t = self._layer_fixed
        if T:
            lin = T * self._lin_s_per_tok
            t += (lin if lin > self._w_s else self._w_s) + T * (self._elem_s_per_tok + self._ar_s_per_tok)
        if pf_pairs:
            c, r = pf_pairs * self._pair_s, pf_kv * self._kv_s_per_tok
            t += c if c > r else r
        if dec_pairs:
            c, r = dec_pairs * self._pair_s, dec_kv * self._kv_s_per_tok
            t += c if c > r else r
        return t

    @staticmethod
    def sums(seqs) -> tuple[int, int, int, int, int]:
        """(tokens, sequences, prefill pairs, prefill KV tokens, decode KV tokens) of a composition;
        a decode (q == 1) attends to kv + 1 keys, a chunk (q, kv) to q*kv + q(q+1)/2 pairs."""
        T = n = pp = pk = dk = 0
        for q, kv in seqs:
            T += q
            n += 1
            if q == 1:
                dk += kv + 1
            else:
                pp += q * kv + q * (q + 1) // 2
                pk += kv + q
        return T, n, pp, pk, dk

    def layer_time(self, seqs) -> float:
        """Seconds of one decoder layer (slowest kvp group + KVP merge) for `(q, kv)` pairs."""
        if self.kvp == 1:
            T, _, pp, pk, dk = self.sums(seqs)
            return self._layer(T, pp, pk, dk, dk)
        return self._layer_kvp(seqs)[0]

    def time_from_sums(self, T: int, n: int, pp: int, pk: int, dk: int) -> float:
        """`iteration_time` from `sums(seqs)` (kvp == 1 only): O(1), for incremental batch costs."""
        if self.kvp != 1:
            raise ValueError("time_from_sums needs kvp == 1: with kvp > 1 the split over groups matters")
        if n == 0:
            return 0.0
        t = self._layers_total * self._layer(T, pp, pk, dk, dk) + self._head(n) + self.eff.iteration_overhead
        if self.spp > 1:
            t += (self.spp - 1) * self._handoff(T)
        return t

    def _layer_kvp(self, seqs, groups=None) -> tuple[float, int, int]:
        """(seconds of one layer, tokens and sequences of the busiest group) over the kvp groups."""
        M = self.max_tokens_per_kvp_group
        G = self.kvp
        rep = self.kvp_replicated
        T, n = [0] * G, [0] * G
        pp, pk, dp, dk = [0] * G, [0] * G, [0] * G, [0] * G
        span_q = 0
        for i, (q, kv) in enumerate(seqs):
            h = groups[i] if groups is not None else 0
            end = kv + q
            if rep:
                span_q += q
                for g in range(G):
                    T[g] += q
                    n[g] += 1
            else:
                o = owner(q, kv, h, M, G)
                T[o] += q
                n[o] += 1
                if end > M:  # spans groups
                    span_q += q
            for g, a, e in shards(end, h, M, G):
                pairs = pairs_in_shard(kv, q, a, e)
                if q == 1:
                    dp[g] += pairs
                    dk[g] += e - a
                else:
                    pp[g] += pairs
                    pk[g] += e - a
        t = max(self._layer(T[g], pp[g], pk[g], dp[g], dk[g]) for g in range(G))
        if span_q:
            t += self._merge_lat + span_q * self._merge_s_per_tok
        return t, max(T), max(n)

    def _head(self, n_seqs: int) -> float:
        c = n_seqs * self._head_s_per_seq
        return c if c > self._head_w_s else self._head_w_s

    def _handoff(self, T: int) -> float:
        return self._handoff_lat + T * self._handoff_s_per_tok

    def iteration_time(self, seqs, groups=None) -> float:
        """Seconds from a batch entering stage 0 to its tokens leaving the last stage; `groups`:
        each sequence's first kvp group (None: all 0)."""
        if self.kvp == 1:
            return self.time_from_sums(*self.sums(seqs))
        seqs = tuple(seqs)
        if not seqs:
            return 0.0
        layer, T, n = self._layer_kvp(seqs, groups)
        t = self._layers_total * layer + self._head(n) + self.eff.iteration_overhead
        if self.spp > 1:
            t += (self.spp - 1) * self._handoff(T)
        return t

    def stage_time(self, seqs) -> float:
        """Seconds one pipeline stage holds the batch (the slowest stage, incl. the LM head), plus
        its hand-off and the per-batch overhead: the tick at which SPP can feed a new batch."""
        return self.tick_and_latency(seqs)[0]

    def tick_and_latency(self, seqs, groups=None) -> tuple[float, float]:
        """(stage_time, iteration_time) of one batch, computed in one pass."""
        if self.kvp == 1:
            T, n, pp, pk, dk = self.sums(seqs)
            if n == 0:
                return 0.0, 0.0
            layer = self._layer(T, pp, pk, dk, dk)
        else:
            seqs = tuple(seqs)
            if not seqs:
                return 0.0, 0.0
            layer, T, n = self._layer_kvp(seqs, groups)
        fixed = self._head(n) + self.eff.iteration_overhead
        if self.spp == 1:
            t = self._layers_total * layer + fixed
            return t, t
        h = self._handoff(T)
        return (self._layers_stage * layer + fixed + h,
                self._layers_total * layer + fixed + (self.spp - 1) * h)

    # ---- RuntimePredictor interface ------------------------------------------------------------
    def predict(self, composition) -> float:
        """Predicted iteration seconds of a `Composition` (or any iterable of (q, kv) pairs)."""
        return self.iteration_time(getattr(composition, "seqs", composition))

    def observe(self, composition, measured: float) -> None:
        """The analytic model does not learn from measurements."""
