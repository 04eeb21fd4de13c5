"""Acceptance: greedy tokens from `LLM.generate` on (tp, spp, kvp) meshes equal transformers'.

Checkpoint -> sharded params (layers over spp, heads over tp) -> fcfs scheduler (chunked
prefills, decodes in the same iterations) -> KV pages per kvp group with progressive onboarding
(`max_tokens_per_kvp_group` small enough that the longest prompt spreads over every group while
each short prompt stays on the group it was placed on) -> one batch per kvp group, pipelined
ticks (spp microbatches in flight) -> KVP attention exchange (a long request's queries reach
every group holding its keys) and merge -> sampler. All golden prompts (1 to 3000 tokens, the
short ones twice) run together, so short requests share iterations with the long one; then all of them again, from the prefix cache. Goldens: tools/make_golden.py (tiny-llama3 has 2
layers; tiny-llama3-4l has 4, so spp=4 gets a layer per stage).
"""

import json
import shutil
from pathlib import Path

import pytest

from medha_jax import LLM, SamplingParams
from medha_jax.mesh import mesh_size
from medha_jax.model.inputs import place

DATA = Path(__file__).resolve().parent.parent / "data"


def _model_dir(variant, tmp_path):
    if (DATA / variant / "tokenizer.json").exists():
        return str(DATA / variant)
    d = tmp_path / variant  # checkpoints without a tokenizer borrow tiny-llama3's (same vocab)
    shutil.copytree(DATA / variant, d)
    shutil.copy(DATA / "tiny-llama3" / "tokenizer.json", d / "tokenizer.json")
    return str(d)


@pytest.mark.parametrize("variant,mesh,group_tokens", [
    ("tiny-llama3", "spp=2", None),
    ("tiny-llama3", "kvp=2", 1536),
    ("tiny-llama3", "kvp=4", 768),
    ("tiny-llama3", "tp=2,spp=2,kvp=2", 1536),
    ("tiny-llama3-4l", "spp=4,kvp=2", 1312),
])
def test_greedy_tokens_equal_transformers(variant, mesh, group_tokens, tmp_path):
    golden = json.loads((DATA / variant / "golden.json").read_text())
    llm = LLM(model=_model_dir(variant, tmp_path), scheduler="fcfs", mesh=mesh, num_devices=mesh_size(mesh),
              dtype="float32",
              max_model_len=4096, num_pages=256, max_tokens_per_kvp_group=group_tokens,
              max_num_batched_tokens=256, max_num_seqs=8, min_token_bucket=256, min_seq_bucket=8,
              min_page_bucket=32, warmup=False)
    eng = llm.engine
    kvp = eng.kv_manager.kvp
    longest = max(len(p["token_ids"]) for p in golden["prompts"])
    if kvp > 1:  # the long prompt needs every group; the others fit in one
        assert eng.kv_manager.pages_for(longest) and len(eng.kv_manager.pages_for(longest)) == kvp
    steps = []  # every step and its host arrays: which group ran which tokens
    pack = eng.executor.pack
    eng.executor.pack = lambda step: steps.append((step, pack(step))) or steps[-1][1]
    sp = SamplingParams(max_tokens=golden["new_tokens"], temperature=0.0, ignore_eos=True)
    # every short prompt twice (many shorts beside the long one, spread over the groups)
    prompts = golden["prompts"] + [p for p in golden["prompts"] if len(p["token_ids"]) < longest]
    outs = llm.generate([p["token_ids"] for p in prompts], sp)
    if kvp > 1:
        long_id = next(o.request_id for p, o in zip(prompts, outs) if len(p["token_ids"]) == longest)
        # the groups ran their own batches: in some step two groups each ran a short request
        def short_groups(step):
            on = place([(s.token_ids, s.start_pos, s.page_tables, s.first_group) for s in step.seqs], kvp,
                       eng.kv_manager.max_tokens_per_kvp_group)
            return {g for s, (g, _) in zip(step.seqs, on) if s.request_id != long_id}
        assert any(len(short_groups(step)) >= 2 for step, _ in steps)
        # and some step had a query whose keys every group held (the long prompt's attention merged)
        assert any(((pb.kv_lens > 0).sum(axis=0) == kvp).any() for _, pb in steps)
    for p, out in zip(prompts, outs):
        assert out.token_ids == p["greedy"], f"prompt of {len(p['token_ids'])} tokens on {mesh}"
    # The same prompts again: their full pages come from the prefix cache (on every kvp group the
    # long prompt spans, and through the stage pipeline), and the tokens must not change.
    again = llm.generate([p["token_ids"] for p in golden["prompts"]], sp)
    for p, out in zip(golden["prompts"], again):
        assert out.token_ids == p["greedy"], f"prompt of {len(p['token_ids'])} tokens on {mesh}, prefix-cached"
    cached = {len(p["token_ids"]): out.metrics.num_cached_tokens for p, out in zip(golden["prompts"], again)}
    assert cached[longest] >= longest // 2  # most of it (the 256 pages cannot keep every prompt's tail)
    if kvp > 1:
        assert cached[longest] > eng.kv_manager.max_tokens_per_kvp_group  # reused on more than group 0
    assert eng.kv_manager.num_free_pages == eng.kv_manager.num_total_pages
    assert eng.executor.idle
