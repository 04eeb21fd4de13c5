"""`LlamaConfig`: the shape and numerics of one Llama-family model (Llama 2, 3, 3.1, 3.2).

Pure Python, no JAX. Built by `medha_jax.checkpoint.hf_config` from an HF config.json or by
`medha_jax.demo_model`; read by the model code, the sharding table and the KV-cache sizing.
Everything is checked on construction, so a bad value fails here with its name, not deep in a
traced function.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

ROPE_TYPES = ("default", "linear", "llama3")
_LLAMA3_KEYS = ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")


@dataclass(frozen=True, slots=True)
class LlamaConfig:
    """One Llama-family decoder. Field names follow HF where HF has one."""

    vocab_size: int
    """Number of token ids (rows of the embedding)."""
    hidden_size: int
    """Model width D."""
    intermediate_size: int
    """MLP width F (SwiGLU gate/up output size)."""
    num_layers: int
    """Decoder layers L."""
    num_heads: int
    """Query heads H."""
    num_kv_heads: int
    """Key/value heads KVH (GQA: H % KVH == 0; MQA: 1)."""
    head_dim: int
    """Per-head width Dh (usually hidden_size // num_heads, but may differ)."""
    rope_theta: float = 10000.0
    """RoPE base."""
    rope_scaling: dict[str, Any] | None = None
    """None (plain RoPE) or {"rope_type": "linear", "factor": f} or {"rope_type": "llama3",
    "factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"}."""
    rms_norm_eps: float = 1e-5
    """RMSNorm epsilon."""
    tie_word_embeddings: bool = False
    """Whether lm_head shares the embedding matrix."""
    max_position_embeddings: int = 4096
    """Longest context the model is configured for."""
    bos_token_id: int | None = None
    """Beginning-of-sequence id, if any."""
    eos_token_id: int | list[int] | None = None
    """End-of-sequence id(s); generation stops at any of them."""
    name: str = field(default="llama", compare=False)
    """Free-form label for logs and metrics."""

    def __post_init__(self) -> None:
        for f in ("vocab_size", "hidden_size", "intermediate_size", "num_layers", "num_heads",
                  "num_kv_heads", "head_dim", "max_position_embeddings"):
            v = getattr(self, f)
            if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
                raise ValueError(f"LlamaConfig.{f} must be a positive int, got {v!r}")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"LlamaConfig: num_heads={self.num_heads} is not a multiple of "
                f"num_kv_heads={self.num_kv_heads} (grouped-query attention needs whole groups)")
        if self.head_dim % 2:
            raise ValueError(f"LlamaConfig.head_dim must be even for RoPE, got {self.head_dim}")
        if not self.rope_theta > 0:
            raise ValueError(f"LlamaConfig.rope_theta must be > 0, got {self.rope_theta!r}")
        if not self.rms_norm_eps > 0:
            raise ValueError(f"LlamaConfig.rms_norm_eps must be > 0, got {self.rms_norm_eps!r}")
        _check_rope_scaling(self.rope_scaling)
        eos = self.eos_token_id
        ids = [] if eos is None else (list(eos) if isinstance(eos, (list, tuple)) else [eos])
        for i in ids + ([] if self.bos_token_id is None else [self.bos_token_id]):
            if not isinstance(i, int) or not 0 <= i < self.vocab_size:
                raise ValueError(
                    f"LlamaConfig: special token id {i!r} is outside the vocabulary [0, {self.vocab_size})")

    def __hash__(self) -> int:  # dict/list fields: hash a frozen view so cfg can be a static arg
        rs = None if self.rope_scaling is None else tuple(sorted(self.rope_scaling.items()))
        return hash((self.vocab_size, self.hidden_size, self.intermediate_size, self.num_layers,
                     self.num_heads, self.num_kv_heads, self.head_dim, self.rope_theta, rs,
                     self.rms_norm_eps, self.tie_word_embeddings, self.max_position_embeddings,
                     self.bos_token_id, self.eos_token_ids))

    @property
    def rope_type(self) -> str:
        return "default" if self.rope_scaling is None else self.rope_scaling["rope_type"]

    @property
    def eos_token_ids(self) -> tuple[int, ...]:
        """eos_token_id as a tuple (empty when the model has none)."""
        eos = self.eos_token_id
        if eos is None:
            return ()
        return tuple(eos) if isinstance(eos, (list, tuple)) else (eos,)

    @property
    def kv_group(self) -> int:
        """Query heads per kv head."""
        return self.num_heads // self.num_kv_heads

    def num_params(self) -> int:
        """Parameter count (tied embeddings counted once)."""
        D, F, L, Dh = self.hidden_size, self.intermediate_size, self.num_layers, self.head_dim
        attn = D * Dh * (2 * self.num_heads + 2 * self.num_kv_heads)
        per_layer = attn + 3 * D * F + 2 * D
        emb = self.vocab_size * D * (1 if self.tie_word_embeddings else 2)
        return L * per_layer + emb + D


def _check_rope_scaling(rs: dict[str, Any] | None) -> None:
    if rs is None:
        return
    if not isinstance(rs, dict) or "rope_type" not in rs:
        raise ValueError(f"LlamaConfig.rope_scaling must be None or a dict with 'rope_type', got {rs!r}")
    kind = rs["rope_type"]
    if kind not in ROPE_TYPES:
        raise ValueError(f"unsupported rope_type {kind!r}; supported: {', '.join(ROPE_TYPES)}")
    if kind == "default":
        raise ValueError("rope_scaling with rope_type 'default' must be given as None")
    needed = ("factor",) if kind == "linear" else _LLAMA3_KEYS
    missing = [k for k in needed if k not in rs]
    if missing:
        raise ValueError(f"rope_scaling of type {kind!r} lacks {', '.join(missing)}")
    if not rs["factor"] > 0:
        raise ValueError(f"rope_scaling factor must be > 0, got {rs['factor']!r}")
    if kind == "llama3" and not rs["high_freq_factor"] > rs["low_freq_factor"]:
        raise ValueError("llama3 rope_scaling needs high_freq_factor > low_freq_factor, got "
                         f"{rs['high_freq_factor']} and {rs['low_freq_factor']}")
