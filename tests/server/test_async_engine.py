"""AsyncEngine (the asyncio <-> engine-thread bridge), used directly on the session server's loop."""

from __future__ import annotations

import asyncio
import contextlib
import time

import pytest

from medha_jax.sampling_params import SamplingParams


def test_generate_streams_until_finished_and_equals_python_api(served, reference):
    async def run():
        outs = []
        async for out in served.async_engine.generate("Hello world", SamplingParams(max_tokens=8, temperature=0.0)):
            outs.append(out)
        return outs

    outs = served.run(run())
    ref = reference("Hello world", 8)
    assert outs[-1].finished and not any(o.finished for o in outs[:-1])
    assert [t for o in outs for t in o.new_token_ids] == ref.token_ids == outs[-1].token_ids
    assert "".join(o.new_text for o in outs) == ref.text


def test_a_request_that_does_not_stream_yields_only_its_final_output(served, reference):
    async def run():
        return [out async for out in served.async_engine.generate(
            "Hello world", SamplingParams(max_tokens=8, temperature=0.0), stream=False)]

    (out,) = served.run(run())
    ref = reference("Hello world", 8)
    assert out.finished and out.token_ids == out.new_token_ids == ref.token_ids
    assert out.text == out.new_text == ref.text


def test_leaving_generate_early_aborts_and_frees_pages(served):
    aborts = served.count_finished("abort")

    async def run():
        gen = served.async_engine.generate("leave", SamplingParams(max_tokens=200, temperature=0.0, ignore_eos=True))
        async with contextlib.aclosing(gen) as it:
            async for out in it:
                if len(out.token_ids) >= 2:
                    break

    served.run(run())
    served.wait_idle(timeout=10)
    assert served.count_finished("abort") == aborts + 1


def test_duplicate_request_id_is_refused_while_the_first_runs(served):
    async def run():
        ae = served.async_engine
        first = await ae.add_request("one", SamplingParams(max_tokens=50, ignore_eos=True), request_id="dup")
        try:
            with pytest.raises(ValueError, match="already in use"):
                await ae.add_request("two", SamplingParams(max_tokens=2), request_id="dup")
        finally:
            first.abort()

    served.run(run())
    served.wait_idle()


def test_engine_thread_sleeps_when_idle(served):
    served.wait_idle()
    before = served.engine.num_iterations
    time.sleep(0.3)
    assert served.engine.num_iterations == before
    assert served.async_engine._thread.is_alive()


def test_cancelled_consumer_aborts(served):
    aborts = served.count_finished("abort")

    async def consume(ae):
        stream = await ae.add_request("cancel", SamplingParams(max_tokens=200, ignore_eos=True))
        async with stream:
            async for _ in stream:
                pass

    async def run():
        task = asyncio.ensure_future(consume(served.async_engine))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    served.run(run())
    served.wait_idle(timeout=10)
    assert served.count_finished("abort") == aborts + 1
