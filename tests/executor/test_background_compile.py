"""Serving while the shape buckets compile in the background: same tokens; a tick waits for a
compile only where padding would cost it longer.

The reference is the same engine with every bucket compiled before serving (background_compile
off): padding a batch into a larger compiled bucket must not change a single greedy token.
"""

import json
import time

import pytest

from medha_jax import LLM, SamplingParams
from medha_jax.engine_builder import profile_key_for
from medha_jax.executor import background_compile
from medha_jax.executor.background_compile import BackgroundCompiler
from medha_jax.executor.buckets import Bucket
from medha_jax.executor.executor import compile_events
from medha_jax.runtime_profiler import get_predictor
from medha_jax.scheduler.predictor import PROFILE_VERSION

KW = dict(model="demo", scheduler="fcfs", num_devices=1, max_model_len=256, num_pages=64, page_size=16,
          max_num_batched_tokens=64, max_num_seqs=8, min_token_bucket=32, min_page_bucket=8)
# 2 x 2 x 2 = 8 buckets: enough that most ticks pad into a larger one, few enough to compile quickly
PROMPTS = [bytes(range(40, 40 + n)).decode("latin-1") for n in (3, 17, 60, 120, 1, 90)]
GREEDY = SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True)


@pytest.fixture(scope="module")
def reference():
    llm = LLM(background_compile=False, **KW)
    ex = llm.engine.executor
    assert ex.background is None and len(ex._compiled) == len(ex.ladders.all_buckets())
    outs = llm.generate(PROMPTS, GREEDY)
    llm.close()
    return [o.token_ids for o in outs]


def test_serving_pads_into_the_cover_bucket_while_the_rest_still_compile(reference):
    llm = LLM(warmup=False, **KW)
    ex = llm.engine.executor
    l = ex.ladders
    cover = Bucket(l.tokens[-1], l.seqs[-1], l.pages[-1])
    ex.compile_bucket(cover)  # what warmup(background=True) compiles before serving
    ex.warmed_up = True
    ex.background = BackgroundCompiler(ex, [b for b in l.all_buckets() if b != cover])  # not started: still at work
    events = compile_events()
    outs = llm.generate(PROMPTS, GREEDY)
    assert compile_events() == events and ex.compiles_after_warmup == 0  # every tick padded, none compiled
    assert set(ex._compiled) == {cover}
    assert [o.token_ids for o in outs] == reference
    llm.close()


def test_background_compiler_finishes_and_then_every_tick_runs_in_its_own_bucket(reference):
    llm = LLM(**KW)
    ex = llm.engine.executor
    assert ex.background.busy == ex.busy  # on a CPU its eager buckets wait for the ticks' pauses
    assert ex.wait_compiled(600) and ex.background.error is None
    assert set(ex._compiled) == set(ex.ladders.all_buckets())
    assert all(ex.runnable(b) == b for b in ex.ladders.all_buckets())
    events = compile_events()
    outs = llm.generate(PROMPTS, GREEDY)
    assert compile_events() == events and ex.compiles_after_warmup == 0
    assert [o.token_ids for o in outs] == reference
    llm.close()


def test_close_stops_the_background_compiler_at_its_next_bucket():
    llm = LLM(warmup=False, **KW)
    ex = llm.engine.executor
    ex.background = bc = BackgroundCompiler(ex, ex.ladders.all_buckets())
    llm.close()
    bc.start()
    assert bc.wait(60) and bc.done == 0 and not ex._compiled


def test_runnable_picks_the_cheapest_compiled_bucket_that_holds_the_tick():
    llm = LLM(warmup=False, **KW)
    ex = llm.engine.executor
    big, wide, need = Bucket(64, 8, 16), Bucket(32, 4, 16), Bucket(16, 4, 8)
    for b in (big, wide):
        ex.compile_bucket(b)
    ex.background = BackgroundCompiler(ex, [])  # not started: "still compiling"
    assert ex.runnable(need) == wide  # both hold it; wide pads less
    assert ex.runnable(Bucket(64, 4, 8)) == big  # only big holds 64 tokens
    assert ex.runnable(Bucket(128, 4, 8)) == Bucket(128, 4, 8)  # none holds it: compiled on the spot
    assert ex.runnable(big) == big


def test_a_tick_waits_for_its_bucket_where_padded_ticks_take_longer_than_a_compile(reference):
    """A tick padded into a bucket whose last tick took longer than the median compile waits for
    its own bucket instead (compiled next in the background); where padded ticks are quick it pads.
    Either way the tokens are the reference's."""
    llm = LLM(warmup=False, **KW)
    ex = llm.engine.executor
    l = ex.ladders
    cover = Bucket(l.tokens[-1], l.seqs[-1], l.pages[-1])
    ex.compile_bucket(cover)
    ex.warmed_up = True
    ex.background = BackgroundCompiler(ex, [], eager=0).start()  # compiles only what ticks want
    ex.padded_estimate = lambda b: 1e3  # no tick in cover yet: its predicted padded tick outlasts any compile
    need = Bucket(l.tokens[0], l.seqs[0], l.pages[0])
    assert ex.runnable(need) == need and ex.compile_waits == 1 and ex.padded_ticks == 0
    ex.tick_seconds[cover] = 0.0  # a measured quick padded tick there outweighs the prediction: pad
    other = Bucket(l.tokens[1], l.seqs[0], l.pages[0])
    assert ex.runnable(other) == cover and ex.padded_ticks == 1 and ex.compile_waits == 1
    ex.tick_seconds[cover] = 1e3  # as if a padded tick there had taken longer than any compile
    third = Bucket(l.tokens[0], l.seqs[1], l.pages[0])
    assert ex.runnable(third) == third and ex.compile_waits == 2 and ex.padded_ticks == 1
    assert ex.wait_compiled(600) and other in ex._compiled
    assert [o.token_ids for o in llm.generate(PROMPTS, GREEDY)] == reference
    assert cover in ex.tick_seconds  # ticks are timed per bucket
    llm.close()


def test_the_engine_prices_a_padded_tick_with_its_predictor_before_one_has_run(tmp_path):
    """The executor's padded-tick estimate is the engine's predictor (here batch mode's provisional
    one): more token rows, more time; the demo model's cover bucket is predicted far below a
    compile, so its ticks pad. fcfs without a profile has no predictor: only measured ticks count."""
    llm = LLM(**{**KW, "scheduler": "slo", "profile_dir": str(tmp_path)})
    ex = llm.engine.executor
    l = ex.ladders
    small, cover = Bucket(l.tokens[0], l.seqs[0], l.pages[0]), Bucket(l.tokens[-1], l.seqs[-1], l.pages[-1])
    assert 0.0 < ex.padded_estimate(small) < ex.padded_estimate(cover) < 1.0
    assert ex.wait_compiled(600)
    llm.close()
    fcfs = LLM(warmup=False, **KW)
    assert fcfs.engine.executor.padded_estimate is None
    fcfs.close()


def test_on_a_cpu_eager_buckets_wait_for_a_pause_in_the_ticks_and_wanted_ones_do_not():
    """While ticks run (`busy`), the background compiler compiles what a tick wants and defers the
    eager buckets; once the ticks pause it compiles those too. The executor is busy while a tick
    is in flight and for BUSY_PAUSE_S after the last one ended."""
    llm = LLM(warmup=False, **KW)
    ex = llm.engine.executor
    assert not ex.busy()  # no tick yet
    l = ex.ladders
    eager, wanted = Bucket(l.tokens[0], l.seqs[0], l.pages[0]), Bucket(l.tokens[1], l.seqs[1], l.pages[1])
    ticking = [True]
    ex.background = bc = BackgroundCompiler(ex, [eager, wanted], eager=1, busy=lambda: ticking[0]).start()
    bc.want(wanted)
    deadline = time.monotonic() + 300
    while wanted not in ex._compiled and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(3 * background_compile.BUSY_POLL_S)  # the eager bucket had its chances to start, and was deferred
    assert wanted in ex._compiled and eager not in ex._compiled and bc.eager == [eager]
    ticking[0] = False  # the ticks pause
    assert bc.wait(300) and eager in ex._compiled
    timed = ex._timer(wanted)  # a tick launched
    assert ex.busy()
    timed(0.01)  # ... and done
    assert ex.busy() and ex._ticks_open == 0  # within the pause window
    time.sleep(ex.BUSY_PAUSE_S + 0.1)
    assert not ex.busy()
    llm.close()


def test_a_program_that_ends_while_buckets_compile_exits_cleanly(tmp_path):
    """The interpreter's exit waits for the compile in progress (tearing XLA down under it crashed
    the process with SIGSEGV after the user's program had finished)."""
    import os
    import subprocess
    import sys

    code = (f"from medha_jax import LLM, SamplingParams\n"
            f"llm = LLM(**{KW!r})\n"
            f"assert llm.engine.executor.background.total > 1\n"
            f"print(llm.generate(['Hi'], SamplingParams(max_tokens=2))[0].token_ids)\n")
    env = dict(os.environ, JAX_COMPILATION_CACHE_DIR=str(tmp_path / "xla"))  # cold: compiles take seconds
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]


def test_the_start_up_profile_measures_in_few_buckets_and_every_token_size():
    from medha_jax.executor.buckets import BucketLadders
    from medha_jax.runtime_profiler import composition_bucket, composition_grid, in_few_buckets

    ladders = BucketLadders.build(max_tokens=512, max_seqs=16, max_pages=256, min_tokens=32, min_pages=32)

    def bucket_of(c):
        return composition_bucket(ladders, 16, c)

    comps = composition_grid(512, 16, 4096)
    assert len({bucket_of(c) for c in comps}) > 20
    kept = in_few_buckets(comps, bucket_of, 9)
    buckets = {bucket_of(c) for c in kept}
    assert len(buckets) == 9
    assert {b.tokens for b in buckets} == set(ladders.tokens)  # every chunk size is measured
    assert [c for c in comps if bucket_of(c) in buckets] == kept  # every composition of a chosen bucket, in order
    assert len(kept) > len(comps) // 3


def test_the_start_up_profile_fits_a_kv_pool_that_is_not_a_power_of_two(tmp_path):
    """70 pages per group: the page-table ladder reaches 128, the compositions must stay within the
    70 pages synthetic batches can use (a cold start failed with 'needs 124 pages per sequence')."""
    kw = {**KW, "scheduler": "slo", "batch_mode": False, "num_pages": 70, "max_model_len": 2048,
          "profile_dir": str(tmp_path)}  # a server's start-up: batch mode measures no profile
    llm = LLM(**kw)
    assert llm.engine.scheduler.predictor is not None
    assert llm.generate(["Hi"], GREEDY)[0].token_ids

    # A profile an older release wrote (features meant other work) is measured again, not fatal.
    e = llm.engine
    (path,) = tmp_path.glob("*.json")
    data = json.loads(path.read_text())
    path.write_text(json.dumps({**data, "version": PROFILE_VERSION - 1}))
    again = get_predictor(e.config, e.scheduler_config, e.executor, profile_key_for(e.config, e.mesh),
                          e.model_config.vocab_size, e.max_model_len)
    assert again is not None and json.loads(path.read_text())["version"] == PROFILE_VERSION
    llm.close()
