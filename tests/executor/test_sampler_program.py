"""The sampler is a program of its own, compiled once per sequence count: a tick's program holds no
sampling, and the buckets of one sequence count share one compiled sampler (it was compiled into
every bucket's tick, ~30% of each bucket's compile)."""

import jax

from medha_jax import LLM, SamplingParams
from medha_jax.executor.buckets import Bucket
from tests.jaxpr_walk import primitives

KW = dict(model="demo", scheduler="fcfs", num_devices=1, max_model_len=256, num_pages=64, page_size=16,
          max_num_batched_tokens=64, max_num_seqs=8, min_token_bucket=16, min_page_bucket=4, warmup=False)
SAMPLING = {"top_k", "random_bits", "random_wrap", "threefry2x32"}  # what only the draw and top logprobs use


def test_ticks_hold_no_sampling_and_buckets_share_one_sampler_per_sequence_count():
    llm = LLM(**KW)
    ex = llm.engine.executor
    tick = primitives(jax.make_jaxpr(ex._step)(*ex._abstract_args(Bucket(16, 4, 4))).jaxpr)
    sampler = primitives(jax.make_jaxpr(ex._sample)(*ex._abstract_sample_args(4)).jaxpr)
    assert SAMPLING & set(sampler), "the pattern must find the sampler's primitives"
    assert not SAMPLING & set(tick)

    ex.compile_bucket(Bucket(16, 4, 4))
    four = ex._samplers[4]
    ex.compile_bucket(Bucket(32, 4, 8))  # same sequence count: its sampler is reused, not compiled again
    assert ex._samplers[4] is four and set(ex._samplers) == {4}
    ex.compile_bucket(Bucket(16, 8, 4))
    assert set(ex._samplers) == {4, 8}

    # A tick runs in its bucket with that count's sampler: sampled rows come back in order.
    ex.warmed_up = True
    sp = SamplingParams(max_tokens=3, temperature=0.0, ignore_eos=True)
    outs = llm.generate(["ab", "cde"], sp)
    assert [len(o.token_ids) for o in outs] == [3, 3] and ex.compiles_after_warmup == 0
    llm.close()
