"""The Llama decoder, written per device: runs inside `jax.shard_map` over Mesh(kvp, spp, tp).

Data flow of `forward` (shapes per device; T tokens, S sequences, D width, H/tp query heads,
K = KVHr/tp kv heads, Dh head width, F/tp MLP columns, V/tp vocab rows):

Each kvp group runs its own batch of T tokens (`model.inputs`); x is that group's.

    token_ids -> vocab-parallel embedding lookup, psum(tp)            x: [T, D]
    batch metadata -> the attention backend's plan (pallas: the kernels' work lists), once a step
    per local layer (lax.scan over the [L/spp, ...] stack, or on one CPU stage over per-layer
    buffers picked by a switch, `run_layers`; x feature-major [D, T] inside, weights stored
    [out, in]: every projection is W @ y, see `_layer`):
        RMSNorm -> q [H/tp, Dh, T], k/v [K, Dh, T] -> RoPE(q, k) -> token-major q [T, H/tp, Dh],
        k/v [T, K, Dh] (fp8 cache: q, k @ key_rotation)
        kvp == 1: write k/v at slot_mapping into this layer's pages (slot -1 dropped)
                  -> attention_fn over the pages -> o [T, H/tp, Dh]
        kvp > 1:  all_gather(kvp) q/k/v -> [kvp, T, ...] every group's tokens
                  -> write the k/v this group holds (slot_mapping[j] for source group j)
                  -> per source group j: attention_fn of its queries over this group's pages
                     -> (o, lse) [kvp, T, ...] -> all_to_all(kvp): each group gets its own
                     tokens' partials from every group -> log-sum-exp merge -> o [T, H/tp, Dh]
        -> wo, psum(tp) -> residual
        -> RMSNorm -> SwiGLU gate/up [F/tp, T] -> down, psum(tp) -> residual
    rows logits_indices -> final RMSNorm -> lm_head [S, V/tp] -> all_gather(tp) -> [S, V] f32
        (this group's rows)

The pieces (`embed`, `run_layers`, `final_logits`, `next_stage`) are shared by `forward` (one
batch through all stages in turn) and the pipeline tick of `medha_jax.model.pipeline_step`.

The KV cache travels through the layer scan as the full local [L/spp, N, page, K, Dh] arrays in
the carry (fp8: with their scales, `model.kv_cache`) and is updated in place at [layer, slot];
attention reads layer l's pages.
Sharding decisions live in `medha_jax.model.sharding`; this file only uses the collectives they
imply.
"""

from __future__ import annotations

import functools
from typing import Callable

import jax
import jax.numpy as jnp
from jax import lax

from medha_jax.model import kv_cache
from medha_jax.model.config import LlamaConfig
from medha_jax.model.inputs import ModelInputs
from medha_jax.model.rope import apply_rope, inv_freq
from pallas_kernels.merge import merge_attention

AttentionFn = Callable[..., tuple[jnp.ndarray, jnp.ndarray]]


def rms_norm(x: jnp.ndarray, w: jnp.ndarray, eps: float) -> jnp.ndarray:
    """HF LlamaRMSNorm: normalise in f32, cast back, then scale. x: [..., D], w: [D]."""
    xf = x.astype(jnp.float32)
    xf = xf * lax.rsqrt(jnp.mean(xf * xf, axis=-1, keepdims=True) + eps)
    return w * xf.astype(x.dtype)


def rms_norm_columns(x: jnp.ndarray, w: jnp.ndarray, eps: float) -> jnp.ndarray:
    """`rms_norm` of feature-major x: [D, T] (one token per column), w: [D]."""
    xf = x.astype(jnp.float32)
    xf = xf * lax.rsqrt(jnp.mean(xf * xf, axis=0, keepdims=True) + eps)
    return w[:, None] * xf.astype(x.dtype)


def psum_tp(x: jnp.ndarray) -> jnp.ndarray:
    """Sum of x over the tp axis: x itself when tp == 1, where XLA:CPU would still run an all-reduce
    thunk that copies x (3% of a CPU prefill step, `benchmarks/step_profile_cpu.py`)."""
    return x if lax.axis_size("tp") == 1 else lax.psum(x, "tp")


def embed_lookup(embed: jnp.ndarray, token_ids: jnp.ndarray) -> jnp.ndarray:
    """Vocab-parallel lookup. embed: [V/tp, D] rows of this device; token_ids: i32[T] -> [T, D]."""
    rows = embed.shape[0]
    local = token_ids - lax.axis_index("tp") * rows  # local: i32[T]
    mine = (local >= 0) & (local < rows)
    x = jnp.where(mine[:, None], embed[jnp.clip(local, 0, rows - 1)], 0)  # x: [T, D]
    return psum_tp(x)


def local_inputs(inp: ModelInputs, stacked: bool) -> ModelInputs:
    """This device's block of the step inputs with the mesh dims dropped: every field loses its
    kvp group dim (and the stage dim when `stacked`)."""
    n = 2 if stacked else 1
    return jax.tree.map(lambda a: a.reshape(a.shape[n:]), inp)


def _source_cu_q_lens(inp: ModelInputs) -> jnp.ndarray:
    """cu_q_lens of every kvp group's batch: i32[kvp, S+1] (this group's alone when kvp == 1)."""
    if lax.axis_size("kvp") == 1:
        return inp.cu_q_lens[None]
    return lax.all_gather(inp.cu_q_lens, "kvp")


def _pages(kv_k) -> jnp.ndarray:
    """The page values [Ll, N, page, K, Dh] (fp8 caches carry scales beside them)."""
    return kv_k.values if isinstance(kv_k, kv_cache.QuantizedPages) else kv_k


def attention_plans(attention_fn: AttentionFn, kv_k, inp: ModelInputs, cus, num_tokens: int, num_heads: int):
    """The attention backend's per-step plan for each kvp source group's batch, built from the step's
    metadata alone (the pallas kernels' work lists), or None for a backend without one (xla).
    cus: `_source_cu_q_lens(inp)`.

    Built once before the layer loop and closed over by it, so it runs once a step: inside the
    scan XLA:GPU ran it in every layer (a sort and searchsorted loops per layer on an H200)."""
    make = getattr(attention_fn, "make_plan", None)
    if make is None:
        return None
    _, N, page, K, _ = _pages(kv_k).shape
    return [make(inp.page_table[j], cus[j], inp.q_offsets[j], inp.kv_lens[j], num_tokens=num_tokens,
                 num_heads=num_heads, kv_heads=K, page_size=page, num_pages=N) for j in range(cus.shape[0])]


def _attend(attention_fn: AttentionFn, q, k, v, kv_k, kv_v, layer, inp: ModelInputs, scale: float, cus, plans):
    """Write this step's K/V and attend: (o [T, H/tp, Dh], kv_k, kv_v). cus: every kvp group's
    cu_q_lens i32[kvp, S+1] (`_source_cu_q_lens`); plans: `attention_plans`.

    kvp > 1: each group holds a share of some sequences' keys (a long one's earlier blocks live
    on other groups than its owner). Every group all-gathers the query, key and value tokens of
    every group's batch (proportional to tokens, never to KV length), writes the keys it holds,
    attends every group's queries to its own pages (a sequence it holds nothing of has kv_len 0:
    lse -inf), and all_to_all returns each group's partial outputs to the tokens' owners, which
    merge them by log-sum-exp."""
    groups = lax.axis_size("kvp")
    if groups == 1:  # nothing to exchange: this group's own tokens are every token
        qs, ks, vs = q[None], k[None], v[None]
    else:
        qs, ks, vs = (lax.all_gather(a, "kvp") for a in (q, k, v))  # qs: [kvp, T, H/tp, Dh]; ks, vs: [kvp, T, K, Dh]
    for j in range(groups):
        kv_k = kv_cache.write(kv_k, layer, inp.slot_mapping[j], ks[j], cus[j])
        kv_v = kv_cache.write(kv_v, layer, inp.slot_mapping[j], vs[j], cus[j])
    # Attention reads one layer without slicing it out: slicing kv_k[layer] made XLA copy a whole
    # layer of cache every layer of every step (step time grew with the cache size, not the batch).
    k_pages, v_pages, table, kv_scales = kv_cache.layer_view(kv_k, kv_v, layer, inp.page_table)
    parts = []
    for j in range(groups):
        if plans is not None:  # the step's plan, moved to this layer's pages of the flattened cache
            kv_scales["plan"] = plans[j].with_first_page(layer * _pages(kv_k).shape[1])
        parts.append(attention_fn(qs[j], k_pages, v_pages, table[j], cus[j], inp.q_offsets[j], inp.kv_lens[j],
                                  scale=scale, **kv_scales))
    if groups == 1:
        return parts[0][0], kv_k, kv_v  # out: [T, H/tp, Dh]
    outs = jnp.stack([o for o, _ in parts])  # outs: [kvp, T, H/tp, Dh], row j: group j's queries
    lses = jnp.stack([lse for _, lse in parts])  # lses: f32[kvp, T, H/tp]
    outs = lax.all_to_all(outs, "kvp", 0, 0, tiled=True)  # row i: group i's partials of this group's queries
    lses = lax.all_to_all(lses, "kvp", 0, 0, tiled=True)
    return merge_attention(outs, lses)[0], kv_k, kv_v


class _Slice:
    """A layer's weights as arrays: the scan's slice of the stack, or one layer's own buffers."""

    def __init__(self, lp):
        self.lp = lp  # name -> array, no layer axis

    def vector(self, name):
        return self.lp[name]

    def project(self, eq, name, y):
        return jnp.einsum(eq, self.lp[name], y)


class _Switch:
    """Layer `layer` (traced) of per-layer buffers (`sharding.unstack_layers`): each projection is a
    switch over the layers whose branch l multiplies by layer l's own buffer, which XLA passes
    without a copy; the norm vectors are indexed out of a stack (a few KB)."""

    def __init__(self, layers, norms, layer):
        self.layers, self.norms, self.layer = layers, norms, layer

    def vector(self, name):
        return self.norms[name][self.layer]

    def project(self, eq, name, y):
        return lax.switch(self.layer, [functools.partial(jnp.einsum, eq, lp[name]) for lp in self.layers], y)


def _layer(cfg: LlamaConfig, freq, inp: ModelInputs, attention_fn: AttentionFn, cus, plans, carry, xs):
    """One decoder layer on feature-major activations: x: [D, T] (a token per column) and weights
    stored [out, in], so every projection is W @ y, the form XLA:CPU runs fastest at decode batch
    sizes (`sharding.PARAM_AXES`); attention gets its q/k/v token-major."""
    x, kv_k, kv_v = carry  # x: [D, T]; kv_k, kv_v: [Ll, N, page, K, Dh]
    w, layer = xs  # w: this layer's weights (`_Slice` or `_Switch`), layer: i32 index in the stage
    y = rms_norm_columns(x, w.vector("attn_norm"), cfg.rms_norm_eps)  # y: [D, T]
    q = w.project("hkd,dt->hkt", "wq", y)  # q: [H/tp, Dh, T]
    k = w.project("hkd,dt->hkt", "wk", y)  # k: [K, Dh, T]
    v = w.project("hkd,dt->hkt", "wv", y)  # v: [K, Dh, T]
    q = apply_rope(q, inp.positions, freq).transpose(2, 0, 1)  # q: [T, H/tp, Dh]
    k = apply_rope(k, inp.positions, freq).transpose(2, 0, 1)  # k: [T, K, Dh]
    v = v.transpose(2, 0, 1)  # v: [T, K, Dh]
    if isinstance(kv_k, kv_cache.QuantizedPages):  # fp8 keys are stored rotated (`kv_cache`)
        q, k = kv_cache.rotate_for_fp8(q), kv_cache.rotate_for_fp8(k)
    attn, kv_k, kv_v = _attend(attention_fn, q, k, v, kv_k, kv_v, layer, inp, cfg.head_dim ** -0.5, cus,
                               plans)  # [T, H/tp, Dh]
    o = w.project("dhk,thk->dt", "wo", attn.astype(x.dtype))  # o: [D, T] partial sum
    x = x + psum_tp(o)
    y = rms_norm_columns(x, w.vector("mlp_norm"), cfg.rms_norm_eps)
    g = w.project("fd,dt->ft", "w_gate", y)  # g: [F/tp, T]
    u = w.project("fd,dt->ft", "w_up", y)
    m = w.project("df,ft->dt", "w_down", jax.nn.silu(g) * u)  # m: [D, T] partial sum
    x = x + psum_tp(m)
    return (x, kv_k, kv_v), None


def embed(params, inp: ModelInputs) -> jnp.ndarray:
    """Token embeddings x: [T, D] in the params' dtype."""
    return embed_lookup(params["embed"], inp.token_ids).astype(params["embed"].dtype)


def run_layers(params, kv_k, kv_v, x, inp: ModelInputs, cfg: LlamaConfig, attention_fn: AttentionFn,
               unroll: int = 1):
    """This stage's layers over x: [T, D] -> (x, kv_k, kv_v). params["layers"]: the local
    [L/spp, ...] stack, or a list of per-layer buffers (`sharding.unstack_layers`, spp == 1).

    unroll: layers per loop iteration; >= the local layer count unrolls the loop away. Over a
    stack, the loop reads layer l's weights through a slice at the loop's index, which XLA:CPU
    and XLA:GPU copy out before their gemms read them (an 8B decode tick on an H200: 7.6 ms of
    such copies, TPOT 21.1 ms scanned vs 8.2 ms unrolled, benchmarks/results/h200/run7_profile_vs_hf);
    unrolled compiles several times longer, so the loop stays the default. Over per-layer
    buffers the loop picks each projection's weights with a switch (`_Switch`), so nothing is
    copied and the loop body (attention included) is still compiled once."""
    layers = params["layers"]
    per_layer = isinstance(layers, list)
    n_local = len(layers) if per_layer else layers["wq"].shape[0]
    heads = (layers[0] if per_layer else layers)["wq"].shape[-3]  # wq: [(L/spp,) H/tp, Dh, D]
    # what depends on the step's metadata alone, once a step rather than once a layer
    cus = _source_cu_q_lens(inp)  # cus: i32[kvp, S+1] (an all_gather over kvp when kvp > 1)
    plans = attention_plans(attention_fn, kv_k, inp, cus, x.shape[0], heads)
    layer_fn = functools.partial(_layer, cfg, inv_freq(cfg), inp, attention_fn, cus, plans)
    carry = (x.T, kv_k, kv_v)  # the loop carries x feature-major: [D, T]
    index = jnp.arange(n_local, dtype=jnp.int32)
    if per_layer and unroll >= n_local:
        for i, lp in enumerate(layers):
            carry, _ = layer_fn(carry, (_Slice(lp), index[i]))
    elif per_layer:
        norms = {k: jnp.stack([lp[k] for lp in layers]) for k in ("attn_norm", "mlp_norm")}  # [L, D] each
        carry, _ = lax.scan(lambda c, i: layer_fn(c, (_Switch(layers, norms, i), i)), carry, index, unroll=unroll)
    else:
        carry, _ = lax.scan(lambda c, xs: layer_fn(c, (_Slice(xs[0]), xs[1])), carry, (layers, index),
                            unroll=True if unroll >= n_local else unroll)
    x, kv_k, kv_v = carry
    return x.T, kv_k, kv_v


def final_logits(params, x, inp: ModelInputs, cfg: LlamaConfig) -> jnp.ndarray:
    """Rows logits_indices of the last hidden state x: [T, D] -> logits f32[S, V]."""
    h = rms_norm(x[inp.logits_indices], params["final_norm"], cfg.rms_norm_eps)  # h: [S, D]
    head = params["embed"] if cfg.tie_word_embeddings else params["lm_head"]  # head: [V/tp, D]
    logits = jnp.einsum("sd,vd->sv", h, head, preferred_element_type=jnp.float32)  # [S, V/tp]
    if lax.axis_size("tp") > 1:
        logits = lax.all_gather(logits, "tp", axis=1, tiled=True)
    logits = logits[:, : cfg.vocab_size]  # f32[S, V]
    return logits.astype(jnp.float32)


def next_stage(x: jnp.ndarray) -> jnp.ndarray:
    """Send x to the next pipeline stage (stage 0 receives zeros)."""
    n = lax.axis_size("spp")
    return lax.ppermute(x, "spp", [(i, i + 1) for i in range(n - 1)])


def forward(params, kv_k, kv_v, inp: ModelInputs, cfg: LlamaConfig, attention_fn: AttentionFn):
    """Per-device forward of one batch through every stage. Returns (logits f32[S, vocab_size]
    of this kvp group's batch, kv_k, kv_v) with the new K/V written; logits are replicated over
    spp and tp.

    params: per-device slices of the tree in `sharding.PARAM_AXES`; kv_k, kv_v: [L/spp, N/kvp,
    page, K, Dh]; inp: this device's `ModelInputs` block (every field [1, ...]: this kvp
    group's); attention_fn: the paged-attention contract of `pallas_kernels.reference`.

    With spp > 1 the batch walks the stages one after another (round r: stage r runs; the
    others compute on nothing and write no K/V), which is spp times the work of one stage: the
    serving path pipelines microbatches instead (`model.pipeline_step`); this is the plain
    reference that tests and simple loops use.
    """
    inp = local_inputs(inp, stacked=False)
    spp = lax.axis_size("spp")
    stage = lax.axis_index("spp")
    x = embed(params, inp)  # x: [T, D]
    for r in range(spp):
        mine = inp.replace(slot_mapping=jnp.where(stage == r, inp.slot_mapping, -1))
        x, kv_k, kv_v = run_layers(params, kv_k, kv_v, x, mine, cfg, attention_fn)
        if r < spp - 1:
            x = next_stage(x)
    logits = final_logits(params, x, inp, cfg)
    if spp > 1:  # the last stage holds the real logits
        logits = lax.psum(jnp.where(stage == spp - 1, logits, 0.0), "spp")
    return logits, kv_k, kv_v
