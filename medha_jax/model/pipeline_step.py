"""The serving step as two programs: the tick (one per shape bucket) and the sampler (one per
sequence count), over Mesh(kvp, spp, tp).

One tick = every stage runs its layers on the microbatch in front of it, then activations move
one stage on. Per device (stage s = axis_index("spp"), T tokens, D width):

    make_step:
    inp row s (the microbatch fed s ticks ago; rows are stacked on the host, sharded over spp;
        each kvp group runs its own batch of it)
    x = embed(token_ids) on stage 0, else acts[:T] (what stage s-1 sent last tick)   x: [T, D]
    x -> this stage's layers (K/V written where it lives, kvp attention exchange and merge)
    -> logits of row s                                              logits: [1, 1, S, V] per device
    acts[:T] <- ppermute(x, s -> s+1)                            acts: [1, 1, T_max, D] per device
    make_sampler:
    logits -> sample with `samp` (the sampling arrays of the exiting microbatch: only the last
        stage's draw is kept, broadcast over spp by a masked psum of [S] ints)
        -> all_gather(kvp), reordered into the step's row order (`out_rows`)

So the microbatch fed at tick t leaves the last stage at tick t + spp - 1 with its sampled
tokens. Every stage computes logits (SPMD), but ticks are lockstep, so that costs the last
stage's time only. `acts` is sized for the largest token bucket and sliced to the tick's T, so
consecutive ticks may use different buckets; the caller donates it with the KV cache. With
spp == 1 there is no activation state (`acts` is None) and a tick is the plain forward. The
sampler depends on the sequence count alone, so it is its own program: compiled inside every
bucket's tick it was ~30% of each bucket's compile (benchmarks/results/test_compile_profile_cpu.md).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from medha_jax.model import sharding
from medha_jax.model.config import LlamaConfig
from medha_jax.model.inputs import ModelInputs
from medha_jax.model.llama import AttentionFn, embed, final_logits, local_inputs, next_stage, run_layers


def _tick(params, kv_k, kv_v, acts, inp: ModelInputs, feed_index, prev_tokens, *, cfg: LlamaConfig,
          attention_fn: AttentionFn, layer_unroll: int):
    inp = local_inputs(inp, stacked=True)
    feed_index = feed_index[0]  # feed_index: i32[T], this group's tokens
    spp = lax.axis_size("spp")
    # Pending token ids (asynchronous scheduling) come from the previous tick's samples, on the device.
    ids = jnp.where(feed_index >= 0, prev_tokens[jnp.maximum(feed_index, 0)], inp.token_ids)  # ids: i32[T]
    inp = inp.replace(token_ids=ids)
    x = embed(params, inp)  # x: [T, D]
    T = x.shape[0]
    if spp > 1:
        stage = lax.axis_index("spp")
        x = jnp.where(stage == 0, x, acts[0, 0, :T].astype(x.dtype))
    x, kv_k, kv_v = run_layers(params, kv_k, kv_v, x, inp, cfg, attention_fn, unroll=layer_unroll)
    logits = final_logits(params, x, inp, cfg)  # logits: f32[S, V], this stage's microbatch
    if spp > 1:
        acts = lax.dynamic_update_slice(acts, next_stage(x)[None, None].astype(acts.dtype), (0, 0, 0, 0))
    return logits[None, None], kv_k, kv_v, acts


def _sample_rows(logits, samp, out_rows, *, sample_fn, max_seqs: int):
    logits = logits[0, 0]  # logits: f32[S, V], this stage's and group's rows
    samp = jax.tree.map(lambda a: a[0], samp)  # this group's rows: [S]
    # tok: i32[S]; logprob: f32[S]; top_ids: i32[S, K]; top_lps: f32[S, K]
    tok, logprob, top_ids, top_lps = sample_fn(logits, samp)
    spp = lax.axis_size("spp")
    if spp > 1:  # only the last stage's rows are the exiting microbatch's
        last = lax.axis_index("spp") == spp - 1
        tok, top_ids = (lax.psum(jnp.where(last, a, 0), "spp") for a in (tok, top_ids))
        logprob, top_lps = (lax.psum(jnp.where(last, a, 0.0), "spp") for a in (logprob, top_lps))
    # Every group's rows, in the step's row order (out_rows: i32[kvp*S] -> group*S + row), replicated.
    tok, logprob, top_ids, top_lps = (lax.all_gather(a, "kvp", tiled=True)[out_rows]
                                      for a in (tok, logprob, top_ids, top_lps))
    R = max_seqs * lax.axis_size("kvp")
    tok = jnp.pad(tok, (0, R - tok.shape[0]))  # tok: i32[kvp*max_seqs], whatever the bucket
    return tok, logprob, top_ids, top_lps


def make_step(cfg: LlamaConfig, mesh: Mesh, attention_fn: AttentionFn, layer_unroll: int = 1,
              per_layer: bool = False):
    """`(params, kv_k, kv_v, acts, inp, feed_index, prev_tokens) -> (logits f32[spp, kvp, S, V],
    kv_k, kv_v, acts)`: one tick up to the logits; `make_sampler` draws from them.

    inp: `ModelInputs` with a leading [spp] stage dim on every field (row s = the microbatch at
    stage s), then the kvp group dim. feed_index i32[kvp, T]: for the microbatch entering stage
    0, where >= 0 its token id is prev_tokens[feed_index] (prev_tokens: the previous tick's
    sampled `tokens`, so a sampled token feeds the next step without a host round trip). The
    logits are each stage's (row s: the microbatch at stage s, only the last stage's being the
    exiting one's), each kvp group's, replicated over tp: sharded P("spp", "kvp"). acts:
    `init_acts(...)` or None when spp == 1. layer_unroll: layers per iteration of the layer loop
    (`llama.run_layers`). per_layer: params["layers"] is `sharding.unstack_layers`'s list (spp == 1).
    Jittable; donate kv_k, kv_v and acts.
    """
    kv = sharding.KV_CACHE_SPEC
    per_device = functools.partial(_tick, cfg=cfg, attention_fn=attention_fn, layer_unroll=layer_unroll)
    common = dict(mesh=mesh, check_vma=False)  # see make_forward: the kernels carry no vma types
    inputs = sharding.input_specs(stacked=True)
    grouped = sharding.SAMPLING_SPEC
    if sharding.layout(cfg, mesh).spp == 1:
        mapped = jax.shard_map(
            lambda p, k, v, i, f, t: per_device(p, k, v, None, i, f, t)[:3], **common,
            in_specs=(sharding.param_specs(cfg, per_layer), kv, kv, inputs, grouped, P()),
            out_specs=(sharding.LOGITS_SPEC, kv, kv))

        def step(params, kv_k, kv_v, acts, inp, feed_index, prev_tokens):
            return (*mapped(params, kv_k, kv_v, inp, feed_index, prev_tokens), None)

        return step
    return jax.shard_map(
        per_device, **common,
        in_specs=(sharding.param_specs(cfg, per_layer), kv, kv, sharding.ACTS_SPEC, inputs, grouped, P()),
        out_specs=(sharding.LOGITS_SPEC, kv, kv, sharding.ACTS_SPEC))


def make_sampler(mesh: Mesh, sample_fn, max_seqs: int):
    """`(logits f32[spp, kvp, S, V], samp, out_rows) -> (tokens i32[kvp*max_seqs], logprobs
    f32[kvp*S], top_ids i32[kvp*S, K], top_logprobs f32[kvp*S, K])`: the exiting microbatch's
    draw, a program of its own so it is compiled once per sequence count S, not once per shape
    bucket of the tick (it was ~30% of each bucket's compile on a CPU).

    logits: `make_step`'s; samp: the sampling arrays of the microbatch at the last stage, [kvp,
    S] (group g's logits rows); sample_fn(logits f32[S, V], samp) -> (tokens, logprobs, top
    ids, top logprobs). Every stage samples its own rows (SPMD), the last stage's are kept
    (a masked psum of [S] ints over spp). out_rows i32[kvp*S]: the exiting microbatch's rows in
    its step order, as group * S + row; the outputs follow that order (replicated), tokens padded
    to kvp*max_seqs, the same shape for every S (they feed the next tick as `prev_tokens`).
    """
    per_device = functools.partial(_sample_rows, sample_fn=sample_fn, max_seqs=max_seqs)
    return jax.shard_map(per_device, mesh=mesh, check_vma=False,
                         in_specs=(sharding.LOGITS_SPEC, sharding.SAMPLING_SPEC, P()), out_specs=(P(), P(), P(), P()))


def acts_sharding(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, sharding.ACTS_SPEC)


def init_acts(cfg: LlamaConfig, mesh: Mesh, max_tokens: int, dtype) -> jax.Array | None:
    """Zero pipeline activations [spp, kvp, max_tokens, D] (row s on stage s, each group's own);
    None when spp == 1."""
    lay = sharding.layout(cfg, mesh)
    if lay.spp == 1:
        return None
    shape = (lay.spp, lay.kvp, max_tokens, cfg.hidden_size)
    return jax.jit(lambda: jnp.zeros(shape, dtype), out_shardings=acts_sharding(mesh))()
