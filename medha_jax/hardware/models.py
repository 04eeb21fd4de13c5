"""Model shapes for the analytic performance model: parameter, FLOP and byte counts per token.

  ModelShape (layers, widths, heads)  --> per-layer weight bytes, linear FLOPs per token,
                                          attention FLOPs per (query, key) pair, KV bytes per token

Not a copy of `medha_jax.model.config.LlamaConfig` (also pure Python): it shares the eight
architecture fields but adds what a cost model needs (bytes per weight, cached K/V and
activation element; FLOP and byte counts) and leaves out numerics that cost nothing (RoPE,
RMSNorm eps, tied embeddings, token ids). `ModelShape.from_llama_config` converts one. Pure Python.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ModelShape:
    name: str
    num_layers: int
    hidden_size: int
    intermediate_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    weight_bytes: int = 2
    """Bytes per weight (bf16)."""
    kv_bytes: int = 2
    """Bytes per cached K or V element (bf16)."""
    act_bytes: int = 2
    """Bytes per activation element (bf16)."""

    def __post_init__(self) -> None:
        for f in ("num_layers", "hidden_size", "intermediate_size", "num_heads", "num_kv_heads",
                  "head_dim", "vocab_size", "weight_bytes", "kv_bytes", "act_bytes"):
            v = getattr(self, f)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"ModelShape.{f} must be a positive int, got {v!r}")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_heads={self.num_heads} is not a multiple of num_kv_heads={self.num_kv_heads}")

    @classmethod
    def from_llama_config(cls, cfg, name: str | None = None) -> "ModelShape":
        """From a `medha_jax.model.LlamaConfig` (duck-typed: no import of the model package)."""
        return cls(name or cfg.name, cfg.num_layers, cfg.hidden_size, cfg.intermediate_size,
                   cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, cfg.vocab_size)

    @property
    def layer_params(self) -> int:
        """Weights of one decoder layer: Q, K, V, O projections and the SwiGLU MLP (norms ignored)."""
        d, hd = self.hidden_size, self.head_dim
        attn = d * hd * (2 * self.num_heads + 2 * self.num_kv_heads)
        return attn + 3 * d * self.intermediate_size

    @property
    def params(self) -> int:
        """All weights: layers + embedding + LM head (untied)."""
        return self.num_layers * self.layer_params + 2 * self.vocab_size * self.hidden_size

    @property
    def attn_flops_per_pair(self) -> int:
        """FLOPs of one (query token, key token) pair in one layer: QK^T and PV, 2 FLOPs per MAC."""
        return 4 * self.head_dim * self.num_heads

    @property
    def kv_bytes_per_token_layer(self) -> int:
        """Cached K and V bytes of one token in one layer."""
        return 2 * self.num_kv_heads * self.head_dim * self.kv_bytes

    @property
    def kv_bytes_per_token(self) -> int:
        return self.num_layers * self.kv_bytes_per_token_layer

    def prefill_flops(self, n: int, causal: bool = True) -> float:
        """FLOPs of a whole n-token prefill: linear layers plus attention.

        causal=True counts the pairs a causal kernel computes (n(n+1)/2); causal=False counts n^2,
        the convention of Mnemosyne eq. 1 (F_a = 4 n^2 d h_q) and of Medha's "2.8 ExaFLOPs"."""
        pairs = n * (n + 1) / 2 if causal else float(n) * n
        return 2.0 * n * self.num_layers * self.layer_params + self.num_layers * self.attn_flops_per_pair * pairs


LLAMA3_8B = ModelShape("llama3-8b", num_layers=32, hidden_size=4096, intermediate_size=14336,
                       num_heads=32, num_kv_heads=8, head_dim=128, vocab_size=128256)
LLAMA3_70B = ModelShape("llama3-70b", num_layers=80, hidden_size=8192, intermediate_size=28672,
                        num_heads=64, num_kv_heads=8, head_dim=128, vocab_size=128256)

MODELS = {"llama3-8b": LLAMA3_8B, "llama3-70b": LLAMA3_70B}


def get_model(name: str) -> ModelShape:
    try:
        return MODELS[name.lower()]
    except KeyError:
        raise ValueError(f"unknown model shape {name!r}; valid: {', '.join(MODELS)}") from None
