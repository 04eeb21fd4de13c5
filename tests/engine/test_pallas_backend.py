"""The engine with the Pallas kernels (interpret mode on the CPU) gives the same greedy tokens as
the XLA backend and as Hugging Face, on prompts spanning many pages and in hybrid iterations
where decodes of finished prompts share batches with prefill chunks of others, and on two kvp
groups running their own batches."""

import json
from pathlib import Path

import jax
import pytest

from medha_jax import LLM, SamplingParams
from tests.jaxpr_walk import primitives, sub_jaxprs

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


@pytest.mark.slow
def test_pallas_backend_on_kvp_groups_matches_transformers():
    """Two kvp groups of 160 positions: the 300-token prompt's keys end up on both, so its queries
    go to the other group's Pallas call and come back as partials to merge; the short ones run on
    whichever group they were placed on."""
    cases = [p for p in GOLDEN["prompts"] if len(p["token_ids"]) <= 300]
    sp = SamplingParams(max_tokens=GOLDEN["new_tokens"], temperature=0.0, ignore_eos=True)
    llm = LLM(model=MODEL, attention_backend="pallas", scheduler="fcfs", mesh="kvp=2", num_devices=2,
              max_model_len=1024, num_pages=128, page_size=16, max_tokens_per_kvp_group=160,
              max_num_batched_tokens=128, max_num_seqs=8, min_token_bucket=128, min_seq_bucket=8, warmup=False)
    assert max(len(p["token_ids"]) for p in cases) > 160
    assert [o.token_ids for o in llm.generate([p["token_ids"] for p in cases], sp)] == [p["greedy"] for p in cases]


def test_work_lists_are_built_once_a_step_not_once_a_layer():
    """The Pallas kernels' work lists (a sort, a cumsum) come from the step's metadata alone, so the
    engine step builds them before its layer loop (`llama.attention_plans`): the scan over the
    layers holds the kernels and no sort. XLA:GPU did not move them out of the loop itself."""
    llm = LLM(model=MODEL, attention_backend="pallas", scheduler="fcfs", max_model_len=1024, num_pages=64,
              page_size=16, max_num_batched_tokens=64, max_num_seqs=4, warmup=False)
    ex = llm.engine.executor
    step = jax.make_jaxpr(ex._step)(*ex._abstract_args(ex.ladders.pick(1, 1, 1))).jaxpr
    everything = primitives(step)
    layer_scans = []

    def find(jaxpr):
        for eqn in jaxpr.eqns:
            for sub in sub_jaxprs(eqn):
                if eqn.primitive.name == "scan" and primitives(sub)["pallas_call"]:
                    layer_scans.append(primitives(sub))
                else:
                    find(sub)

    find(step)
    assert len(layer_scans) == 1
    inside = layer_scans[0]
    assert inside["pallas_call"] == 2  # the prefill and the decode kernel, once per layer
    assert inside["sort"] == 0 and inside["cumsum"] == 0
    assert everything["sort"] >= 1 and everything["cumsum"] >= 1  # built once, outside the loop
