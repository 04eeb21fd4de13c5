"""Engine: the request lifecycle in one loop, schedule -> execute -> update.

  add_request (any thread) --validate--> pending queue
  step():  drain pending adds/aborts into the Scheduler
           Scheduler.schedule(now)          -> ScheduledBatch (pure Python; may be empty)
           KVCacheManager.take_swap_ops()   -> Executor.swap: host-tier page copies the schedule
                                               issued (evicted pages saved, matched ones restored)
           StepInput.from_batch(batch)      -> the self-contained copy the executor reads
           Executor.tick(step input)        -> it enters pipeline stage 0; the one fed spp-1
                                               ticks ago leaves the last stage with one sampled
                                               token per sequence that samples
           Scheduler.on_batch_done(batch)   -> KV progress, iteration record (predicted vs measured)
           Scheduler.update_from_output(the batch that left, tokens) -> tokens appended, stops
                                               (EOS, stop ids, stop strings via each request's
                                               OutputStream, max_tokens, context), finishes
           -> RequestOutput snapshots with the per-token delta (OutputStream.output)

Stream pipeline (spp > 1): the scheduler hears a batch is done as soon as it has passed stage 0,
so chunk i+1 of a prefill can enter the pipeline on the next tick (it needs chunk i's KV, which
each stage writes before chunk i+1 reaches it, not chunk i's output). A request whose last
chunk or decode is still in the pipeline has no tokens left to compute (num_computed_tokens ==
num_tokens) until its sampled token comes out, so the scheduler leaves it alone and fills the
pipeline with other requests. With spp == 1 the batch fed is the batch that leaves.

Asynchronous scheduling (spp == 1, `EngineConfig.async_scheduling`, the default): step() forms
and launches step n+1 before it waits for step n, so the host's scheduling, packing and
detokenizing overlap the device instead of idling it:
  step():  drain -> schedule(n+1) -> Executor.launch(n+1)   (returns at once; pending token ids
                                     of step n are read from its output on the device)
           -> step n's tokens to the host -> record(n) -> update_from_output(n)
           -> on_batch_done(n+1, tokens_pending=True)  (its samples pending until the next step())

Late binding (`EngineConfig.late_binding`, serving only): when step n is predicted to take at least
LATE_BIND_MIN_S, step() sleeps until LATE_BIND_FRACTION of its prediction (less LATE_BIND_LEAD_S for
scheduling and launching) has passed before it drains new requests and forms step n+1, so that a
request arriving while step n runs is in step n+1, not n+2. Iterations that short never wait: there
the host's time is what overlapping saves.

Python's cyclic collector does not run inside scheduling and packing: step() turns automatic
collection off around them and runs the generations due right before it blocks on the device
(`gc_pauses`), after `gc.freeze()` at start-up took the long-lived heap out of its walks.

Only the thread that calls `step()` touches scheduler and device state; other threads talk to
the engine through `add_request`/`abort`, which only validate and enqueue. A failing iteration
fails the requests in it (with SPP: in every microbatch in the pipeline) with an error and
leaves the others running.
"""

from __future__ import annotations

import dataclasses
import gc
import itertools
import logging
import random
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from medha_jax.batch import ScheduledBatch
from medha_jax.config import EngineConfig
from medha_jax.engine_stats import EngineStats
from medha_jax.gc_pauses import HostWork, collect_due
from medha_jax.output_stream import OutputStream
from medha_jax.outputs import RequestOutput
from medha_jax.request import Request, RequestStatus
from medha_jax.sampling_params import SamplingParams
from medha_jax.step_input import StepInput

if TYPE_CHECKING:
    from medha_jax.executor.executor import Launched

log = logging.getLogger(__name__)

LATE_BIND_MIN_S = 0.02
"""Late binding: the shortest predicted step after which the next one is formed late."""
LATE_BIND_FRACTION = 0.85
"""... the fraction of the step's prediction that passes first (a step rarely runs faster than
this: the runtime predictor's corrected ratios for prefill iterations, P10 ~0.9 on the CPU)."""
LATE_BIND_LEAD_S = 0.004
"""... less this, for draining, scheduling, packing and launching the next step."""


def late_bind_delay(start: float, predicted: float | None, now: float) -> float:
    """Seconds to wait before forming the next step, the one in flight having started at `start`
    and predicted to take `predicted` seconds (0: form it now)."""
    if not predicted or predicted < LATE_BIND_MIN_S:
        return 0.0
    return max(0.0, start + LATE_BIND_FRACTION * predicted - LATE_BIND_LEAD_S - now)


def _check_unicode(text: str) -> None:
    """ValueError naming the first lone UTF-16 surrogate (Python strings may hold one, e.g. from
    JSON's "\\ud800"; it is not Unicode text, and tokenizers reject it with a TypeError)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ValueError(f"prompt character {e.start} is a lone surrogate U+{ord(text[e.start]):04X}, "
                         "not Unicode text") from None


class Engine:
    def __init__(self, config: EngineConfig, scheduler_config=None, *, clock: Callable[[], float] = time.monotonic):
        from medha_jax.engine_builder import build_engine_parts

        self.config = config
        self.clock = clock
        parts = build_engine_parts(config, scheduler_config)
        self.model_config = parts.model_config
        self.tokenizer = parts.tokenizer
        self.mesh = parts.mesh
        self.scheduler = parts.scheduler
        self.kv_manager = parts.kv_manager
        self.executor = parts.executor
        self.scheduler_config = parts.scheduler_config
        self.max_model_len = parts.max_model_len
        self.eos_token_ids = parts.eos_token_ids
        self._rng = random.Random(config.seed)
        self._ids = itertools.count()
        self._lock = threading.Lock()
        self._pending_adds: list[Request] = []
        self._pending_aborts: list[str] = []
        self._live: dict[str, Request] = {}  # every request added and not yet finished (incl. pending)
        self._streams: dict[str, OutputStream] = {}  # per live request: its text and outputs
        self._in_pipeline: deque[tuple[ScheduledBatch, StepInput]] = deque()  # fed, tokens not out yet
        self._async = config.async_scheduling and self.executor.depth == 1
        self._late = self._async and config.late_binding and not self.scheduler_config.batch_mode
        self._launched: tuple[ScheduledBatch, StepInput, Launched, float] | None = None  # async: on the device, not read
        self._returned: float | None = None  # async: when step() last returned (the host phases' "outside")
        self.num_iterations = 0
        self.last_iteration_time: float | None = None
        gc.freeze()  # long-lived params/tables out of the collector's walks: no multi-ms pauses mid-iteration

    # ---- requests in ---------------------------------------------------------------------
    def validate_prompt(self, prompt: str | Sequence[int]) -> list[int]:
        """Token ids for a prompt given as text or ids; ValueError naming the problem otherwise."""
        if isinstance(prompt, str):
            if self.tokenizer is None:
                raise ValueError(f"model {self.config.model!r} has no tokenizer (no tokenizer.json): "
                                 "send the prompt as a list of token ids")
            _check_unicode(prompt)
            ids = self.tokenizer.encode(prompt)
        elif isinstance(prompt, Sequence) and not isinstance(prompt, (bytes, bytearray)):
            ids = list(prompt)
            vocab = self.model_config.vocab_size
            for i, t in enumerate(ids):
                if not isinstance(t, int) or isinstance(t, bool):
                    raise ValueError(f"prompt token {i} is {t!r}, not an integer token id")
                if not 0 <= t < vocab:
                    raise ValueError(f"prompt token {i} is {t}, outside the vocabulary [0, {vocab})")
        else:
            raise ValueError(f"prompt must be a string or a list of token ids, got {type(prompt).__name__}")
        if not ids:
            raise ValueError("prompt is empty")
        if len(ids) >= self.max_model_len:
            raise ValueError(
                f"prompt has {len(ids)} tokens; the model's context (max_model_len) is {self.max_model_len}, "
                "which must leave room for at least one generated token"
            )
        return ids

    def add_request(
        self,
        prompt: str | Sequence[int],
        sampling_params: SamplingParams | None = None,
        *,
        request_id: str | None = None,
        arrival_time: float | None = None,
        ttft_deadline: float | None = None,
        tpot_target: float | None = None,
        priority_class: int = 0,
        stream: bool = True,
    ) -> Request:
        """Validate and queue a request; it joins the scheduler at the next `step()`.

        stream=False: `step()` returns no snapshot of it until it ends, then one with every token as
        new (`LLM.generate` reads only that one; a batch of 256 saves building 256 `RequestOutput`s
        a step, ~1.5 ms of host time on the 2-core VM)."""
        sp = sampling_params if sampling_params is not None else SamplingParams()
        if not isinstance(sp, SamplingParams):
            raise ValueError(f"sampling_params must be a SamplingParams, got {type(sp).__name__}")
        ids = self.validate_prompt(prompt)
        if sp.stop and self.tokenizer is None:
            raise ValueError(f"stop strings need a tokenizer and model {self.config.model!r} has none; "
                             "use stop_token_ids")
        if sp.prompt_logprobs is not None and self.scheduler.config.policy == "fcfs_nonchunked":
            raise ValueError("prompt_logprobs needs a chunked scheduler (a scored prompt has a logits row per "
                             "token, at most max_num_seqs per step); fcfs_nonchunked runs whole prompts")
        if ttft_deadline is not None and not ttft_deadline > 0:
            raise ValueError(f"ttft_deadline must be > 0 seconds, got {ttft_deadline!r}")
        if tpot_target is not None and not tpot_target > 0:
            raise ValueError(f"tpot_target must be > 0 seconds, got {tpot_target!r}")
        needed = min(len(ids) + sp.max_tokens, self.max_model_len)
        capacity = self.kv_manager.max_tokens_per_request
        if needed > capacity:
            raise ValueError(
                f"request needs KV for {needed} tokens (prompt {len(ids)} + max_tokens {sp.max_tokens}), "
                f"but the whole KV cache holds {capacity}; raise num_pages or lower max_tokens"
            )
        with self._lock:
            rid = request_id if request_id is not None else f"req-{next(self._ids)}"
            if rid in self._live:
                raise ValueError(f"request_id {rid!r} is already in use")
            req = Request(
                request_id=rid, prompt_token_ids=ids, sampling_params=sp,
                arrival_time=self.clock() if arrival_time is None else arrival_time,
                ttft_deadline=ttft_deadline, tpot_target=tpot_target, priority_class=priority_class,
                seed=sp.seed if sp.seed is not None else self._rng.getrandbits(32),
            )
            self._streams[rid] = OutputStream(self.tokenizer, req, streams=stream)
            self._live[rid] = req
            self._pending_adds.append(req)
        return req

    def abort(self, request_id: str) -> None:
        """Ask for a request to end; its KV pages are freed at the start of the next step."""
        with self._lock:
            if request_id in self._live:
                self._pending_aborts.append(request_id)

    def stats(self) -> EngineStats:
        """Queue and KV-cache numbers for front ends (health, metrics), as one snapshot."""
        kv, sched = self.kv_manager, self.scheduler
        return EngineStats(num_waiting=sched.num_waiting, num_running=sched.num_running,
                           free_kv_pages=kv.num_free_pages, total_kv_pages=kv.num_total_pages,
                           page_size=kv.page_size, max_tokens_per_request=kv.max_tokens_per_request,
                           last_iteration_time=self.last_iteration_time,
                           buckets_compiled=len(self.executor._compiled),
                           buckets_total=self.executor.num_buckets,
                           padded_ticks=self.executor.padded_ticks,
                           compile_waits=self.executor.compile_waits,
                           prefix_queried_tokens=kv.prefix.queried_tokens if kv.prefix is not None else 0,
                           prefix_hit_tokens=kv.prefix.hit_tokens if kv.prefix is not None else 0,
                           **({} if kv.host is None else dict(
                               host_kv_pages=kv.host.num_slots, host_kv_pages_used=len(kv.host),
                               swapped_out_pages=kv.host.saved_pages, swapped_in_pages=kv.host.restored_pages)))

    # ---- the loop ------------------------------------------------------------------------
    def has_unfinished(self) -> bool:
        with self._lock:
            return bool(self._live)

    def step(self) -> list[RequestOutput]:
        if self._late and self._launched is not None:  # late binding: new arrivals join the next step
            delay = late_bind_delay(self._launched[3], self._launched[0].predicted_time, time.perf_counter())
            if delay > 0.0:
                time.sleep(delay)  # counted as time outside step() by the device timeline
        t_in = time.perf_counter()
        outs = self._drain_pending()
        if self._async:
            try:
                return outs + self._step_overlapped(t_in)
            finally:
                self._returned = time.perf_counter()
        with HostWork():
            batch = self.scheduler.schedule(self.clock())
            ex = self.executor
            swaps = self.kv_manager.take_swap_ops()
            if batch.is_empty and ex.idle and not swaps:
                return outs
            fed = None if batch.is_empty else StepInput.from_batch(batch)
        collect_due()  # before the device step rather than inside scheduling
        t0 = time.perf_counter()
        try:
            ex.swap(swaps)  # host-tier page copies this schedule issued, before the step reads the pages
            if batch.is_empty and ex.idle:
                return outs
            done, result = ex.tick(fed)
        except Exception as e:  # noqa: BLE001 - one bad iteration must not take the server down
            return outs + self._fail([batch], e)
        measured = time.perf_counter() - t0
        self.last_iteration_time = measured
        self.num_iterations += 1
        now = self.clock()
        if fed is not None:  # it has passed stage 0: its next chunk may follow it into the pipeline
            self.scheduler.on_batch_done(batch, now, measured_time=measured)
            self._in_pipeline.append((batch, fed))
        if done is None:
            return outs
        left, left_input = self._in_pipeline.popleft()
        if left_input is not done:
            raise RuntimeError("the executor returned a step other than the oldest one in its pipeline")
        return outs + self._update(left, left_input, result, now)

    def _step_overlapped(self, t_in: float) -> list[RequestOutput]:
        """Asynchronous scheduling (spp == 1): launch step n+1, then wait for step n's tokens.

        Step n was marked done when it was launched (its requests' sampled tokens pending), so
        step n+1 can already decode them: the device feeds each pending id from step n's output.
        While step n+1 is queued behind step n on the device, the host appends step n's tokens,
        detokenizes and finishes who stops; a request stopped by its token had a slot in step
        n+1 whose result is dropped. Step n's measured time runs from when it could start (its
        launch, or step n-1's end as the host saw it) to when its tokens were on the host.

        With the executor's device timeline on (`device_timeline.recording`), each call's host
        seconds are recorded by phase (`HOST_PHASES`): what a device that waits for the host
        waits for."""
        sched = self.scheduler
        prev, self._launched = self._launched, None
        t_drained = time.perf_counter()
        with HostWork():  # no collector pass inside scheduling and packing
            batch = sched.schedule(self.clock())
            t_scheduled = time.perf_counter()
            launched, launch_error, t_launch = None, None, 0.0
            swaps = self.kv_manager.take_swap_ops()
            if not batch.is_empty or swaps:
                try:
                    self.executor.swap(swaps)  # host-tier page copies, before the step that reads the pages
                    if not batch.is_empty:
                        sampled_at = ({} if prev is None else  # request -> its sampling row in step n
                                      {s.request_id: r for s, r in zip(prev[1].seqs, prev[1].last_rows()) if s.samples})
                        fed = StepInput.from_batch(batch, sampled_at)
                        t_launch = time.perf_counter()
                        launched = self.executor.launch(fed)
                except Exception as e:  # noqa: BLE001 - one bad iteration must not take the server down
                    launch_error = e
            elif prev is None:
                return []
        t_launched = t_done = time.perf_counter()
        outs, start = [], t_launch
        if prev is not None:
            p_batch, p_fed, p_launched, p_start = prev
            collect_due()  # while step n+1 is queued behind step n: time the host would wait anyway
            try:
                result = p_launched.result()
            except Exception as e:  # noqa: BLE001 - its failure surfaced when its tokens were read
                return self._fail([p_batch] if batch.is_empty else [p_batch, batch], e)
            t_done = time.perf_counter()
            self.last_iteration_time = t_done - p_start
            self.num_iterations += 1
            now = self.clock()
            sched.record(p_batch, now, t_done - p_start)
            outs = self._update(p_batch, p_fed, result, now)
            start = max(t_launch, t_done)  # the device starts the new step once the previous one is done
        if launch_error is not None:
            return outs + self._fail([batch], launch_error)
        if launched is not None:
            sched.on_batch_done(batch, self.clock(), tokens_pending=True, record=False)
            self._launched = (batch, fed, launched, start)
        t_out = time.perf_counter()
        timeline = self.executor.timeline
        if timeline is not None:
            t_start = t_launch or t_launched  # nothing launched: no launch phase
            # outside counts only while a step was in flight (else the engine was idle, not the host slow)
            busy = prev is not None and self._returned is not None
            timeline.host_step((t_in - self._returned if busy else float("nan"), t_drained - t_in,
                                t_scheduled - t_drained, t_start - t_scheduled, t_launched - t_start,
                                t_done - t_launched, t_out - t_done))
        return outs

    def _update(self, batch: ScheduledBatch, fed: StepInput, result, now: float) -> list[RequestOutput]:
        """The batch's tokens came out: the scheduler appends them (and any prompt scores) and
        finishes who stops. `result` is per logits row; each sequence samples at its last row."""
        got: list[Request] = []

        def on_token(req: Request, tok: int, special: bool) -> str | None:
            got.append(req)
            return self._streams[req.request_id].on_token(tok, special)

        last = fed.last_rows()
        scores = {i: (result.logprobs[r - s.num_rows + 1: r + 1], result.top_ids[r - s.num_rows + 1: r + 1],
                      result.top_logprobs[r - s.num_rows + 1: r + 1])
                  for i, (s, r) in enumerate(zip(fed.seqs, last)) if s.targets}
        if len(last) != fed.num_rows:  # some rows score a prompt: one row per sequence for the tokens
            result = dataclasses.replace(result, token_ids=result.token_ids[last], logprobs=result.logprobs[last],
                                         top_ids=result.top_ids[last], top_logprobs=result.top_logprobs[last])
        self.scheduler.update_from_output(batch, result.token_ids, now, logprobs=result.logprobs,
                                          top_logprobs=(result.top_ids, result.top_logprobs),
                                          prompt_scores=scores or None, on_token=on_token)
        outs = []
        for req in got:
            stream = self._streams[req.request_id]
            if stream.streams:
                outs.append(stream.output([req.output_token_ids[-1]]))
            elif req.is_finished:  # its only snapshot: every token is new
                outs.append(stream.output(list(req.output_token_ids)))
            if req.is_finished:
                self._forget(req)
        return outs

    def close(self) -> None:
        """Release the device side: stop compiling in the background; on a multi-host leader,
        tell the followers to exit; close the iteration trace."""
        self.scheduler.close()
        self.executor.close()
        if self.executor.channel is not None:
            self.executor.channel.send("shutdown")
            self.executor.channel = None

    def _drain_pending(self) -> list[RequestOutput]:
        with self._lock:
            adds, self._pending_adds = self._pending_adds, []
            aborts, self._pending_aborts = self._pending_aborts, []
        for req in adds:
            self.scheduler.add_request(req)
        outs = []
        for rid in aborts:
            req = self._live.get(rid)
            if req is None or req.is_finished:
                continue
            outs.append(self._end(req, RequestStatus.FINISHED_ABORTED, self.clock()))
        return outs

    def _end(self, req: Request, status: RequestStatus, now: float) -> RequestOutput:
        """Abort or error: the scheduler finishes the request; its final output adds nothing."""
        if not req.is_finished:
            self.scheduler.finish(req, status, now)  # frees its pages wherever it is (waiting or running)
        out = self._streams[req.request_id].output([], flush=False)
        self._forget(req)
        return out

    def _forget(self, req: Request) -> None:
        with self._lock:
            self._live.pop(req.request_id, None)
        self._streams.pop(req.request_id, None)

    def _fail(self, batches: list[ScheduledBatch], err: Exception) -> list[RequestOutput]:
        """A step raised: fail the requests of these batches and of every microbatch still in the
        pipeline, and start the pipeline (and, if it was consumed, the KV cache) afresh."""
        ex = self.executor
        batches = [*batches, *(b for b, _ in self._in_pipeline)]
        self._in_pipeline.clear()
        log.error("iteration failed; failing the requests of %d batch(es)", len(batches), exc_info=err)
        ex.reset_pipeline()
        self.kv_manager.clear_prefix_cache()  # pages the failed step should have written are not trusted
        ex.forget_swaps()  # the host tier went with it
        if ex.kv_cache_lost():
            # The donated cache died with the failed step: every cached request recomputes.
            ex.reset_kv_cache()
            self.scheduler.preempt_all()
        now = self.clock()
        outs, seen = [], set()
        for b in batches:
            for seq in b.seqs:
                req = seq.request
                if req.request_id in seen or req.is_finished:
                    continue
                seen.add(req.request_id)
                req.error = f"iteration failed: {type(err).__name__}: {err}"
                outs.append(self._end(req, RequestStatus.FINISHED_ERROR, now))
        return outs
