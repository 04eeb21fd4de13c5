"""Model directories for benchmarks with no weight files: config.json + a byte-level tokenizer.

    write_model_dir(root, name, config) -> root/name/{config.json, tokenizer.json}
    batch_prompts(count, length, vocab, pass_no) -> the batch jobs' prompts (new ones every pass)

Served with `LLM(model=dir, load_format="dummy")`: seeded random weights of the config's shapes.
The tokenizer is byte-level (token b < 256 is byte b) with the rest of the model's vocabulary
filled by `<tN>` tokens, so any sampled id detokenizes. Shapes used by the benchmarks:
LLAMA3_8B (the GPU session) and LLAMA_31M (the CPU offline job of issues 16 and 17).
"""

from __future__ import annotations

import json
from pathlib import Path

LLAMA3_8B = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
    "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
    "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 128256, "rms_norm_eps": 1e-5,
    "rope_theta": 500000.0, "max_position_embeddings": 131072, "tie_word_embeddings": False,
    "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                     "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
    "bos_token_id": 128000, "eos_token_id": [128001, 128009], "hidden_act": "silu",
}
LLAMA_31M = {**LLAMA3_8B, "hidden_size": 512, "intermediate_size": 1536, "num_hidden_layers": 8,
             "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 64, "vocab_size": 8192,
             "bos_token_id": 8000, "eos_token_id": [8001], "max_position_embeddings": 8192,
             "rope_scaling": None}
"""8 layers, hidden 512, GQA 8:2, head_dim 64, vocab 8192: the offline job's model (~31M params)."""
TINY = {**LLAMA3_8B, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 1024,
        "bos_token_id": 1000, "eos_token_id": [1001]}
"""Code-path dry runs on a CPU (numbers mean nothing)."""


def write_model_dir(root: Path, name: str, config: dict) -> Path:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    from medha_jax.tokenizer import byte_level_alphabet

    d = Path(root) / name
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text(json.dumps({k: v for k, v in config.items() if v is not None}, indent=1))
    vocab = {ch: b for b, ch in byte_level_alphabet().items()}
    vocab.update({f"<t{i}>": i for i in range(256, config["vocab_size"])})
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.save(str(d / "tokenizer.json"))
    return d


def batch_prompts(count: int, length: int, vocab: int, pass_no: int = 0) -> list[list[int]]:
    """`count` prompts of `length` token ids in [256, vocab - 256), different for every `pass_no`:
    a benchmark that repeats a job gives each pass new prompts (the same for every engine), since the
    prefix cache, on by default, would serve a repeated prompt's KV instead of prefilling it."""
    return [[(k * 7919 + i * 104729 + pass_no * 15485863) % (vocab - 512) + 256 for i in range(length)]
            for k in range(count)]
