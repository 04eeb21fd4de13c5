"""The memory-mapping budget: a compile that would pass the kernel's vm.max_map_count raises a
clear error instead of crashing the process, and the engine then serves on the buckets it has."""

import pytest

from medha_jax import LLM, SamplingParams
from medha_jax.executor.background_compile import BackgroundCompiler
from medha_jax.executor.buckets import Bucket
from medha_jax.executor.executor import compile_events
from medha_jax.executor.map_budget import RESERVE, MapBudget, MappingLimitError, count_mappings

KW = dict(model="demo", scheduler="fcfs", num_devices=1, max_model_len=256, num_pages=64, page_size=16,
          max_num_batched_tokens=64, max_num_seqs=8, min_token_bucket=16, min_page_bucket=4, warmup=False,
          background_compile=False)
PROMPTS = [bytes(range(40, 40 + n)).decode("latin-1") for n in (3, 17, 40)]
GREEDY = SamplingParams(max_tokens=6, temperature=0.0, ignore_eos=True)


def _full() -> MapBudget:
    """A budget whose limit the process has reached: not one more bucket fits."""
    return MapBudget(limit=int(count_mappings() / (1.0 - RESERVE)) + 10)


def test_the_budget_names_the_limit_and_learns_what_a_compile_adds():
    assert count_mappings() > 0
    full = _full()
    with pytest.raises(MappingLimitError, match=r"vm\.max_map_count = \d+; this process holds \d+"):
        full.check(1)
    assert full.refused and not full.fits(1)
    roomy = MapBudget(limit=10 ** 9)
    assert roomy.fits(1000) and not roomy.refused
    assert roomy.per_bucket == 450  # the guess, before any compile is measured
    before = count_mappings()
    roomy.record(before - 300)
    roomy.record(before - 100)
    roomy.record(before + 500)  # memory freed during a compile: not a measurement
    assert 100 <= roomy.per_bucket <= 110  # the least, plus what this process mapped meanwhile
    assert MapBudget(limit=None).fits(10 ** 9)  # no limit known (not Linux): no check


@pytest.fixture(scope="module")
def llm():
    llm = LLM(**KW)
    yield llm
    llm.close()


def test_past_the_limit_ticks_run_padded_in_compiled_buckets_with_the_same_tokens(llm):
    ex = llm.engine.executor
    l = ex.ladders
    cover = Bucket(l.tokens[-1], l.seqs[-1], l.pages[-1])
    ex.compile_bucket(cover)
    ex.warmed_up = True
    want = [o.token_ids for o in llm.generate(PROMPTS, GREEDY)]  # in their own buckets, compiled now
    exact = set(ex._compiled) - {cover}
    assert exact
    for b in exact:  # back to the cover bucket alone
        del ex._compiled[b]
    ex.maps = _full()
    events, compiles, padded = compile_events(), ex.compiles_after_warmup, ex.padded_ticks
    outs = llm.generate(PROMPTS, GREEDY)
    assert [o.token_ids for o in outs] == want and all(o.finish_reason == "length" for o in outs)
    assert compile_events() == events and ex.compiles_after_warmup == compiles and set(ex._compiled) == {cover}
    assert ex.padded_ticks > padded and ex.maps.refused
    # a background compiler stops at its first bucket with the error and leaves the engine serving
    bc = BackgroundCompiler(ex, sorted(exact, key=lambda b: (b.tokens, b.seqs, b.pages))).start()
    assert bc.wait(60) and bc.done == 0 and isinstance(bc.error, MappingLimitError)
    assert [o.token_ids for o in llm.generate(PROMPTS, GREEDY)] == want


def test_compiling_every_bucket_past_the_limit_is_refused_before_the_first_compile(llm):
    ex = llm.engine.executor
    saved, n = ex.maps, len(ex._compiled)
    ex.maps = _full()
    try:
        with pytest.raises(MappingLimitError, match="vm.max_map_count"):
            ex.warmup(progress=False)
        assert len(ex._compiled) == n
    finally:
        ex.maps = saved
