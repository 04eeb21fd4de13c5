"""One request's outputs: its detokenizer and the `RequestOutput` snapshots the engine returns.

  Scheduler.update_from_output --on_token(token, special)--> IncrementalText (stop strings)
  engine, for every request that got a token / finished --output(new_ids, ...)--> RequestOutput
      not finished: the text delta safe to stream, cumulative fields as O(1) views
      finished:     the rest of the text (flushed), cumulative fields copied once

So streaming n tokens costs O(n) in total (tests/engine/test_output_stream.py counts it).
Pure Python.
"""

from __future__ import annotations

from medha_jax.detokenizer import IncrementalText
from medha_jax.outputs import Prefix, RequestMetrics, RequestOutput
from medha_jax.request import Request


class OutputStream:
    def __init__(self, tokenizer, request: Request):
        self.request = request
        sp = request.sampling_params
        self.text = IncrementalText(tokenizer, stop=sp.stop, prompt_ids=request.prompt_token_ids,
                                    skip_special_tokens=sp.skip_special_tokens)
        self._scores: dict | None = None

    def on_token(self, token: int, special: bool) -> str | None:
        """The scheduler appended `token`: detokenize it; returns the stop string it completed."""
        return self.text.append(token, special=special)

    def _prompt_scores(self) -> dict:
        """prompt_logprobs / prompt_top_logprobs once the prompt is scored (built once, then shared)."""
        req = self.request
        if req.sampling_params.prompt_logprobs is None:
            return {}
        if self._scores is None and (req.has_sampled or req.is_finished):
            got = req.prompt_logprobs
            self._scores = dict(prompt_logprobs=[None] + [lp for lp, _ in got],
                                prompt_top_logprobs=[None] + [top for _, top in got])
        return self._scores or {}

    def output(self, new_ids: list[int], *, flush: bool = True) -> RequestOutput:
        """A snapshot after this iteration. A finished request's snapshot is final: with `flush`
        it carries the text held back so far (stop and length), without it none (abort, error)."""
        req = self.request
        n_new = len(new_ids)
        new_lps = req.output_logprobs[len(req.output_logprobs) - n_new:] if req.output_logprobs and n_new else []
        tops = req.output_top_logprobs
        new_tops = tops[len(tops) - n_new:] if tops and n_new else []
        if req.is_finished:
            new_text = self.text.flush() if flush else ""
            token_ids, logprobs, times = list(req.output_token_ids), list(req.output_logprobs), list(req.token_times)
            top = list(tops)
            text = self.text.text
        else:
            new_text = self.text.take_delta()
            token_ids = Prefix(req.output_token_ids, len(req.output_token_ids))
            logprobs = Prefix(req.output_logprobs, len(req.output_logprobs))
            times = Prefix(req.token_times, len(req.token_times))
            top = Prefix(tops, len(tops))
            text = self.text.so_far()
        return RequestOutput(
            request_id=req.request_id, prompt_token_ids=req.prompt_token_ids, token_ids=token_ids,
            text_so_far=text, logprobs=logprobs, finished=req.is_finished,
            finish_reason=req.status.value if req.is_finished else None, stop_reason=req.stop_reason,
            new_token_ids=new_ids, new_text=new_text, new_logprobs=new_lps, top_logprobs=top,
            new_top_logprobs=new_tops, **self._prompt_scores(),
            metrics=RequestMetrics(
                arrival_time=req.arrival_time, first_scheduled_time=req.first_scheduled_time,
                first_token_time=req.first_token_time, finish_time=req.finish_time,
                token_times=times, num_preemptions=req.num_preemptions, num_cached_tokens=req.num_cached_tokens,
            ),
            error=req.error,
        )
