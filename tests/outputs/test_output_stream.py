"""Streaming outputs stay O(n): per-token deltas, cumulative fields as views (no JAX, no device).

A real Scheduler produces the tokens (schedule -> on_batch_done -> update_from_output with the
request's OutputStream as the detokenizer hook); a client keeps every RequestOutput it is given,
which is what makes per-token copies show up as memory.
"""

from __future__ import annotations

import tracemalloc

from medha_jax.output_stream import OutputStream
from medha_jax.request import Request
from medha_jax.sampling_params import SamplingParams
from tests.scheduler.factories import make_scheduler


class _LetterDetok:
    def add(self, token_id: int) -> str:
        return chr(ord("a") + token_id % 26)

    def flush(self) -> str:
        return ""


class _LetterTokenizer:
    """Token t decodes to one letter; enough to drive IncrementalText."""

    def incremental(self, prompt_ids=(), skip_special_tokens=True):
        return _LetterDetok()


def _stream(n: int, *, stop: list[str] = ()) -> tuple[Request, list]:
    sched = make_scheduler("fcfs", num_pages=(n + 64) // 16 + 2)
    req = Request("r0", list(range(16)), SamplingParams(max_tokens=n, stop=list(stop)), arrival_time=0.0)
    stream = OutputStream(_LetterTokenizer(), req)
    sched.add_request(req)
    outs, now = [], 0.0
    while not req.is_finished:
        batch = sched.schedule(now)
        now += 1.0
        sched.on_batch_done(batch, now)
        got = []
        sched.update_from_output(batch, [len(req.output_token_ids) % 26] * len(batch.seqs), now,
                                 logprobs=[-0.5] * len(batch.seqs),
                                 on_token=lambda r, tok, special: got.append(tok) or stream.on_token(tok, special))
        outs.extend(stream.output([t]) for t in got)
    return req, outs


def _retained_bytes(n: int) -> int:
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        _req, outs = _stream(n)
        return tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()


def test_streaming_4000_tokens_copies_linearly():
    n = 4000
    small, large = _retained_bytes(n // 4), _retained_bytes(n)
    # Copying the output so far into every snapshot would keep ~n^2/2 ids, logprobs and times
    # (3 x 8 bytes x 8e6 = 190 MB for n = 4000); views keep a constant amount per snapshot.
    assert large < 2_000 * n, f"{large} bytes retained for {n} streamed tokens"
    assert large < 6 * small, f"retained memory grew {large / small:.1f}x for 4x the tokens (linear: 4x)"


def test_deltas_add_up_to_the_final_output():
    req, outs = _stream(300)
    final = outs[-1]
    assert final.finished and not any(o.finished for o in outs[:-1]) and final.finish_reason == "length"
    assert [t for o in outs for t in o.new_token_ids] == final.token_ids == req.output_token_ids
    assert [x for o in outs for x in o.new_logprobs] == final.logprobs == [-0.5] * 300
    assert "".join(o.new_text for o in outs) == final.text == "".join(chr(97 + i % 26) for i in range(300))
    mid = outs[149]  # a non-final snapshot stays what it was when it was taken
    assert len(mid.token_ids) == 150 and mid.token_ids == req.output_token_ids[:150]
    assert mid.token_ids[-1] == 149 % 26 and mid.token_ids[10:12] == [10, 11]
    assert mid.text == final.text[:150] and len(mid.metrics.token_times) == 150


def test_a_stop_string_ends_the_stream_and_is_cut():
    req, outs = _stream(200, stop=["xyz"])
    assert req.status.value == "stop" and req.stop_reason == "xyz"
    assert outs[-1].text == "abcdefghijklmnopqrstuvw" and "".join(o.new_text for o in outs) == outs[-1].text
