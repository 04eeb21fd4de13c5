"""LARS on the real engine: a measured predictor, adaptive chunks, and KV-memory pressure.

The engine measures a quick runtime profile of the demo model on this CPU at start-up (no
profile on disk yet), fits the predictor, and LARS packs each iteration under t_target.
"""

import pytest

from medha_jax import LLM, SamplingParams

BASE = dict(mesh="tp=1", num_devices=1, max_model_len=1024, page_size=16, max_num_batched_tokens=256,
            max_num_seqs=8, min_token_bucket=16, min_page_bucket=16, chunk_granularity=16, min_chunk=16)


@pytest.fixture(scope="module")
def profile_dir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("profiles"))


def _greedy(n):
    return SamplingParams(max_tokens=n, temperature=0.0, ignore_eos=True)


def test_chunks_shrink_as_the_long_prefill_kv_grows(profile_dir):
    llm = LLM(model="demo", scheduler="lars", batch_mode=False, num_pages=80, t_target=0.02, profile_dir=profile_dir, warmup=False,
              **BASE)
    pred = llm.engine.scheduler.predictor
    assert pred is not None and pred.fit_info["num_samples"] > 10
    prompt = [(i * 37) % 250 + 3 for i in range(1000)]
    llm.generate([prompt], _greedy(2))
    chunks = [r.composition.seqs[0] for r in llm.engine.scheduler.records if r.composition.seqs[0][0] > 1]
    sizes = [q for q, _ in chunks[:-1]]  # the last chunk is whatever remains
    assert sum(q for q, _ in chunks) == len(prompt)
    assert len(sizes) >= 3
    # Online correction rescales predictions by measured (noisy) times, so sizes may wobble
    # from one chunk to the next; the trend must still be down as the KV grows.
    k = max(1, len(sizes) // 3)
    info = f"sizes {sizes}, predictor {pred.coefficients}"
    assert sum(sizes[:k]) / k > sum(sizes[-k:]) / k, info
    assert sizes[-1] < sizes[0], info
    measured = [r for r in llm.engine.scheduler.records if r.measured is not None and r.predicted]
    assert len(measured) == len(llm.engine.scheduler.records)


def test_exhausted_kv_pages_finish_every_request_with_the_same_tokens(profile_dir):
    prompts = [[(i * 13 + j * 7) % 250 + 3 for j in range(n)] for i, n in enumerate((150, 90, 200, 60, 120, 170))]
    roomy = LLM(model="demo", scheduler="lars", num_pages=256, profile_dir=profile_dir, warmup=False, **BASE)
    want = [o.token_ids for o in roomy.generate(prompts, _greedy(40))]
    del roomy
    tight = LLM(model="demo", scheduler="lars", num_pages=24, profile_dir=profile_dir, warmup=False, **BASE)
    outs = tight.generate(prompts, _greedy(40))
    assert [o.token_ids for o in outs] == want
    assert tight.engine.scheduler.num_preemptions > 0
    assert sum(o.metrics.num_preemptions for o in outs) > 0
    kv = tight.engine.kv_manager
    assert kv.num_free_pages == kv.num_total_pages
