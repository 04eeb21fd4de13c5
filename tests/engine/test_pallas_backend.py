"""The engine with the Pallas kernels (interpret mode on the CPU) gives the same greedy tokens as
the XLA backend and as Hugging Face, on prompts spanning many pages and in hybrid iterations
where decodes of finished prompts share batches with prefill chunks of others."""

import json
from pathlib import Path

import pytest

from medha_jax import LLM, SamplingParams

GOLDEN = json.loads((Path(__file__).resolve().parent.parent / "data" / "tiny-llama3" / "golden.json").read_text())
MODEL = str(Path(__file__).resolve().parent.parent / "data" / "tiny-llama3")


@pytest.mark.slow
def test_pallas_backend_matches_xla_and_transformers():
    cases = [p for p in GOLDEN["prompts"] if len(p["token_ids"]) <= 300]  # interpret mode is slow
    prompts = [p["token_ids"] for p in cases]
    sp = SamplingParams(max_tokens=GOLDEN["new_tokens"], temperature=0.0, ignore_eos=True)
    common = dict(scheduler="fcfs", mesh="tp=2", num_devices=2, max_model_len=1024, num_pages=128, page_size=16,
                  max_num_batched_tokens=128, max_num_seqs=8, warmup=False)
    pallas = LLM(model=MODEL, attention_backend="pallas", **common)
    assert pallas.engine.executor.attention_backend == "pallas"
    got = [o.token_ids for o in pallas.generate(prompts, sp)]
    assert got == [p["greedy"] for p in cases]
    hybrid = [r for r in pallas.engine.scheduler.records
              if any(q > 1 for q, _ in r.composition.seqs) and any(q == 1 and kv > 0 for q, kv in r.composition.seqs)]
    assert hybrid, "no iteration mixed prefill chunks with decodes"
    xla = LLM(model=MODEL, attention_backend="xla", **common)
    assert [o.token_ids for o in xla.generate(prompts, sp)] == got
