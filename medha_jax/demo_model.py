"""The embedded default model "demo": a tiny Llama 3 with seeded random weights, no files.

Data flow: `DEMO_CONFIG` -> `model.init_params(seed=DEMO_SEED)` (made directly in the mesh's
shardings, identical values on every mesh) + `byte_tokenizer()` (byte-level: token id b < 256
is byte b; specials from 256; built in memory with `tokenizers`) -> (cfg, params, Tokenizer).
Nothing is read from or written to disk, so `LLM(model="demo")` works offline. The output is
gibberish by design; the model exists to exercise the whole engine.
"""

from __future__ import annotations

import jax.numpy as jnp
from jax.sharding import Mesh
from tokenizers import Tokenizer as HFTokenizer, decoders, models, pre_tokenizers, processors

from medha_jax.model.config import LlamaConfig
from medha_jax.model.init import init_params
from medha_jax.tokenizer import Tokenizer, byte_level_alphabet

DEMO_NAME = "demo"
DEMO_SEED = 20240601
NUM_BYTES = 256
SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>",
            "<|start_header_id|>", "<|end_header_id|>"]
VOCAB_SIZE = 512  # 256 bytes + specials + reserved specials up to a multiple of 8 (any tp <= 8)
BOS_ID, EOS_ID, EOT_ID = NUM_BYTES, NUM_BYTES + 1, NUM_BYTES + 2
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n"
    "{{ m['content'] }}<|eot_id|>{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
)

DEMO_CONFIG = LlamaConfig(
    vocab_size=VOCAB_SIZE, hidden_size=64, intermediate_size=128, num_layers=4,
    num_heads=8, num_kv_heads=2, head_dim=16, rope_theta=500000.0,
    rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                  "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
    rms_norm_eps=1e-5, tie_word_embeddings=False, max_position_embeddings=131072,
    bos_token_id=BOS_ID, eos_token_id=[EOS_ID, EOT_ID], name=DEMO_NAME,
)


def byte_tokenizer() -> Tokenizer:
    """Byte-level tokenizer: every UTF-8 byte b is token b; specials at 256.. (vocab 512)."""
    vocab = {ch: b for b, ch in byte_level_alphabet().items()}
    tok = HFTokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    reserved = [f"<|reserved_special_token_{i}|>" for i in range(VOCAB_SIZE - NUM_BYTES - len(SPECIALS))]
    tok.add_special_tokens(SPECIALS + reserved)
    tok.post_processor = processors.TemplateProcessing(
        single=f"{SPECIALS[0]} $A", pair=f"{SPECIALS[0]} $A {SPECIALS[0]} $B",
        special_tokens=[(SPECIALS[0], BOS_ID)])
    assert tok.get_vocab_size() == VOCAB_SIZE and tok.token_to_id(SPECIALS[0]) == BOS_ID
    return Tokenizer(tok, bos_token_id=BOS_ID, eos_token_ids=(EOS_ID, EOT_ID),
                     chat_template=CHAT_TEMPLATE, bos_token=SPECIALS[0], eos_token=SPECIALS[2])


def load_demo(mesh: Mesh, dtype=jnp.float32, seed: int | None = None):
    """(cfg, params, tokenizer) of the demo model on `mesh`; deterministic, writes nothing.

    seed: weights seed (None: DEMO_SEED, so "demo" is the same model everywhere)."""
    params = init_params(DEMO_CONFIG, mesh, seed=DEMO_SEED if seed is None else seed, dtype=dtype)
    return DEMO_CONFIG, params, byte_tokenizer()
