"""Prompt scoring (`SamplingParams.prompt_logprobs`) against transformers' log-softmax.

Reference: tests/data/tiny-llama3/prompt_logprobs.json (tools/make_prompt_logprobs.py: one
transformers forward over each whole prompt, float64 log-softmax at every position). The engine
computes the same values inside its chunked prefill, one logits row per prompt token, in chunks of
at most max_num_seqs tokens beside other requests' decodes; a prompt whose prefix is cached is
still scored at every position (it takes no cached pages).
"""

import json
from pathlib import Path

import numpy as np
import pytest

from medha_jax import LLM, SamplingParams

DATA = Path(__file__).resolve().parent.parent / "data" / "tiny-llama3"
REF = json.loads((DATA / "prompt_logprobs.json").read_text())
GOLDEN = {len(p["token_ids"]): p["greedy"] for p in json.loads((DATA / "golden.json").read_text())["prompts"]}


def _llm(mesh="tp=1", scheduler="fcfs", **kw):
    n = eval(mesh.split("=")[1])  # noqa: S307 - "tp=1" / "spp=2": one axis
    # one token and one sequence bucket (page-table widths still vary): fewer programs to compile
    args = dict(model=str(DATA), scheduler=scheduler, mesh=mesh, num_devices=n, dtype="float32", max_model_len=1024,
                num_pages=256, max_num_batched_tokens=64, max_num_seqs=16, min_token_bucket=64, min_seq_bucket=16,
                warmup=False)
    return LLM(**{**args, **kw})


def _check(out, ref, top):
    lps, tops = out.prompt_logprobs, out.prompt_top_logprobs
    P = len(ref["token_ids"])
    assert len(lps) == len(tops) == P and lps[0] is None and tops[0] is None
    np.testing.assert_allclose(lps[1:], [r["logprob"] for r in ref["positions"]], atol=2e-4)
    for got, r in zip(tops[1:], ref["positions"]):
        assert len(got) == top
        np.testing.assert_allclose([lp for _, lp in got], r["top_logprobs"][:top], atol=2e-4)
        want = r["top_ids"][:top]
        gaps = -np.diff(r["top_logprobs"][:top])
        for k in range(top - 1):  # ids whose rank is clear of float32 noise (the last one's next is unknown)
            if (k == 0 or gaps[k - 1] > 1e-3) and gaps[k] > 1e-3:
                assert got[k][0] == want[k]


@pytest.mark.parametrize("mesh,scheduler", [("tp=1", "fcfs"), ("tp=2", "slo"), ("spp=2", "fcfs")])
def test_prompt_logprobs_equal_transformers_log_softmax(mesh, scheduler, tmp_path):
    llm = _llm(mesh, scheduler, profile_dir=str(tmp_path))
    prompts = [r["token_ids"] for r in REF["prompts"]]
    short = [7] * 5  # decodes beside the scored chunks
    sp = SamplingParams(max_tokens=3, temperature=0.0, ignore_eos=True, prompt_logprobs=5)
    outs = llm.generate(prompts + [short], [sp, sp, SamplingParams(max_tokens=40, temperature=0.0, ignore_eos=True)])
    for out, ref in zip(outs, REF["prompts"]):
        _check(out, ref, 5)
        assert out.token_ids == GOLDEN[len(ref["token_ids"])][:3]
    assert outs[2].prompt_logprobs is None
    kv = llm.engine.kv_manager
    assert kv.num_free_pages == kv.num_total_pages


def test_a_cached_prompt_is_still_scored_at_every_position():
    llm = _llm()
    ref = REF["prompts"][1]
    plain = SamplingParams(max_tokens=2, temperature=0.0, ignore_eos=True)
    llm.generate([ref["token_ids"]], plain)
    again = llm.generate([ref["token_ids"]], plain)[0]
    assert again.metrics.num_cached_tokens > 0  # the prefix cache holds it
    scored = llm.generate([ref["token_ids"]], SamplingParams(max_tokens=2, temperature=0.0, ignore_eos=True,
                                                             prompt_logprobs=0))[0]
    assert scored.metrics.num_cached_tokens == 0
    assert all(t == [] for t in scored.prompt_top_logprobs[1:])
    np.testing.assert_allclose(scored.prompt_logprobs[1:], [r["logprob"] for r in ref["positions"]], atol=2e-4)


def test_bad_prompt_logprobs_are_refused():
    with pytest.raises(ValueError, match="prompt_logprobs"):
        SamplingParams(prompt_logprobs=21)
    with pytest.raises(ValueError, match="prompt_logprobs"):
        SamplingParams(prompt_logprobs=True)
    llm = LLM(model=str(DATA), scheduler="fcfs_nonchunked", mesh="tp=1", num_devices=1, max_model_len=512,
              num_pages=64, warmup=False)
    with pytest.raises(ValueError, match="prompt_logprobs needs a chunked scheduler"):
        llm.generate([[1, 2, 3]], SamplingParams(prompt_logprobs=1))


def test_scored_prompts_preempted_after_their_first_token_recompute_and_finish(tmp_path):
    """16 scored prompts on 96 pages with the default scheduler (slo): decodes preempt requests
    that already have tokens, whose recompute then takes several row-capped chunks. slo once
    stopped offering such a partial recompute (neither waiting nor a first-token prefill), and
    the engine spun with nothing to run; every request must finish."""
    llm = LLM(model="demo", mesh="tp=1", num_devices=1, num_pages=96, page_size=16, max_model_len=256,
              max_num_batched_tokens=64, max_num_seqs=16, min_token_bucket=64, min_seq_bucket=16, warmup=False,
              profile_dir=str(tmp_path))  # one token and one sequence bucket, as in _llm
    sps = [SamplingParams(max_tokens=120, temperature=1.0, seed=j, ignore_eos=True, prompt_logprobs=20)
           for j in range(16)]
    outs = llm.generate(["stall " * 20] * 16, sps)
    assert all(o.finished and len(o.token_ids) == 120 for o in outs)
    assert any(o.metrics.num_preemptions for o in outs)
    # the same prompt, scored alike: each position's log-probability matches across the 16 (chunks of
    # different batches and buckets round differently in the last bits, so not bit for bit)
    first = outs[0].prompt_logprobs
    assert first[0] is None and all(o.prompt_logprobs[0] is None for o in outs)
    for o in outs:
        np.testing.assert_allclose(o.prompt_logprobs[1:], first[1:], rtol=0, atol=1e-5)
    kv = llm.engine.kv_manager
    assert kv.num_free_pages == kv.num_total_pages
