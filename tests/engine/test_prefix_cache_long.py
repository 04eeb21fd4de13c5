"""Prefix caching over a shared prefix of thousands of tokens: the greedy tokens of an engine that
prefills every prompt in full (issue 13: "shared prefixes of 1 to several thousand tokens").

A 3,000-token document, then prompts that repeat all of it, all of it plus a partial page, its
first 2,000 tokens plus another ending, and a prompt that shares one token with it, all four at
once: each gets the tokens of the plain engine and the cached tokens its shared whole pages hold.
One token, sequence and page-table bucket per engine (one compile each)."""

from __future__ import annotations

import random

from medha_jax import LLM, SamplingParams

KW = dict(model="demo", scheduler="fcfs", max_model_len=4096, num_pages=600, page_size=16,
          max_num_batched_tokens=512, max_num_seqs=8, min_token_bucket=512, min_seq_bucket=8,
          min_page_bucket=256, warmup=False)


def test_a_shared_prefix_of_thousands_of_tokens_gives_the_tokens_of_prefilling_everything():
    rng = random.Random(0)
    doc = [rng.randrange(3, 250) for _ in range(3000)]
    prompts = [doc, doc + [7, 8, 9], doc[:2000] + [rng.randrange(3, 250) for _ in range(200)],
               doc[:1] + [rng.randrange(3, 250) for _ in range(40)]]
    sp = SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True)
    plain = LLM(enable_prefix_caching=False, **KW)
    want = [o.token_ids for o in plain.generate(prompts, sp)]
    plain.close()
    cached = LLM(**KW)
    try:
        assert cached.generate([doc], sp)[0].token_ids == want[0]  # fills the cache
        got = cached.generate(prompts, sp)  # concurrent requests sharing it
        assert [o.token_ids for o in got] == want
        page = KW["page_size"]
        hits = [o.metrics.num_cached_tokens for o in got]
        # whole shared pages, and never a prompt's last token (it must be computed for its logits)
        assert hits == [(3000 - 1) // page * page, 3000 // page * page, 2000 // page * page, 0]
    finally:
        cached.close()
