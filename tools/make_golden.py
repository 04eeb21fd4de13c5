"""Make the HF golden test data: tiny Llama checkpoints plus transformers' own outputs.

Run with the reference venv (torch + transformers, never imported by the package or tests):

    /work/venv311/bin/python tools/make_golden.py            # writes tests/data/<variant>/

Data flow: for each variant in VARIANTS, build a `LlamaForCausalLM` in float32 from a fixed seed
-> save it as an HF directory (config.json in the newer `rope_parameters` spelling, plus
config_legacy.json in the older `rope_theta` + `rope_scaling` spelling, model.safetensors)
-> for each prompt (seeded random token ids) record the last-position logits of the prompt and
the greedy continuation from `model.generate(do_sample=False)` -> golden.json.
The first variant also gets a byte-level BPE tokenizer.json + tokenizer_config.json, and the
golden file records what transformers' fast tokenizer makes of a few strings.

The script checks its own output: the legacy config must give the same logits when loaded by
transformers, and every greedy step must win by a clear margin (so float32 rounding differences
between implementations cannot flip a token).
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from pathlib import Path

import numpy as np
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

ROOT = Path(__file__).resolve().parent.parent
OUT_DIR = ROOT / "tests" / "data"

SPECIAL_TOKENS = ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"]
BOS_ID, EOS_ID, EOT_ID = 0, 1, 2
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}<|eot_id|>"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
TOKENIZER_PROBES = [
    "Hello, world!",
    "  leading spaces and\ttabs\nnewlines",
    "héllo wörld — naïve café 東京 🙂",
    "",
]

# name -> (HF config kwargs, prompt lengths, new tokens, with tokenizer)
VARIANTS: dict[str, tuple[dict, list[int], int, bool]] = {
    # Llama 3.1 style: GQA 8/2, llama3 rope scaling, explicit head_dim != hidden/heads, untied.
    "tiny-llama3": (
        dict(
            vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
            num_attention_heads=8, num_key_value_heads=2, head_dim=16,
            max_position_embeddings=8192, rms_norm_eps=1e-5, tie_word_embeddings=False,
            rope_theta=500000.0,
            rope_scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0,
                              high_freq_factor=4.0, original_max_position_embeddings=1024),
            bos_token_id=BOS_ID, eos_token_id=[EOS_ID, EOT_ID],
        ),
        [1, 7, 33, 300, 1000, 3000],
        12,
        True,
    ),
    # Llama 3.2 style tied embeddings with linear rope scaling; MHA (4/4); vocab 510 is not a
    # multiple of 4, so tp=4 exercises vocab padding.
    "tiny-llama-tied": (
        dict(
            vocab_size=510, hidden_size=64, intermediate_size=96, num_hidden_layers=3,
            num_attention_heads=4, num_key_value_heads=4, head_dim=16,
            max_position_embeddings=4096, rms_norm_eps=1e-6, tie_word_embeddings=True,
            rope_theta=10000.0, rope_scaling=dict(type="linear", factor=4.0),
            bos_token_id=BOS_ID, eos_token_id=EOS_ID,
        ),
        [1, 20, 257, 1500],
        10,
        False,
    ),
    # Llama 2 style: default rope, MQA (4 heads, 1 kv head) so tp>1 replicates the kv head.
    "tiny-llama2": (
        dict(
            vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=1, head_dim=16,
            max_position_embeddings=2048, rms_norm_eps=1e-5, tie_word_embeddings=False,
            rope_theta=10000.0, rope_scaling=None,
            bos_token_id=BOS_ID, eos_token_id=EOS_ID,
        ),
        [1, 100, 700],
        10,
        False,
    ),
    # tiny-llama3 with 4 layers, so a 4-stage pipeline (spp=4) has a layer per stage; long
    # prompts for KV-parallel tests that spread one request over several kvp groups.
    "tiny-llama3-4l": (
        dict(
            vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=4,
            num_attention_heads=8, num_key_value_heads=2, head_dim=16,
            max_position_embeddings=8192, rms_norm_eps=1e-5, tie_word_embeddings=False,
            rope_theta=500000.0,
            rope_scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0,
                              high_freq_factor=4.0, original_max_position_embeddings=1024),
            bos_token_id=BOS_ID, eos_token_id=[EOS_ID, EOT_ID],
        ),
        [2, 45, 2600],
        8,
        False,
    ),
}

MIN_MARGIN = 1e-3  # every greedy step's top-1 logit must beat top-2 by at least this much


def build_tokenizer(vocab_size: int) -> Tokenizer:
    """A byte-level BPE (GPT-2/Llama 3 style) trained on a fixed text, ids < vocab_size."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    corpus = [
        "The quick brown fox jumps over the lazy dog. " * 4,
        "Long-context serving cuts every prefill into chunks, so short requests never wait.",
        "A scheduler orders requests by slack; the packer fills each iteration under a budget.",
        "Attention over paged key-value caches merges partial results with online softmax.",
        "hello world, hello there, the world is large and the context is long.",
    ] * 3
    tok.train_from_iterator(corpus, trainer=trainer)
    tok.post_processor = processors.TemplateProcessing(
        single=f"{SPECIAL_TOKENS[0]} $A",
        pair=f"{SPECIAL_TOKENS[0]} $A {SPECIAL_TOKENS[0]} $B",
        special_tokens=[(SPECIAL_TOKENS[0], BOS_ID)],
    )
    assert tok.get_vocab_size() <= vocab_size, tok.get_vocab_size()
    assert [tok.token_to_id(t) for t in SPECIAL_TOKENS] == [BOS_ID, EOS_ID, EOT_ID]
    return tok


def legacy_config(cfg: dict) -> dict:
    """Rewrite transformers' `rope_parameters` spelling as the older rope_theta + rope_scaling."""
    out = {k: v for k, v in cfg.items() if k != "rope_parameters"}
    rp = dict(cfg["rope_parameters"])
    out["rope_theta"] = rp.pop("rope_theta")
    kind = rp.pop("rope_type", "default")
    if kind == "default":
        out["rope_scaling"] = None
    elif kind == "linear":
        out["rope_scaling"] = {"type": "linear", **rp}  # Llama 2 era key name
    else:
        out["rope_scaling"] = {"rope_type": kind, **rp}
    return out


def greedy(model: LlamaForCausalLM, ids: list[int], new_tokens: int) -> tuple[list[float], list[int], float]:
    """Return (last-position prompt logits, greedy continuation, smallest top-1/top-2 margin)."""
    x = torch.tensor([ids], dtype=torch.long)
    with torch.no_grad():
        logits = model(x).logits[0, -1].float()
        out = model.generate(
            x, attention_mask=torch.ones_like(x), do_sample=False, max_new_tokens=new_tokens,
            min_new_tokens=0, output_scores=True, return_dict_in_generate=True,
        )
    cont = out.sequences[0, len(ids):].tolist()
    assert len(cont) == new_tokens, f"generate stopped early: {cont}"
    margin = float("inf")
    for step in out.scores:
        top2 = torch.topk(step[0].float(), 2).values
        margin = min(margin, float(top2[0] - top2[1]))
    return logits.tolist(), cont, margin


def make_variant(name: str, kwargs: dict, lengths: list[int], new_tokens: int, with_tok: bool,
                 seed: int) -> None:
    out = OUT_DIR / name
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    torch.manual_seed(seed)
    hf_cfg = LlamaConfig(initializer_range=0.25, architectures=["LlamaForCausalLM"], **kwargs)
    model = LlamaForCausalLM(hf_cfg).eval().float()
    # Non-trivial norm weights so a missing or swapped norm cannot pass unnoticed.
    with torch.no_grad():
        for mod in model.modules():
            if type(mod).__name__ == "LlamaRMSNorm":
                mod.weight.uniform_(0.5, 1.5)
    model.generation_config.eos_token_id = None  # golden continuations never stop early
    model.generation_config.pad_token_id = 0
    model.save_pretrained(out, safe_serialization=True)
    for extra in ("generation_config.json",):
        (out / extra).unlink(missing_ok=True)
    cfg = json.loads((out / "config.json").read_text())
    legacy = legacy_config(cfg)
    (out / "config_legacy.json").write_text(json.dumps(legacy, indent=2) + "\n")

    golden: dict = {"variant": name, "seed": seed, "new_tokens": new_tokens, "prompts": []}
    rng = np.random.default_rng(seed)
    for n in lengths:
        ids = rng.integers(3, kwargs["vocab_size"], size=n).tolist()  # no special tokens
        logits, cont, margin = greedy(model, ids, new_tokens)
        assert margin > MIN_MARGIN, f"{name} len {n}: greedy margin {margin} too small; change seed"
        golden["prompts"].append(
            {"token_ids": ids, "last_logits": logits, "greedy": cont, "min_margin": margin}
        )
        print(f"{name}: prompt {n:5d} -> {cont}  (margin {margin:.4f})")

    # transformers must read the legacy spelling to the same model.
    with tempfile.TemporaryDirectory() as tmp:
        for f in out.iterdir():
            shutil.copy(f, tmp)
        shutil.copy(out / "config_legacy.json", Path(tmp) / "config.json")
        again = LlamaForCausalLM.from_pretrained(tmp, dtype=torch.float32).eval()
        ids = golden["prompts"][-1]["token_ids"]
        with torch.no_grad():
            l2 = again(torch.tensor([ids])).logits[0, -1]
        diff = float((l2 - torch.tensor(golden["prompts"][-1]["last_logits"])).abs().max())
        assert diff < 1e-5, f"legacy config loads differently in transformers: {diff}"

    if with_tok:
        tok = build_tokenizer(kwargs["vocab_size"])
        tok.save(str(out / "tokenizer.json"))
        tok_cfg = {
            "bos_token": SPECIAL_TOKENS[BOS_ID],
            "eos_token": SPECIAL_TOKENS[EOT_ID],
            "chat_template": CHAT_TEMPLATE,
            "model_max_length": kwargs["max_position_embeddings"],
            "tokenizer_class": "PreTrainedTokenizerFast",
        }
        (out / "tokenizer_config.json").write_text(json.dumps(tok_cfg, indent=2) + "\n")
        fast = PreTrainedTokenizerFast(tokenizer_file=str(out / "tokenizer.json"))
        golden["tokenizer"] = [
            {"text": t, "ids": fast(t)["input_ids"], "decoded": fast.decode(fast(t)["input_ids"],
                                                                            skip_special_tokens=True)}
            for t in TOKENIZER_PROBES
        ]
    (out / "golden.json").write_text(json.dumps(golden) + "\n")
    size = sum(f.stat().st_size for f in out.iterdir())
    print(f"{name}: wrote {out} ({size / 1e6:.2f} MB)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", help="variant names to (re)make; default all")
    args = ap.parse_args()
    torch.set_num_threads(2)
    for i, (name, (kwargs, lengths, new_tokens, with_tok)) in enumerate(VARIANTS.items()):
        if args.only and name not in args.only:
            continue
        make_variant(name, kwargs, lengths, new_tokens, with_tok, seed=1234 + i)


if __name__ == "__main__":
    main()
