"""Make transformers' prompt log-probabilities for the tiny-llama3 checkpoint (prompt scoring tests).

Run with the reference venv (torch + transformers, never imported by the package or tests):

    /work/hf311/bin/python tools/make_prompt_logprobs.py   # writes tests/data/tiny-llama3/prompt_logprobs.json

Data flow: tests/data/tiny-llama3 (the committed checkpoint) loaded by `LlamaForCausalLM` in
float32 -> for the golden prompts of 33 and 300 tokens, one forward over the whole prompt ->
float64 log-softmax of the logits at every position q-1 -> the log-probability of prompt token q
and the 5 most likely tokens there -> prompt_logprobs.json.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from transformers import LlamaForCausalLM

DATA = Path(__file__).resolve().parent.parent / "tests" / "data" / "tiny-llama3"
LENGTHS = (33, 300)
TOP = 5


def main() -> None:
    model = LlamaForCausalLM.from_pretrained(DATA, dtype=torch.float32).eval()
    golden = json.loads((DATA / "golden.json").read_text())
    out = []
    for p in golden["prompts"]:
        ids = p["token_ids"]
        if len(ids) not in LENGTHS:
            continue
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0].double()  # logits: f64[P, V]
        lsm = torch.log_softmax(logits, dim=-1)
        rows = []
        for q in range(1, len(ids)):
            top = torch.topk(lsm[q - 1], TOP)
            rows.append(dict(logprob=float(lsm[q - 1, ids[q]]), top_ids=top.indices.tolist(),
                             top_logprobs=top.values.tolist()))
        out.append(dict(token_ids=ids, positions=rows))
    (DATA / "prompt_logprobs.json").write_text(json.dumps(dict(top=TOP, prompts=out)))
    print(f"wrote {DATA / 'prompt_logprobs.json'}: {len(out)} prompts")


if __name__ == "__main__":
    main()
