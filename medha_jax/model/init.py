"""Seeded random parameters, created directly in their shardings (the demo model, tests, benchmarks).

Data flow: seed -> one key per parameter (folded in by a fixed name order) -> canonical arrays
(checkpoint shapes: num_kv_heads heads, vocab_size rows) -> kv-head copies and vocab padding for
this mesh (`sharding.Layout`) -> arrays in `param_shardings`. Everything happens in one jit with
out_shardings, so no device holds the whole model; the values depend only on (cfg, seed), never
on the mesh.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.sharding import Mesh

from medha_jax.model import sharding
from medha_jax.model.config import LlamaConfig

_ORDER = ("embed", "lm_head", "final_norm", "attn_norm", "mlp_norm",
          "wq", "wk", "wv", "wo", "w_gate", "w_up", "w_down")


def init_params(cfg: LlamaConfig, mesh: Mesh, seed: int = 0, dtype=jnp.float32, std: float = 0.25):
    """Random params: linear weights and embeddings ~ N(0, std) (std/sqrt(fan_in/64) for wide
    layers), norm weights 1. Returns the tree of `sharding.param_shapes`."""
    lay = sharding.layout(cfg, mesh)
    shardings = sharding.param_shardings(cfg, mesh)
    L, D, F, H, Dh, KVH, V = (cfg.num_layers, cfg.hidden_size, cfg.intermediate_size,
                              cfg.num_heads, cfg.head_dim, cfg.num_kv_heads, cfg.vocab_size)

    def make():
        key = jax.random.key(seed)
        keys = {n: jax.random.fold_in(key, i) for i, n in enumerate(_ORDER)}

        def normal(name, shape, fan_in):
            scale = std * min(1.0, (64.0 / fan_in) ** 0.5)
            return (scale * jax.random.normal(keys[name], shape, jnp.float32)).astype(dtype)

        def pad_vocab(w):  # [V, D] -> [Vp, D]
            return jnp.pad(w, ((0, lay.vocab_padded - V), (0, 0)))

        def linear(name, shape, fan_in):  # drawn [in, out], stored [out, in] (`sharding.FROM_IN_OUT`): a
            # seed's values stay what they were before the layout changed
            return normal(name, shape, fan_in).transpose(sharding.FROM_IN_OUT[name])

        def kv(name):  # [L, KVH, Dh, D] -> [L, KVHr, Dh, D]: each head copied kv_repeat times
            return jnp.repeat(linear(name, (L, D, KVH, Dh), D), lay.kv_repeat, axis=1)

        params = {
            "embed": pad_vocab(normal("embed", (V, D), 64)),
            "layers": {
                "attn_norm": jnp.ones((L, D), dtype),
                "wq": linear("wq", (L, D, H, Dh), D),  # [L, H, Dh, D]
                "wk": kv("wk"),
                "wv": kv("wv"),
                "wo": linear("wo", (L, H, Dh, D), H * Dh),  # [L, D, H, Dh]
                "mlp_norm": jnp.ones((L, D), dtype),
                "w_gate": linear("w_gate", (L, D, F), D),  # [L, F, D]
                "w_up": linear("w_up", (L, D, F), D),
                "w_down": linear("w_down", (L, F, D), F),  # [L, D, F]
            },
            "final_norm": jnp.ones((D,), dtype),
        }
        if not cfg.tie_word_embeddings:
            params["lm_head"] = pad_vocab(normal("lm_head", (V, D), D))
        return params

    return jax.jit(make, out_shardings=shardings)()
