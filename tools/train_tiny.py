"""Train a tiny Llama on this repository's own text: a test checkpoint that predicts with conviction.

The random checkpoints of `make_golden.py` have top-1/top-2 logit margins of 0.001-0.07 (their
logits are noise), so any lossy change (an fp8 KV cache) flips their greedy tokens at once; a
trained model's margins are what real models have. Run with the reference venv:

    /work/hf311/bin/python tools/train_tiny.py            # writes tests/data/tiny-llama3-trained/

Data flow: the repo's *.md and medha_jax/**/*.py (sorted, concatenated) -> tiny-llama3's byte-level
BPE tokenizer -> 90% training stream / 10% held out -> a seeded `LlamaForCausalLM` (tiny-llama3's
kind at width 256 with head_dim 64, as real models have: a dot product over 64 dims averages
rounding errors of the KV cache as a 16-dim one cannot) trained with AdamW on random 256-token windows -> saved as an
HF directory (bfloat16 weights) with the tokenizer -> golden.json: random held-out prompts, transformers' greedy
continuations and their smallest top-1/top-2 margins, and the held-out loss. `--golden-only` re-makes golden.json from the
saved model.
"""

from __future__ import annotations

import argparse
import copy
import json
import shutil
import time
from pathlib import Path

import numpy as np
import torch
from tokenizers import Tokenizer
from transformers import LlamaConfig, LlamaForCausalLM

from make_golden import VARIANTS, greedy  # tools/ is the script's directory, so first on sys.path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "tests" / "data" / "tiny-llama3"
OUT = ROOT / "tests" / "data" / "tiny-llama3-trained"
# make_golden.py's tiny-llama3 (llama3 rope, GQA over 2 kv heads, untied), wider and deeper
CONFIG = {**VARIANTS["tiny-llama3"][0], "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 4,
          "num_attention_heads": 4, "head_dim": 64}
PROMPT_LENGTHS = [8, 40, 200, 600, 1500]


def corpus_ids(tok: Tokenizer) -> np.ndarray:
    files = sorted(ROOT.glob("*.md")) + sorted((ROOT / "docs").glob("*.md")) + sorted((ROOT / "medha_jax").rglob("*.py"))
    text = "\n\n".join(f.read_text(errors="replace") for f in files)
    return np.asarray(tok.encode(text, add_special_tokens=False).ids, np.int64)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=800)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--golden-only", action="store_true", help="re-make golden.json from the saved model")
    args = ap.parse_args()
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    tok = Tokenizer.from_file(str(SRC / "tokenizer.json"))
    ids = corpus_ids(tok)
    split = int(len(ids) * 0.9)
    train, held = ids[:split], ids[split:]
    if args.golden_only:
        model = LlamaForCausalLM.from_pretrained(OUT, dtype=torch.float32).eval()
        old = json.loads((OUT / "golden.json").read_text())
        write_golden(model, tok, held, rng, args.new_tokens, old["steps"], old["held_out_loss"])
        return
    model = LlamaForCausalLM(LlamaConfig(architectures=["LlamaForCausalLM"], **CONFIG)).float()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=3e-3, total_steps=args.steps, pct_start=0.1)
    window, batch = 256, 16
    t0 = time.time()
    for step in range(args.steps):
        starts = rng.integers(0, len(train) - window - 1, size=batch)
        x = torch.tensor(np.stack([train[s:s + window] for s in starts]))
        loss = model(input_ids=x, labels=x).loss
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        if step % 100 == 0 or step == args.steps - 1:
            print(f"step {step} loss {loss.item():.3f} ({time.time() - t0:.0f} s)", flush=True)
    model.eval()
    with torch.no_grad():
        xs = torch.tensor(np.stack([held[s:s + window] for s in range(0, len(held) - window, window)][:32]))
        held_loss = float(model(input_ids=xs, labels=xs).loss)
    print(f"held-out loss {held_loss:.3f} nats/token")

    if OUT.exists():
        shutil.rmtree(OUT)
    with torch.no_grad():  # stored in bfloat16 (half the bytes); golden comes from the same values
        for prm in model.parameters():
            prm.copy_(prm.to(torch.bfloat16).float())
    model.generation_config.eos_token_id = None  # golden continuations never stop early
    model.generation_config.pad_token_id = 0
    # a copy: .to() also casts the rotary inv_freq buffer, and a bf16 rope would make golden wrong
    copy.deepcopy(model).to(torch.bfloat16).save_pretrained(OUT, safe_serialization=True)
    (OUT / "generation_config.json").unlink(missing_ok=True)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(SRC / f, OUT / f)
    write_golden(model, tok, held, rng, args.new_tokens, args.steps, held_loss)


def write_golden(model, tok, held, rng, new_tokens: int, steps: int, held_loss: float) -> None:
    prompts = []
    for n in PROMPT_LENGTHS:
        start = int(rng.integers(0, len(held) - n))
        p = [CONFIG["bos_token_id"]] + held[start:start + n - 1].tolist()
        _, cont, margin = greedy(model, p, new_tokens)
        prompts.append({"token_ids": p, "greedy": cont, "min_margin": margin})
        print(f"prompt {n}: margin {margin:.3f}: {tok.decode(cont)!r}")
    golden = {"variant": OUT.name, "steps": steps, "held_out_loss": held_loss, "new_tokens": new_tokens,
              "prompts": prompts}
    (OUT / "golden.json").write_text(json.dumps(golden) + "\n")


if __name__ == "__main__":
    main()
