"""Engine behaviour on the embedded demo model: stops, compiles, bad input, seeds, aborts.

One warmed-up LLM per module (small shape ladders) keeps compile time down; every test leaves
it idle with all KV pages free, which the fixture checks.
"""

import math
import time

import pytest

from medha_jax import LLM, SamplingParams
from medha_jax.executor.device_timeline import HOST_PHASES, recording
from medha_jax.executor.executor import compile_events

KW = dict(scheduler="fcfs", mesh="tp=2", num_devices=2, max_model_len=256, num_pages=64, page_size=16,
          max_num_batched_tokens=64, max_num_seqs=8, min_token_bucket=32, min_page_bucket=8)  # 8 buckets


@pytest.fixture(scope="module")
def llm():
    return LLM(model="demo", **KW)


@pytest.fixture(autouse=True)
def _pages_return(llm):
    yield
    kv = llm.engine.kv_manager
    assert not llm.engine.has_unfinished()
    assert kv.num_free_pages == kv.num_total_pages


def _greedy(n, **kw):
    return SamplingParams(max_tokens=n, temperature=0.0, ignore_eos=True, **kw)


def test_mixed_run_with_stops_compiles_nothing_after_warmup(llm):
    prompts = [bytes(range(40, 40 + n)).decode("latin-1") for n in (3, 17, 60, 120, 1, 90, 33, 150)]
    free = llm.generate(prompts, _greedy(24))
    # Stop strings and stop ids taken from what the model really says without them.
    params, expect = [], []
    for i, out in enumerate(free):
        if i % 3 == 0 and len(out.text) > 6:
            stop = out.text[3:6]
            params.append(_greedy(24, stop=[stop]))
            expect.append(("stop", out.text[: out.text.index(stop)]))
        elif i % 3 == 1:
            params.append(_greedy(24, stop_token_ids=[out.token_ids[4]]))
            expect.append(("stop_id", out.token_ids[: out.token_ids.index(out.token_ids[4]) + 1]))
        else:
            params.append(_greedy(5 + i))
            expect.append(("length", out.token_ids[: 5 + i]))
    assert {k for k, _ in expect} == {"stop", "stop_id", "length"}
    assert llm.engine.executor.wait_compiled(600)  # the background compiler is done with every bucket
    events_before = compile_events()
    outs = llm.generate(prompts, params)
    assert compile_events() == events_before
    assert llm.engine.executor.compiles_after_warmup == 0
    for out, (kind, want) in zip(outs, expect):
        if kind == "stop":
            assert out.finish_reason == "stop" and out.text == want
        elif kind == "stop_id":
            assert out.finish_reason == "stop" and out.token_ids == want and out.stop_reason == want[-1]
        else:
            assert out.finish_reason == "length" and out.token_ids == want
        assert out.metrics.ttft is not None and len(out.metrics.token_times) == len(out.token_ids)


def test_streamed_deltas_add_up_to_the_final_text(llm):
    eng = llm.engine
    req = eng.add_request("streaming check", _greedy(20))
    tokens, text, final = [], "", None
    while final is None:
        for out in eng.step():
            if out.request_id == req.request_id:
                tokens += out.new_token_ids
                text += out.new_text
                final = out if out.finished else None
    assert tokens == final.token_ids and text == final.text


def test_a_request_that_does_not_stream_gets_one_output_with_every_token(llm):
    eng = llm.engine
    params = SamplingParams(max_tokens=12, temperature=0.8, seed=3, logprobs=True, ignore_eos=True)
    twin = eng.add_request("quiet please", params)  # streams: one snapshot per token
    quiet = eng.add_request("quiet please", params, stream=False)
    got = {twin.request_id: [], quiet.request_id: []}
    while eng.has_unfinished():
        for out in eng.step():
            got[out.request_id].append(out)
    (last,) = got[quiet.request_id]
    ref = got[twin.request_id][-1]
    assert len(got[twin.request_id]) == 12 and last.finished and last.finish_reason == "length"
    assert last.token_ids == last.new_token_ids == ref.token_ids and len(last.token_ids) == 12
    assert last.text == last.new_text == ref.text and last.logprobs == last.new_logprobs == ref.logprobs


@pytest.mark.parametrize("prompt,params,match", [
    ([5, 600], _greedy(4), "outside the vocabulary"),
    ([1] * 300, _greedy(4), "max_model_len"),
    ([], _greedy(4), "empty"),
    (["a"], _greedy(4), "not an integer"),
    ("ok \ud800", _greedy(4), "character 3 is a lone surrogate U\\+D800"),
])
def test_bad_prompts_are_rejected_without_disturbing_running_requests(llm, prompt, params, match):
    eng = llm.engine
    ref = llm.generate([[7, 8, 9]], _greedy(10))[0].token_ids
    req = eng.add_request([7, 8, 9], _greedy(10))
    eng.step()
    with pytest.raises(ValueError, match=match):
        llm.generate([[3, 4], prompt], params)
    while eng.has_unfinished():
        eng.step()
    assert req.output_token_ids == ref


@pytest.mark.parametrize("kw,match", [
    (dict(max_tokens=0), "max_tokens"), (dict(top_p=0.0), "top_p"), (dict(top_p=1.5), "top_p"),
    (dict(temperature=-1.0), "temperature"), (dict(top_k=-2), "top_k"),
    (dict(temperature=float("nan")), "temperature"), (dict(temperature=1e308), r"temperature .*\[1e-05, 100\]"),
    (dict(temperature=1e-30), "temperature"), (dict(temperature="hot"), "temperature must be a finite number"),
    (dict(top_p=float("nan")), "top_p"), (dict(top_k=2**31), r"top_k .*2147483647"),
])
def test_bad_sampling_params_name_the_field(kw, match):
    with pytest.raises(ValueError, match=match):
        SamplingParams(**kw)


def test_seeded_sampling_is_reproducible_whatever_else_runs(llm):
    sp = SamplingParams(max_tokens=12, temperature=0.9, top_p=0.95, top_k=50, seed=1234, ignore_eos=True)
    alone = llm.generate(["seeded"], sp)[0].token_ids
    crowd = llm.generate(["x" * 50, "seeded", "y" * 9], [_greedy(12), sp, SamplingParams(max_tokens=12, seed=9)])
    assert crowd[1].token_ids == alone
    other = llm.generate(["seeded"], SamplingParams(max_tokens=12, temperature=0.9, seed=4321, ignore_eos=True))
    assert other[0].token_ids != alone


def test_abort_frees_pages_and_reports_abort(llm):
    eng = llm.engine
    req = eng.add_request("abort me please", _greedy(50))
    eng.step()
    eng.step()
    assert eng.kv_manager.num_free_pages < eng.kv_manager.num_total_pages
    eng.abort(req.request_id)
    outs = eng.step()
    assert [o.finish_reason for o in outs if o.request_id == req.request_id] == ["abort"]
    assert not eng.has_unfinished()


@pytest.mark.parametrize("kw,match", [
    (dict(mesh="tp=2,xp=2"), "unknown mesh axis"),
    (dict(mesh="tp=3", num_devices=2), "needs 3 devices"),
    (dict(mesh="tp=2"), "needs 2 devices but"),
    (dict(dtype="float16"), "dtype"),
    (dict(scheduler_typo=1), "unknown LLM option"),
    (dict(layer_unroll=0), "layer_unroll must be >= 1, got 0"),
])
def test_bad_engine_options_name_the_problem(kw, match):
    with pytest.raises((ValueError, TypeError), match=match):
        LLM(model="demo", **{**dict(scheduler="fcfs", num_devices=1, warmup=False), **kw})


def test_a_smaller_mesh_takes_the_first_devices():
    import jax

    llm = LLM(model="demo", scheduler="fcfs", mesh="tp=2", warmup=False, max_model_len=256, num_pages=16)
    assert list(llm.engine.mesh.devices.flat) == jax.devices()[:2]
    with pytest.raises(ValueError, match=f"needs {2 * len(jax.devices())} devices but this host has"):
        LLM(model="demo", scheduler="fcfs", mesh=f"tp=2,spp={len(jax.devices())}", warmup=False)


def test_checkpoint_dir_problems_name_the_problem(tmp_path):
    with pytest.raises(FileNotFoundError, match="config.json"):
        LLM(model=str(tmp_path), num_devices=1, warmup=False)
    (tmp_path / "config.json").write_text('{"architectures": ["MistralForCausalLM"], "model_type": "mistral"}')
    with pytest.raises(ValueError, match="MistralForCausalLM"):
        LLM(model=str(tmp_path), num_devices=1, warmup=False)


def test_a_failed_iteration_fails_only_its_requests_and_the_engine_recovers(llm):
    """Fault injection: the compiled step raises after its donated KV cache was consumed."""
    eng = llm.engine
    ref = llm.generate([[11, 12, 13]], _greedy(8))[0].token_ids

    def failing_launch(step):
        eng.executor.kv_k.delete()  # what a step that died on the device leaves behind
        raise RuntimeError("injected device failure")

    eng.executor.launch = failing_launch
    try:
        victim = eng.add_request([3, 4, 5], _greedy(8))
        outs = eng.step()
    finally:
        del eng.executor.launch
    assert [(o.request_id, o.finish_reason) for o in outs] == [(victim.request_id, "error")]
    assert "injected device failure" in outs[0].error
    assert not eng.executor.kv_cache_lost()
    assert llm.generate([[11, 12, 13]], _greedy(8))[0].token_ids == ref


def test_async_scheduling_gives_the_tokens_stops_and_logprobs_of_waiting_for_each_step(llm):
    """The default engine launches step n+1 before reading step n's tokens (the device feeds them);
    one that waits for every step must produce exactly the same requests' outputs."""
    assert llm.engine._async
    sync = LLM(model="demo", async_scheduling=False, **KW)
    assert not sync.engine._async
    prompts = [bytes(range(50, 50 + n)).decode("latin-1") for n in (5, 70, 1, 130, 22)]
    free = sync.generate(prompts, _greedy(20))
    params = [
        _greedy(20, stop_token_ids=[free[0].token_ids[3]]),
        SamplingParams(max_tokens=16, temperature=0.8, top_k=40, seed=7, logprobs=True, ignore_eos=True),
        _greedy(1),
        _greedy(20, stop=[free[3].text[2:5]]) if len(free[3].text) > 5 else _greedy(7),
        SamplingParams(max_tokens=20, temperature=1.0, seed=11, ignore_eos=True),
    ]
    want = sync.generate(prompts, params)
    sync.close()
    got = llm.generate(prompts, params)
    for g, w in zip(got, want):
        assert (g.token_ids, g.text, g.finish_reason, g.stop_reason) == (w.token_ids, w.text, w.finish_reason,
                                                                         w.stop_reason)
        assert g.logprobs == pytest.approx(w.logprobs, abs=1e-4)  # other batches: other summation orders
    assert got[0].finish_reason == "stop" and len(got[0].token_ids) < 20  # stopped by its token


def test_late_binding_puts_a_request_arriving_during_a_long_step_in_the_next_one(llm, monkeypatch):
    """Serving (not batch mode), with a step predicted to take LATE_BIND_MIN_S or more in flight,
    step() sleeps until shortly before its predicted end and then drains what arrived meanwhile:
    the arrival is in the step launched by this call, not the one after it (one iteration less
    to its first token). The sleep stands in for the wait, the request is added during it."""
    import medha_jax.engine as engine_module
    from medha_jax.engine import LATE_BIND_FRACTION, LATE_BIND_LEAD_S, LATE_BIND_MIN_S, late_bind_delay

    assert late_bind_delay(10.0, LATE_BIND_MIN_S / 2, 10.0) == 0.0  # a short step: overlap as before
    assert late_bind_delay(10.0, None, 10.0) == 0.0
    assert late_bind_delay(10.0, 0.2, 10.05) == pytest.approx(LATE_BIND_FRACTION * 0.2 - LATE_BIND_LEAD_S - 0.05)
    assert late_bind_delay(10.0, 0.2, 10.5) == 0.0  # already past it: no wait
    engine = llm.engine
    assert not engine._late  # LLM(...) is batch mode: nobody arrives between steps
    monkeypatch.setattr(engine, "_late", True)
    engine.add_request([5, 6, 7, 8] * 10, _greedy(6), request_id="first")
    engine.step()  # launches the first step
    launched = engine._launched[0]
    launched.predicted_time = 0.5  # as a long prefill chunk would be predicted
    slept = []

    def arrive_while_sleeping(seconds):
        slept.append(seconds)
        engine.add_request([9, 10, 11], _greedy(4), request_id="late")

    monkeypatch.setattr(engine_module.time, "sleep", arrive_while_sleeping)
    engine.step()
    assert len(slept) == 1 and 0.0 < slept[0] <= LATE_BIND_FRACTION * 0.5
    assert "late" in {s.request_id for s in engine._launched[0].seqs}
    monkeypatch.undo()
    while engine.has_unfinished():
        engine.step()


def test_the_device_timeline_times_every_tick_and_each_steps_host_phases(llm):
    """With the timeline on, every tick gets its launch and finish, and every engine step the host
    seconds of each phase: none negative, the first (nothing in flight before it) without an
    'outside', and all of them together within the wall time of the run."""
    engine = llm.engine
    with recording(engine.executor) as timeline:
        it0, t0 = engine.num_iterations, time.perf_counter()
        llm.generate(["abc", "a longer prompt of some words"], _greedy(6))
        wall = time.perf_counter() - t0
        idle, idle_s, ticks = timeline.idle_fraction()
    steps = timeline.host
    assert ticks == len(timeline.ticks) == engine.num_iterations - it0 > 0
    assert len(steps) > ticks  # one per launch, and the last step reads the last tick's tokens
    assert all(len(p) == len(HOST_PHASES) for p in steps)
    assert math.isnan(steps[0][0]) and all(not math.isnan(x) and x >= 0 for p in steps[1:] for x in p)
    assert all(x >= 0 for x in steps[0][1:])
    assert sum(sum(x for x in p if not math.isnan(x)) for p in steps) <= wall
    assert 0.0 <= idle < 1.0 and 0.0 <= idle_s <= wall
    summary = timeline.host_summary()
    assert set(summary) == {*HOST_PHASES, "host"} and all(v >= 0 for v in summary.values())
    assert timeline.describe_host().startswith("host ")


def test_prefix_caching_gives_the_tokens_of_prefilling_everything(llm):
    """Shared prefixes of 1 to 6 pages, partial-page tails, concurrent sharers, and after eviction
    from the device (restored from the host tier): the same greedy tokens as an engine that
    prefills every prompt in full."""
    plain = LLM(model="demo", enable_prefix_caching=False, **KW)
    doc = bytes(range(60, 160)).decode("latin-1")
    prompts = [doc, doc + "xy", doc[:40] + "zz", doc[:16], doc + doc[:50]]
    sp = _greedy(12)
    want = [o.token_ids for o in plain.generate(prompts, sp)]
    plain.close()
    page = KW["page_size"]
    doc_ids = llm.engine.validate_prompt(doc)

    def expected_hit(p):
        ids = llm.engine.validate_prompt(p)
        common = next((i for i, (a, b) in enumerate(zip(ids, doc_ids)) if a != b), min(len(ids), len(doc_ids)))
        return min(common // page, (len(ids) - 1) // page) * page

    assert llm.generate([doc], sp)[0].token_ids == want[0]  # fills the cache
    together = llm.generate(prompts, sp)  # concurrent requests sharing it
    assert [o.token_ids for o in together] == want
    assert [o.metrics.num_cached_tokens for o in together] == [expected_hit(p) for p in prompts]
    assert max(o.metrics.num_cached_tokens for o in together) >= 6 * page
    # Fill the 64-page cache with other prompts until the document's pages are evicted.
    fillers = [bytes((7 * k + 3 * i) % 190 + 33 for i in range(90)).decode("latin-1") for k in range(12)]
    llm.generate(fillers, _greedy(4))
    before = llm.engine.stats()
    assert before.swapped_out_pages >= 6  # evicted from the device, kept in the host tier (swap space)
    again = llm.generate(prompts, sp)
    assert llm.engine.stats().swapped_in_pages - before.swapped_in_pages >= 6  # the document came back from host
    assert again[0].metrics.num_cached_tokens >= 6 * page
    assert [o.token_ids for o in again] == want


def test_the_demo_written_to_a_directory_is_the_same_model(llm, tmp_path):
    """`python -m medha_jax.demo_export DIR`: LLM(model=DIR) gives the demo's greedy tokens and
    text; the tokenizer files load with plain `tokenizers` and encode as the demo does."""
    import os
    import subprocess
    import sys

    import tokenizers

    out = tmp_path / "demo"
    subprocess.run([sys.executable, "-m", "medha_jax.demo_export", str(out)], check=True,
                   env={**os.environ, "JAX_PLATFORMS": "cpu"})
    prompts = ["The demo model, on disk", "\u00e9t\u00e9 \u2603"]
    expect = llm.generate(prompts, _greedy(12))
    from_dir = LLM(model=str(out), **KW)
    try:
        got = from_dir.generate(prompts, _greedy(12))
        assert [o.token_ids for o in got] == [o.token_ids for o in expect]
        assert [o.text for o in got] == [o.text for o in expect]
        assert from_dir.tokenizer.chat_template == llm.tokenizer.chat_template
    finally:
        from_dir.engine.close()
    plain = tokenizers.Tokenizer.from_file(str(out / "tokenizer.json"))
    assert plain.encode(prompts[1]).ids == llm.tokenizer.encode(prompts[1])
