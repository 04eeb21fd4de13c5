"""`kv_cache_dtype="fp8_e4m3"` through the whole engine, against the same engine on a bf16 cache.

On tests/data/tiny-llama3-trained (a tiny Llama trained on this repo's text, tools/train_tiny.py,
head_dim 64: its logits carry what it learned, unlike the random checkpoints' noise, which any
lossy change reorders), bf16 weights, chunked prefills mixed with decodes:
- teacher-forced along the bf16 cache's greedy continuations (every prefix, one step each: the
  prefixes come from the prefix cache, fp8 pages shared), the greedy next token equals the bf16
  cache's at >= AGREE of positions;
- where they agree, the token's log-probability drifts from the bf16 cache's by LOGPROB_MEAN_TOL
  on average and LOGPROB_P90_TOL at the 90th percentile (the stated tolerance of the fp8 cache).
Free-running, one flip at a near-tie changes everything after it (these prompts' continuations
have top-1/top-2 margins down to 0.002 nats, where even bf16 and f32 weights part);
`benchmarks/fp8_kv.py` reports that view too;
- the same memory budget holds about twice the pages.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from medha_jax import LLM, SamplingParams

CKPT = Path(__file__).resolve().parent.parent / "data" / "tiny-llama3-trained"
AGREE = 0.95  # the goal; measured 0.962 with rotated keys (benchmarks/results/fp8_kv.md), 0.93 before
LOGPROB_MEAN_TOL = 0.05  # nats: mean drift of a shared token's log-probability (measured 0.028; 0.056 unrotated)
LOGPROB_P90_TOL = 0.12  # nats: its 90th percentile (measured 0.078; 0.15 unrotated)


def _llm(kv_cache_dtype, **kw):
    # One token and one sequence bucket (the page-table widths still vary): each shape compiles in
    # both engines, and compiling was most of this module's time.
    args = dict(model=str(CKPT), scheduler="fcfs", dtype="bfloat16", kv_cache_dtype=kv_cache_dtype,
                max_model_len=2048, num_pages=512, page_size=8, max_num_batched_tokens=256,
                max_num_seqs=8, min_token_bucket=256, min_seq_bucket=8, warmup=False)
    return LLM(**{**args, **kw})


NEW = 32


def _teacher_forced(llm, prompts, continuations):
    """The greedy next token and its logprob after every prefix of each continuation
    (prompt + cont[:k], k < NEW): per-position agreement that one early flip cannot compound."""
    one = SamplingParams(max_tokens=1, temperature=0.0, ignore_eos=True)
    out = []
    for p, cont in zip(prompts, continuations):
        llm.generate([p], one)  # its pages are cached before the prefixes arrive
        out.extend((o.token_ids[0], o.logprobs[0]) for o in llm.generate([p + cont[:k] for k in range(NEW)], one))
    return out


@pytest.fixture(scope="module")
def runs():
    golden = json.loads((CKPT / "golden.json").read_text())
    prompts = [p["token_ids"] for p in golden["prompts"]]
    ref = _llm("auto")
    conts = [o.token_ids for o in ref.generate(prompts, SamplingParams(max_tokens=NEW, temperature=0.0,
                                                                        ignore_eos=True))]
    fp8 = _llm("fp8_e4m3")
    runs = {"bf16": _teacher_forced(ref, prompts, conts), "fp8": _teacher_forced(fp8, prompts, conts)}
    for llm in (ref, fp8):
        assert llm.engine.kv_manager.num_free_pages == llm.engine.kv_manager.num_total_pages
    return runs


def test_greedy_tokens_follow_the_bf16_cache(runs):
    same = sum(a[0] == b[0] for a, b in zip(runs["bf16"], runs["fp8"]))
    assert same / len(runs["bf16"]) >= AGREE, f"{same} of {len(runs['bf16'])} positions agree"


def test_logprobs_stay_within_the_stated_tolerance(runs):
    both = [(a[1], b[1]) for a, b in zip(runs["bf16"], runs["fp8"]) if a[0] == b[0]]
    drift = sorted(abs(a - b) for a, b in both)
    assert sum(drift) / len(drift) < LOGPROB_MEAN_TOL, drift
    assert drift[int(0.9 * len(drift))] < LOGPROB_P90_TOL, drift


def test_a_memory_budget_holds_twice_the_pages():
    pages = {kv: _llm(kv, num_pages=None, kv_cache_memory_gb=0.01).engine.kv_manager.num_total_pages
             for kv in ("auto", "fp8_e4m3")}
    assert 1.98 <= pages["fp8_e4m3"] / pages["auto"] <= 2.0, pages


def test_unknown_kv_cache_dtype_is_refused():
    with pytest.raises(ValueError, match="kv_cache_dtype must be one of"):
        _llm("fp8")
