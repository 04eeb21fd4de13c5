"""One request's outputs: its detokenizer and the `RequestOutput` snapshots the engine returns.

  Scheduler.update_from_output --on_token(token, special)--> IncrementalText (stop strings)
  engine, for every request that got a token / finished --output(new_ids, ...)--> RequestOutput
      not finished: the text delta safe to stream, cumulative fields as O(1) views
      finished:     the rest of the text (flushed), cumulative fields copied once
  (a request added with stream=False gets only the finished one, every token in new_ids)

So streaming n tokens costs O(n) in total (tests/engine/test_output_stream.py counts it).
Pure Python.
"""

from __future__ import annotations

from medha_jax.detokenizer import IncrementalText
from medha_jax.outputs import Prefix, RequestMetrics, RequestOutput
from medha_jax.request import Request


class OutputStream:
    def __init__(self, tokenizer, request: Request, *, streams: bool = True):
        self.request = request
        self.streams = streams
        """False: the engine asks for no snapshot until the request ends (`Engine.add_request`)."""
        sp = request.sampling_params
        self.text = IncrementalText(tokenizer, stop=sp.stop, prompt_ids=request.prompt_token_ids,
                                    skip_special_tokens=sp.skip_special_tokens)
        self._scores: tuple[list, list] | None = None  # (prompt_logprobs, prompt_top_logprobs), built once

    def on_token(self, token: int, special: bool) -> str | None:
        """The scheduler appended `token`: detokenize it; returns the stop string it completed."""
        return self.text.append(token, special=special)

    def _prompt_scores(self) -> tuple[list | None, list | None]:
        """(prompt_logprobs, prompt_top_logprobs) once the prompt is scored (built once, then shared);
        (None, None) when the request did not ask for them or its prompt is not scored yet."""
        req = self.request
        if req.sampling_params.prompt_logprobs is None:
            return (None, None)
        if self._scores is None and (req.has_sampled or req.is_finished):
            got = req.prompt_logprobs
            self._scores = ([None] + [lp for lp, _ in got], [None] + [top for _, top in got])
        return self._scores or (None, None)

    def output(self, new_ids: list[int], *, flush: bool = True) -> RequestOutput:
        """A snapshot after this iteration. A finished request's snapshot is final: with `flush`
        it carries the text held back so far (stop and length), without it none (abort, error).
        Built with positional arguments (RequestOutput's and RequestMetrics' field order): the
        engine makes one per running request per iteration."""
        req = self.request
        n_new = len(new_ids)
        lps, tops = req.output_logprobs, req.output_top_logprobs
        new_lps = lps[len(lps) - n_new:] if lps and n_new else []
        new_tops = tops[len(tops) - n_new:] if tops and n_new else []
        finished = req.status.finished
        if finished:
            new_text = self.text.flush() if flush else ""
            token_ids, logprobs, times = list(req.output_token_ids), list(lps), list(req.token_times)
            top = list(tops)
            text = self.text.text
        else:
            new_text = self.text.take_delta()
            token_ids = Prefix(req.output_token_ids, len(req.output_token_ids))
            logprobs = Prefix(lps, len(lps))
            times = Prefix(req.token_times, len(req.token_times))
            top = Prefix(tops, len(tops))
            text = self.text.so_far()
        prompt_lps, prompt_tops = self._prompt_scores()
        metrics = RequestMetrics(req.arrival_time, req.first_scheduled_time, req.first_token_time, req.finish_time,
                                 times, req.num_preemptions, req.num_cached_tokens)
        return RequestOutput(req.request_id, req.prompt_token_ids, token_ids, text, logprobs, finished,
                             req.status.value if finished else None, req.stop_reason, new_ids, new_text, metrics,
                             req.error, new_lps, top, new_tops, prompt_lps, prompt_tops)
