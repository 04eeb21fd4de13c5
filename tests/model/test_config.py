"""LlamaConfig validation: every bad field is rejected with its name in the message."""

from __future__ import annotations

import pytest

from medha_jax.model.config import LlamaConfig

BASE = dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_layers=2, num_heads=8,
            num_kv_heads=2, head_dim=16)


def make(**kw) -> LlamaConfig:
    return LlamaConfig(**{**BASE, **kw})


def test_valid_config_and_derived_values():
    cfg = make(eos_token_id=[1, 2], rope_scaling={"rope_type": "linear", "factor": 2.0})
    assert cfg.kv_group == 4 and cfg.eos_token_ids == (1, 2) and cfg.rope_type == "linear"
    assert hash(cfg) == hash(make(eos_token_id=[1, 2], rope_scaling={"rope_type": "linear", "factor": 2.0}))
    # embeddings 2*512*64, per layer q/k/v/o + mlp + norms, final norm
    per_layer = 64 * 16 * (8 + 2) * 2 + 3 * 64 * 128 + 2 * 64
    assert cfg.num_params() == 2 * per_layer + 2 * 512 * 64 + 64


@pytest.mark.parametrize("kw,needle", [
    (dict(hidden_size=0), "hidden_size"),
    (dict(num_layers=-1), "num_layers"),
    (dict(vocab_size=3.5), "vocab_size"),
    (dict(num_heads=6, num_kv_heads=4), "num_kv_heads=4"),
    (dict(head_dim=15), "head_dim"),
    (dict(rope_theta=0.0), "rope_theta"),
    (dict(rms_norm_eps=0.0), "rms_norm_eps"),
    (dict(rope_scaling={"rope_type": "yarn", "factor": 2.0}), "yarn"),
    (dict(rope_scaling={"factor": 2.0}), "rope_type"),
    (dict(rope_scaling={"rope_type": "llama3", "factor": 8.0}), "low_freq_factor"),
    (dict(rope_scaling={"rope_type": "linear", "factor": -1.0}), "factor"),
    (dict(eos_token_id=[1, 600]), "600"),
    (dict(bos_token_id=-1), "-1"),
])
def test_bad_config_names_the_problem(kw, needle):
    with pytest.raises(ValueError, match=needle):
        make(**kw)
