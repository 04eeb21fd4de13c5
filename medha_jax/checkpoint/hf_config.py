"""HF `config.json` -> `LlamaConfig`, in both spellings found in the wild.

Older checkpoints (Llama 2, 3, 3.1 on the Hub): top-level `rope_theta` plus `rope_scaling`
({"rope_type" or "type": ..., "factor": ...} or null). Newer transformers (>= 5) write
`rope_parameters` = {"rope_type", "rope_theta", "factor", "low_freq_factor", ...} instead.
Both become `LlamaConfig(rope_theta=..., rope_scaling=None | {"rope_type": ..., ...})`.
Pure Python.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from medha_jax.model.config import LlamaConfig

SUPPORTED_ARCHITECTURES = ("LlamaForCausalLM",)
_ROPE_KEYS = ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")


def load_hf_config(model_dir: str | Path) -> LlamaConfig:
    """Read `<model_dir>/config.json`; raise FileNotFoundError / ValueError naming the problem."""
    path = Path(model_dir) / "config.json"
    if not path.is_file():
        raise FileNotFoundError(f"no config.json in model directory {str(model_dir)!r}")
    try:
        raw = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{path} is not valid JSON: {e}") from None
    return parse_hf_config(raw, source=str(path))


def parse_hf_config(raw: dict[str, Any], source: str = "config.json") -> LlamaConfig:
    """Translate an HF Llama config dict into a validated LlamaConfig."""
    archs = raw.get("architectures") or []
    model_type = raw.get("model_type")
    if archs:
        bad = [a for a in archs if a not in SUPPORTED_ARCHITECTURES]
        if bad:
            raise ValueError(f"{source}: unsupported architecture {bad[0]!r}; "
                             f"supported: {', '.join(SUPPORTED_ARCHITECTURES)}")
    elif model_type != "llama":
        raise ValueError(f"{source}: unsupported model_type {model_type!r} (no 'architectures' "
                         f"given); supported: llama / LlamaForCausalLM")
    if raw.get("hidden_act", "silu") != "silu":
        raise ValueError(f"{source}: unsupported hidden_act {raw['hidden_act']!r}; Llama uses silu")
    for flag in ("attention_bias", "mlp_bias"):
        if raw.get(flag):
            raise ValueError(f"{source}: {flag}=true is not supported (Llama has no biases)")

    def need(key: str):
        if key not in raw:
            raise ValueError(f"{source}: missing required field {key!r}")
        return raw[key]

    hidden, heads = need("hidden_size"), need("num_attention_heads")
    head_dim = raw.get("head_dim") or hidden // heads
    theta, scaling = _rope(raw, source)
    return LlamaConfig(
        vocab_size=need("vocab_size"),
        hidden_size=hidden,
        intermediate_size=need("intermediate_size"),
        num_layers=need("num_hidden_layers"),
        num_heads=heads,
        num_kv_heads=raw.get("num_key_value_heads") or heads,
        head_dim=head_dim,
        rope_theta=theta,
        rope_scaling=scaling,
        rms_norm_eps=float(raw.get("rms_norm_eps", 1e-6)),
        tie_word_embeddings=bool(raw.get("tie_word_embeddings", False)),
        max_position_embeddings=raw.get("max_position_embeddings", 4096),
        bos_token_id=raw.get("bos_token_id"),
        eos_token_id=raw.get("eos_token_id"),
        name=raw.get("_name_or_path") or "llama",
    )


def _rope(raw: dict[str, Any], source: str) -> tuple[float, dict[str, Any] | None]:
    """(rope_theta, rope_scaling) from either spelling."""
    if raw.get("rope_parameters") is not None:
        rp = dict(raw["rope_parameters"])
        if "rope_theta" not in rp and "rope_theta" not in raw:
            raise ValueError(f"{source}: rope_parameters lacks rope_theta")
        theta = float(rp.get("rope_theta", raw.get("rope_theta")))
    else:
        rp = dict(raw.get("rope_scaling") or {})
        theta = float(raw.get("rope_theta", 10000.0))
    kind = rp.get("rope_type", rp.get("type", "default"))
    if kind == "default":
        return theta, None
    if kind not in ("linear", "llama3"):
        raise ValueError(f"{source}: unsupported rope type {kind!r}; supported: default, linear, llama3")
    scaling = {"rope_type": kind}
    for k in ("factor",) if kind == "linear" else _ROPE_KEYS:
        if k not in rp:
            raise ValueError(f"{source}: {kind} rope scaling lacks {k!r}")
        scaling[k] = rp[k]
    return theta, scaling
