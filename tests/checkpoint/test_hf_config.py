"""config.json parsing: both rope spellings, and errors that name the problem."""

from __future__ import annotations

import json

import pytest

from medha_jax.checkpoint import load_hf_config, parse_hf_config


@pytest.mark.parametrize("variant", ["tiny-llama3", "tiny-llama-tied", "tiny-llama2"])
def test_both_spellings_give_the_same_config(variant, data_dir):
    new = load_hf_config(data_dir / variant)
    legacy = parse_hf_config(json.loads((data_dir / variant / "config_legacy.json").read_text()))
    assert new == legacy
    raw = json.loads((data_dir / variant / "config.json").read_text())
    assert "rope_parameters" in raw and "rope_scaling" not in raw


def test_fields_of_the_llama3_variant(data_dir):
    cfg = load_hf_config(data_dir / "tiny-llama3")
    assert (cfg.vocab_size, cfg.hidden_size, cfg.num_layers, cfg.num_heads, cfg.num_kv_heads,
            cfg.head_dim) == (512, 64, 2, 8, 2, 16)
    assert cfg.rope_scaling == {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                "high_freq_factor": 4.0, "original_max_position_embeddings": 1024}
    assert cfg.eos_token_ids == (1, 2) and cfg.bos_token_id == 0 and not cfg.tie_word_embeddings
    tied = load_hf_config(data_dir / "tiny-llama-tied")
    assert tied.tie_word_embeddings and tied.rope_scaling == {"rope_type": "linear", "factor": 4.0}
    assert load_hf_config(data_dir / "tiny-llama2").rope_scaling is None


def _raw(data_dir, **changes):
    raw = json.loads((data_dir / "tiny-llama3" / "config_legacy.json").read_text())
    raw.update(changes)
    return {k: v for k, v in raw.items() if v is not ...}


@pytest.mark.parametrize("changes,needle", [
    (dict(architectures=["MistralForCausalLM"]), "unsupported architecture 'MistralForCausalLM'"),
    (dict(architectures=[], model_type="gpt2"), "unsupported model_type 'gpt2'"),
    (dict(hidden_size=...), "missing required field 'hidden_size'"),
    (dict(rope_scaling={"rope_type": "yarn", "factor": 4.0}), "unsupported rope type 'yarn'"),
    (dict(rope_scaling={"rope_type": "llama3", "factor": 8.0}), "lacks 'low_freq_factor'"),
    (dict(hidden_act="gelu"), "hidden_act"),
    (dict(attention_bias=True), "attention_bias"),
    (dict(num_key_value_heads=3), "num_kv_heads=3"),
])
def test_bad_configs(changes, needle, data_dir):
    with pytest.raises(ValueError, match=needle):
        parse_hf_config(_raw(data_dir, **changes))


def test_head_dim_defaults_and_old_type_key(data_dir):
    raw = _raw(data_dir, head_dim=..., rope_scaling={"type": "linear", "factor": 2.0})
    cfg = parse_hf_config(raw)
    assert cfg.head_dim == 64 // 8 and cfg.rope_scaling == {"rope_type": "linear", "factor": 2.0}


def test_missing_and_broken_config_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="no config.json"):
        load_hf_config(tmp_path)
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        load_hf_config(tmp_path)
