"""On-device sampling with per-request parameters held in arrays (never static arguments).

logits f32[S, V] -> (token i32[S], logprob f32[S], top ids i32[S, K], top logprobs f32[S, K]) with
K = min(MAX_TOP_LOGPROBS, V): the model's K most likely tokens, most likely first, from the same
sort the sampler makes anyway (OpenAI's `top_logprobs`; the host keeps each request's first N). Each row applies its own temperature
(0 = greedy), top-k (0 = off) and top-p, and draws with its own key
`fold_in(PRNGKey(seed), step)`, where step is the number of tokens the request has generated,
so a seeded request gives the same tokens whatever else shares its batch. The returned logprob
is the model's log-probability of the chosen token (before temperature, top-k and top-p), or of
the row's `target` token where one is given (a prompt being scored).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from medha_jax.sampling_params import MAX_TOP_LOGPROBS


class SamplingArrays(NamedTuple):
    temperature: jax.Array  # f32[S]
    top_k: jax.Array  # i32[S], 0 = off
    top_p: jax.Array  # f32[S]
    seed: jax.Array  # u32[S]
    step: jax.Array  # i32[S]
    target: jax.Array  # i32[S]: whose logprob the row returns; -1 = the chosen token's


def sample(logits: jax.Array, p: SamplingArrays) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    S, V = logits.shape
    logits = logits.astype(jnp.float32)  # logits: f32[S, V]
    logprobs = jax.nn.log_softmax(logits, axis=-1)
    greedy_tok = jnp.argmax(logits, axis=-1).astype(jnp.int32)  # greedy_tok: i32[S]

    temp = jnp.where(p.temperature > 0, p.temperature, 1.0)
    scaled = logits / temp[:, None]
    order = jnp.argsort(-scaled, axis=-1)  # order: i32[S, V], most likely first (temperature keeps the order)
    top_ids = order[:, : min(MAX_TOP_LOGPROBS, V)].astype(jnp.int32)  # top_ids: i32[S, K]
    top_lps = jnp.take_along_axis(logprobs, top_ids, axis=-1)  # top_lps: f32[S, K]
    sorted_logits = jnp.take_along_axis(scaled, order, axis=-1)
    rank = jnp.arange(V)[None, :]
    k = jnp.where(p.top_k > 0, jnp.minimum(p.top_k, V), V)
    keep = rank < k[:, None]
    probs = jax.nn.softmax(jnp.where(keep, sorted_logits, -jnp.inf), axis=-1)
    cum_before = jnp.cumsum(probs, axis=-1) - probs  # mass of strictly more likely tokens
    keep = keep & (cum_before < p.top_p[:, None])  # the first token is always kept
    masked = jnp.where(keep, sorted_logits, -jnp.inf)

    keys = jax.vmap(lambda s, t: jax.random.fold_in(jax.random.PRNGKey(s), t))(p.seed, p.step)
    gumbel = jax.vmap(lambda key: jax.random.gumbel(key, (V,), jnp.float32))(keys)  # gumbel: f32[S, V]
    choice = jnp.argmax(masked + gumbel, axis=-1)
    sampled_tok = jnp.take_along_axis(order, choice[:, None], axis=-1)[:, 0].astype(jnp.int32)

    tok = jnp.where(p.temperature > 0, sampled_tok, greedy_tok)
    scored = jnp.where(p.target >= 0, p.target, tok)  # scored: i32[S]
    return tok, jnp.take_along_axis(logprobs, scored[:, None], axis=-1)[:, 0], top_ids, top_lps
