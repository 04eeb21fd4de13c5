"""Every sharding decision of the model in one place: logical axis names -> mesh axes.

The model code and the loader name array dimensions logically ("layers", "heads", ...);
`LOGICAL_TO_MESH` maps each name to a mesh axis of `Mesh(devices, ("kvp", "spp", "tp"))` or to
None (replicated). `PARAM_AXES` / `KV_CACHE_AXES` give every array's logical dimensions, so its
PartitionSpec is derived, never written by hand elsewhere.

Why each choice:
- "layers" -> spp: pipeline stage s holds layers [s*L/spp, (s+1)*L/spp).
- "heads", "kv_heads" -> tp: wq/wk/wv column-parallel (whole heads per device), wo
  row-parallel; the model psums over tp after wo.
- "mlp" -> tp: gate/up column-parallel, down row-parallel; psum over tp after down.
- "vocab" -> tp: embedding and lm_head are vocab-parallel. The embedding lookup is masked to the
  device's vocab rows and psummed; lm_head makes [S, V/tp] logits that are all-gathered over tp.
  The vocab is zero-padded up to a multiple of tp (`Layout.vocab_padded`); padded logits are
  sliced off before they leave the model.
- "pages" -> kvp: each kvp group has its own page pool. "page_slot" and "head_dim": replicated.
- "embed" (the width D): replicated; activations [T, D] are replicated over tp.
- Linear weights are stored output features first, [out, in] (Hugging Face's own layout): the
  layer loop keeps its activations feature-major ([D, T]) and every projection is then a
  [out, in] x [in, T] product, which XLA:CPU runs ~2x faster than [T, in] x [in, out] at decode
  batch sizes and about as fast at prefill sizes (`benchmarks/feature_major_layers.py`).
- Weights are replicated over kvp (each kvp group is a full model replica running its own batch).
- Step inputs (`INPUT_AXES`): "groups" -> kvp (group g gets its own batch: tokens, sequences,
  and for the KV it holds of every group's sequences, indexed by "src" group, slot mapping, q
  offsets, kv lengths and page table); "stage" -> spp (the pipeline tick stacks one microbatch
  per stage, and stage s reads row s); "src", token and sequence dims are replicated.
- Pipeline activations [spp, kvp, T, D] ("stage", "groups", "tokens", "embed"): row s lives on
  stage s, each group's own.
KV-head replication: when tp > num_kv_heads (tp % num_kv_heads == 0) every kv head is copied
tp/num_kv_heads times, so the params and the cache hold `Layout.kv_heads == tp` kv heads and
each device owns exactly one, the one its query heads use. When num_kv_heads % tp == 0 the kv
heads are split. Anything else is an error naming both numbers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import jax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from medha_jax.model.config import LlamaConfig

MESH_AXES = ("kvp", "spp", "tp")

LOGICAL_TO_MESH: dict[str, str | None] = {
    "layers": "spp",
    "vocab": "tp",
    "embed": None,
    "heads": "tp",
    "kv_heads": "tp",
    "head_dim": None,
    "mlp": "tp",
    "pages": "kvp",
    "page_slot": None,
    "groups": "kvp",
    "src": None,
    "stage": "spp",
    "tokens": None,
    "seqs": None,
    "table_cols": None,
}

# Logical dimensions of every parameter (global shapes in `param_shapes`).
PARAM_AXES: dict[str, Any] = {
    "embed": ("vocab", "embed"),  # [Vp, D]
    "layers": {
        "attn_norm": ("layers", "embed"),  # [L, D]
        "wq": ("layers", "heads", "head_dim", "embed"),  # [L, H, Dh, D]
        "wk": ("layers", "kv_heads", "head_dim", "embed"),  # [L, KVHr, Dh, D]
        "wv": ("layers", "kv_heads", "head_dim", "embed"),  # [L, KVHr, Dh, D]
        "wo": ("layers", "embed", "heads", "head_dim"),  # [L, D, H, Dh]
        "mlp_norm": ("layers", "embed"),  # [L, D]
        "w_gate": ("layers", "mlp", "embed"),  # [L, F, D]
        "w_up": ("layers", "mlp", "embed"),  # [L, F, D]
        "w_down": ("layers", "embed", "mlp"),  # [L, D, F]
    },
    "final_norm": ("embed",),  # [D]
    "lm_head": ("vocab", "embed"),  # [Vp, D]; absent when tie_word_embeddings
}

# Each linear layer weight's [in, out] form (the layout seeded random params are drawn in, and that
# checkpoints saved before the [out, in] layout hold) -> ours: ours = w.transpose(perm)
FROM_IN_OUT: dict[str, tuple[int, ...]] = {
    "wq": (0, 2, 3, 1), "wk": (0, 2, 3, 1), "wv": (0, 2, 3, 1),  # [L, D, H, Dh] -> [L, H, Dh, D]
    "wo": (0, 3, 1, 2),  # [L, H, Dh, D] -> [L, D, H, Dh]
    "w_gate": (0, 2, 1), "w_up": (0, 2, 1), "w_down": (0, 2, 1),  # [L, D, F] -> [L, F, D]; [L, F, D] -> [L, D, F]
}

KV_CACHE_AXES = ("layers", "pages", "page_slot", "kv_heads", "head_dim")  # [L, N, page, KVHr, Dh]

# Logical dimensions of the `ModelInputs` fields of one microbatch (cu_q_lens has S+1 entries).
INPUT_AXES: dict[str, tuple[str, ...]] = {
    "token_ids": ("groups", "tokens"),  # [kvp, T]
    "positions": ("groups", "tokens"),  # [kvp, T]
    "slot_mapping": ("groups", "src", "tokens"),  # [kvp, kvp, T]
    "cu_q_lens": ("groups", "seqs"),  # [kvp, S+1]
    "q_offsets": ("groups", "src", "seqs"),  # [kvp, kvp, S]
    "kv_lens": ("groups", "src", "seqs"),  # [kvp, kvp, S]
    "page_table": ("groups", "src", "seqs", "table_cols"),  # [kvp, kvp, S, P]
    "logits_indices": ("groups", "seqs"),  # [kvp, S]
}
ACTS_AXES = ("stage", "groups", "tokens", "embed")  # pipeline activations [spp, kvp, T, D]
SAMPLING_AXES = ("groups", "seqs")  # per logits row of a group's batch [kvp, S] (also feed_index [kvp, T])


def spec(axes: tuple[str, ...]) -> P:
    """PartitionSpec of an array whose dimensions have these logical names."""
    return P(*(LOGICAL_TO_MESH[a] for a in axes))


KV_CACHE_SPEC = spec(KV_CACHE_AXES)  # P("spp", "kvp", None, "tp", None)
ACTS_SPEC = spec(ACTS_AXES)  # P("spp", "kvp", None, None)
SAMPLING_SPEC = spec(SAMPLING_AXES)  # P("kvp", None)
LOGITS_SPEC = spec(("stage", "groups"))  # P("spp", "kvp"): the tick's logits [spp, kvp, S, V], replicated over tp


def input_specs(stacked: bool):
    """PartitionSpec of every `ModelInputs` field; `stacked`: with the pipeline's leading stage dim."""
    from medha_jax.model.inputs import ModelInputs

    lead = ("stage",) if stacked else ()
    return ModelInputs(**{f: spec(lead + axes) for f, axes in INPUT_AXES.items()})


@dataclass(frozen=True, slots=True)
class Layout:
    """Sizes that depend on the mesh as well as the model."""

    tp: int
    spp: int
    kvp: int
    kv_heads: int
    """kv heads held by params and cache (num_kv_heads, or tp when replicated)."""
    kv_repeat: int
    """Copies of each checkpoint kv head (kv_heads // num_kv_heads)."""
    vocab_padded: int
    """vocab_size rounded up to a multiple of tp."""


def mesh_degrees(mesh: Mesh | Mapping[str, int]) -> dict[str, int]:
    """{"kvp", "spp", "tp"} -> degree, from a Mesh or a dict (missing axes are 1)."""
    shape = dict(mesh.shape) if isinstance(mesh, Mesh) else dict(mesh)
    unknown = set(shape) - set(MESH_AXES)
    if unknown:
        raise ValueError(f"mesh has unknown axes {sorted(unknown)}; expected {MESH_AXES}")
    return {a: int(shape.get(a, 1)) for a in MESH_AXES}


def layout(cfg: LlamaConfig, mesh: Mesh | Mapping[str, int]) -> Layout:
    """Check that cfg splits over the mesh and return the derived sizes."""
    d = mesh_degrees(mesh)
    tp, spp, kvp = d["tp"], d["spp"], d["kvp"]
    if cfg.num_heads % tp:
        raise ValueError(f"num_heads={cfg.num_heads} is not divisible by tp={tp}")
    if cfg.intermediate_size % tp:
        raise ValueError(f"intermediate_size={cfg.intermediate_size} is not divisible by tp={tp}")
    if cfg.num_layers % spp:
        raise ValueError(f"num_layers={cfg.num_layers} is not divisible by spp={spp}")
    kvh = cfg.num_kv_heads
    if kvh % tp == 0:
        kv_heads = kvh
    elif tp % kvh == 0:
        kv_heads = tp
    else:
        raise ValueError(
            f"num_kv_heads={kvh} and tp={tp}: tp must divide num_kv_heads or be a multiple of it")
    vocab_padded = -(-cfg.vocab_size // tp) * tp
    return Layout(tp, spp, kvp, kv_heads, kv_heads // kvh, vocab_padded)


def param_shapes(cfg: LlamaConfig, lay: Layout) -> dict[str, Any]:
    """Global shape of every parameter, same tree as `PARAM_AXES` (minus lm_head when tied)."""
    L, D, F = cfg.num_layers, cfg.hidden_size, cfg.intermediate_size
    H, Dh, K, Vp = cfg.num_heads, cfg.head_dim, lay.kv_heads, lay.vocab_padded
    shapes = {
        "embed": (Vp, D),
        "layers": {
            "attn_norm": (L, D),
            "wq": (L, H, Dh, D),
            "wk": (L, K, Dh, D),
            "wv": (L, K, Dh, D),
            "wo": (L, D, H, Dh),
            "mlp_norm": (L, D),
            "w_gate": (L, F, D),
            "w_up": (L, F, D),
            "w_down": (L, D, F),
        },
        "final_norm": (D,),
    }
    if not cfg.tie_word_embeddings:
        shapes["lm_head"] = (Vp, D)
    return shapes


def param_axes(cfg: LlamaConfig) -> dict[str, Any]:
    """`PARAM_AXES` restricted to the params this config has."""
    axes = {k: v for k, v in PARAM_AXES.items() if k != "lm_head" or not cfg.tie_word_embeddings}
    return axes


def param_specs(cfg: LlamaConfig, per_layer: bool = False) -> dict[str, Any]:
    """PartitionSpec of every parameter (the in_specs of the per-device forward). per_layer:
    params["layers"] as `unstack_layers` gives it, a list of one dict per layer."""
    specs = _map_axes(param_axes(cfg), spec)
    if per_layer:
        specs["layers"] = [_layer_specs() for _ in range(cfg.num_layers)]
    return specs


def _layer_specs() -> dict[str, P]:
    """One layer's weights: the stack's specs less the leading "layers" dimension."""
    return {k: spec(axes[1:]) for k, axes in PARAM_AXES["layers"].items()}


def unstack_layers(params: dict[str, Any], cfg: LlamaConfig, mesh: Mesh) -> dict[str, Any]:
    """params with "layers" as a list of L dicts, each weight its own buffer ([H/tp, Dh, D] ...),
    sharded as in the stack less the layer axis (spp must be 1: a stage's layers live on it).

    Why: a loop over the stack reads layer l's weights through a dynamic slice, which XLA:CPU
    copies out before every projection (18 ms of an 83 ms decode step of the 31M Llama,
    benchmarks/results/per_layer_weights_cpu.md); `llama.run_layers` picks a layer's own buffers
    instead. Built once: the stacked arrays are released when the caller drops them."""
    spp = layout(cfg, mesh).spp
    if spp != 1:
        raise ValueError(f"per-layer weight buffers need spp=1 (each stage holds a stack), got spp={spp}")
    one = {k: NamedSharding(mesh, s) for k, s in _layer_specs().items()}
    L = cfg.num_layers
    split = jax.jit(lambda layers: [{k: a[i] for k, a in layers.items()} for i in range(L)],
                    out_shardings=[one] * L)
    return {**params, "layers": split(params["layers"])}


def param_shardings(cfg: LlamaConfig, mesh: Mesh) -> dict[str, Any]:
    """NamedSharding of every parameter on this mesh (validates that cfg fits the mesh)."""
    layout(cfg, mesh)
    return _map_axes(param_axes(cfg), lambda a: NamedSharding(mesh, spec(a)))


def kv_cache_shape(cfg: LlamaConfig, lay: Layout, total_pages: int, page_size: int) -> tuple[int, ...]:
    """Global shape of each of kv_k / kv_v: [L, total_pages, page_size, KVHr, Dh].

    total_pages counts the pages of every kvp group (kvp x pages per group)."""
    if total_pages <= 0 or page_size <= 0:
        raise ValueError(f"total_pages and page_size must be positive, got {total_pages}, {page_size}")
    if total_pages % lay.kvp:
        raise ValueError(f"total_pages={total_pages} is not divisible by kvp={lay.kvp}")
    return (cfg.num_layers, total_pages, page_size, lay.kv_heads, cfg.head_dim)


def _map_axes(tree: dict[str, Any], fn) -> dict[str, Any]:
    return {k: _map_axes(v, fn) if isinstance(v, dict) else fn(v) for k, v in tree.items()}
