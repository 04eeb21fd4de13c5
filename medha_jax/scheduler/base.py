"""`Scheduler`: request queues, KV pages, preemption, and the per-iteration decision.

  engine --add_request / abort--> Scheduler (waiting queue, running set, KVCacheManager)
  engine --schedule(now)-------> ScheduledBatch: all ready decodes are chosen first (phase 1),
                                 then prefill chunks by the packer (phase 2); the batch keeps the
                                 chunks (`ScheduledSeq`s) and the decodes (parallel lists) apart,
                                 chunks first in its order; page tables attached
  engine --on_batch_done(batch, now, measured_time)--> num_computed_tokens += scheduled tokens,
                                 IterationRecord(composition, predicted, measured)
  engine --update_from_output(batch, sampled, now)--> each sequence that sampled gets its token
                                 appended (times, logprobs); `stops.stop_status` decides who
                                 ends -> finish(request, status): pages freed, gone
  engine --finish(request, status, now)--> aborts and errors

The running requests are kept in two parts as they change state, both in `running`'s order:
prefilling (admitted, prefill or recompute not complete) and decoding (from the batch whose chunk
completed it until it finishes or is preempted), the latter as a roster with its ids and page
tables. Phase 1 reads the roster instead of every running request's counts (`_schedule_decodes`).

`update_from_output` is the request lifecycle's only "append token, stop" step: the engine, the
simulator, the replay, the tests and the overhead benchmark all call it, so they share the stop
logic. The scheduler is the only writer of a request's status, progress and times; the engine
writes only `error` and the request's construction-time fields.

What goes into phase 2 (which prefills, how many tokens each) is the packer's job
(`token_budget.py` for fcfs, `time_budget.py` for edf/lrs/lars); in which order candidates are
considered is the policy's (`policies.py`). This class owns the shared mechanics: readiness,
page allocation with preemption under memory pressure, state transitions and records.

Preemption (recompute): when a running request needs pages that are not free, the scheduler
frees the lowest-priority partial prefill not already in this batch (a prefill may take pages only
from one of lower priority, or of equal priority admitted after it: among equal keys the newest
gives way, so a full pool of equal-deadline prompts cannot stall), then (for decodes only)
the most recently started decode; a decode with no victim left preempts itself. A preempted
request returns to the waiting queue with num_computed_tokens = 0 (status PREEMPTED until the
batch is done, then WAITING) and keeps its generated tokens, which are recomputed as context.
Waiting requests never preempt: they wait for free pages.

A request is "in flight" from `schedule` until `on_batch_done` for the batch holding it; an
in-flight request is neither scheduled again nor preempted, so an engine may form the next batch
before the previous one finishes. A stream-pipelined engine (spp > 1) reports a batch done once
it has passed the first stage: its prefill chunks count as computed (the next chunk may follow
at once), and a request whose final chunk or decode is still in the pipeline has nothing left to
compute until its token is appended, so it is neither scheduled nor chosen as a victim.

An engine that schedules step n+1 while step n runs (`on_batch_done(..., tokens_pending=True)`)
does not wait for the token either: each request that sampled in step n holds one pending token
(counted in `num_tokens`, id unknown), and step n+1 may decode it at once, the device feeding it
the id it sampled; `update_from_output` for step n turns the pending token into its id. A request
with a pending token is never a victim, and one whose pending token is its last (max_tokens, the
context) is not scheduled again. A request stopped by its token (EOS, a stop string) was already
in step n+1: that step's work for it is dropped.

With kvp > 1 predicted times are the slowest kvp group's (`kvp_cost`). Pure Python, no JAX.
"""

from __future__ import annotations

import math
import operator
from bisect import bisect_left
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from itertools import chain, count

from medha_jax.batch import ScheduledBatch, ScheduledSeq
from medha_jax.kv_cache_manager import KVCacheManager
from medha_jax.kvp_layout import owner
from medha_jax.request import Request, RequestStatus
from medha_jax.scheduler.config import SchedulerConfig
from medha_jax.scheduler.iteration_trace import IterationTrace
from medha_jax.scheduler.kvp_cost import predict_pairs
from medha_jax.scheduler.predictor import IDLE_GAP, has_prefill
from medha_jax.scheduler.records import Composition, IterationLog, IterationRecord
from medha_jax.scheduler.stops import at_length, is_special, stop_status

_id_of = operator.attrgetter("request_id")  # Request -> its id, at C speed
_done_of = operator.attrgetter("num_computed_tokens")


class LiveRequests:
    """Read-only view of the scheduler's unfinished requests: `req in view`, `view[id]`, iteration."""

    __slots__ = ("_by_id",)

    def __init__(self, by_id: dict[str, Request]):
        self._by_id = by_id

    def __contains__(self, item) -> bool:
        if isinstance(item, Request):
            return self._by_id.get(item.request_id) is item
        return item in self._by_id

    def __getitem__(self, request_id: str) -> Request:
        return self._by_id[request_id]

    def get(self, request_id: str) -> Request | None:
        return self._by_id.get(request_id)

    def __iter__(self) -> Iterator[Request]:
        return iter(list(self._by_id.values()))

    def __len__(self) -> int:
        return len(self._by_id)


class Scheduler:
    def __init__(self, config: SchedulerConfig, kv_manager: KVCacheManager, policy, packer,
                 predictor=None, *, max_model_len: int | None = None,
                 eos_token_ids: frozenset[int] = frozenset()):
        self.config = config
        self.kv = kv_manager
        self.policy = policy
        self.packer = packer
        self.predictor = predictor
        self.max_model_len = max_model_len
        self.eos_token_ids = frozenset(eos_token_ids)
        """The model's end-of-sequence ids (none in the simulator): a sampled one stops a request."""
        self._by_id: dict[str, Request] = {}
        self.waiting: dict[Request, None] = {}
        """Requests holding no pages, in arrival (or re-queue) order."""
        self.running: dict[Request, None] = {}
        """Requests holding pages, in the order they (re)started."""
        self._in_flight: set[Request] = set()
        self.partials: list[Request] = []
        """Running partial prefills that are ready, collected by the decode pass of `schedule`."""
        # The running requests in two parts, each in `running`'s order, kept as requests come and go
        # (the decode pass then looks only at what changed, not at every request's counts):
        self._rank: dict[Request, int] = {}  # running request -> its place in `running` (admission count)
        self._admissions = count()
        self._prefilling: dict[Request, None] = {}  # running, prefill (or recompute) not yet complete
        self._decoding: dict[Request, int] = {}  # running, past its prefill -> prompt + max_tokens, at most max_model_len
        self._roster: list[Request] = []  # `_decoding`'s requests in `running`'s order
        self._roster_ranks: list[int] = []  # their ranks, ascending (where an entering one goes)
        self._roster_ids: list[str] = []  # their ids
        self._roster_tables: list[list] = []  # their page tables (the KV manager's lists: stable while held)
        self._unsure: set[Request] = set()
        """Decoding requests that may not be ready for a decode now (their token is not back yet,
        their pending token is their last): the decode pass checks these one by one; every other
        decoding request not in flight is ready (one token left to compute, one sampled)."""
        self._awaiting: list[list[Request]] = []
        """The decode lists of batches done without pending tokens whose tokens are not back yet:
        unsure as a whole (the decode pass adds them to `_unsure` if they are still here), so that
        the usual flow, tokens back before the next batch is formed, marks and clears no request
        one by one."""
        self._matched: list[Request] = []  # waiting requests offered a cached prefix this pass
        self.records = IterationLog(config.max_records)
        self.trace = IterationTrace(config.iteration_trace) if config.iteration_trace else None
        self.num_preemptions = 0
        self._tpot_targets: dict[float, int] = {}  # live per-request TPOT targets -> how many
        self.busy_until = -math.inf
        """When the last scheduled batch is predicted to end (with async scheduling it may still be
        running when the next is formed): the next batch's start, for `tpot_bank` and the deadlines
        of the prompts a batch completes. Counted from when the last recorded batch ended, plus the
        predictions of those scheduled after it (`_on_device`), so that no prediction's error
        carries into later batches' starts."""
        self._on_device: deque[tuple[ScheduledBatch, float]] = deque()
        """Scheduled batches not yet recorded as done, oldest first, with their predicted seconds."""
        self.passed_over: set[Request] = set()
        """Prefills the packer left out of this iteration to run a whole tile in the next one."""
        self.passed_over_last: set[Request] = set()
        self.groups = kv_manager.kvp if kv_manager.per_group_batches else 1
        """Batches that run in one iteration: one per kvp group when the groups run their own, each
        held to max_num_seqs and max_num_batched_tokens on its own (`room`)."""

    # ---- requests in and out ---------------------------------------------------------------
    @property
    def requests(self) -> LiveRequests:
        return LiveRequests(self._by_id)

    def add_request(self, request: Request) -> None:
        if request.request_id in self._by_id:
            raise ValueError(f"request_id {request.request_id!r} is already scheduled")
        if request.is_finished:
            raise ValueError(f"request {request.request_id!r} is already finished ({request.status.value})")
        need = request.prompt_len + request.sampling_params.max_tokens
        if self.max_model_len is not None:
            need = min(need, self.max_model_len)
        if not self.kv.can_ever_fit(need):
            raise ValueError(
                f"request {request.request_id!r} needs KV for {need} tokens (prompt {request.prompt_len} "
                f"+ max_tokens {request.sampling_params.max_tokens}), but one request can hold at most "
                f"{self.kv.max_tokens_per_request} ({self.kv.kvp} kvp group(s) x "
                f"{self.kv.max_tokens_per_kvp_group} tokens); raise the page count or lower max_tokens"
            )
        request.status = RequestStatus.WAITING
        if self.kv.prefix is not None:  # the policies rank and judge it by the work not yet cached
            request.num_cached_tokens = self.kv.peek_prefix(request)
        self._by_id[request.request_id] = request
        if request.tpot_target is not None:
            self._tpot_targets[request.tpot_target] = self._tpot_targets.get(request.tpot_target, 0) + 1
        self.policy.on_add(request)
        self.waiting[request] = None
        self.policy.on_waiting(request)

    def abort(self, request_id: str) -> Request | None:
        """Finish a request as aborted and free its pages now; None if it is not here."""
        req = self._by_id.get(request_id)
        if req is None:
            return None
        self.finish(req, RequestStatus.FINISHED_ABORTED)
        return req

    def finish(self, request: Request, status: RequestStatus, now: float | None = None) -> None:
        """The engine ended the request (stop, length, abort, error): free its pages, forget it."""
        if not status.finished:
            raise ValueError(f"finish() needs a finished status, got {status}")
        if self._by_id.get(request.request_id) is not request:
            raise ValueError(f"request {request.request_id!r} is not in this scheduler")
        del self._by_id[request.request_id]
        if request.tpot_target is not None:
            left = self._tpot_targets.pop(request.tpot_target) - 1
            if left:
                self._tpot_targets[request.tpot_target] = left
        if self.waiting.pop(request, 0) is None:
            self.policy.on_leave_waiting(request)
        self._stop_running(request)
        self._in_flight.discard(request)
        self.kv.free(request)
        self.policy.on_remove(request)
        request.status = status
        if now is not None and request.finish_time is None:
            request.finish_time = now

    def preempt_all(self) -> list[Request]:
        """Preempt every running request (e.g. the device KV cache was lost)."""
        victims = list(self.running)
        self._in_flight.clear()
        self._on_device.clear()
        self._awaiting.clear()
        for r in victims:
            self._preempt(r)
        for r in victims:
            r.status = RequestStatus.WAITING
        return victims

    @property
    def max_batch_tokens(self) -> int | None:
        """Upper bound on `batch.num_tokens` (for the executor's shape buckets); None for
        fcfs_nonchunked, whose batches hold whole prompts."""
        return self.packer.max_batch_tokens(self.config)

    @property
    def has_unfinished(self) -> bool:
        return bool(self._by_id)

    @property
    def num_waiting(self) -> int:
        return len(self.waiting)

    @property
    def num_running(self) -> int:
        return len(self.running)

    @property
    def token_target(self) -> float:
        """Seconds allowed between two output tokens of a decode: the configured t_target, tightened
        by live per-request TPOT targets; infinite in batch mode while no live request has one."""
        if not self._tpot_targets:
            return math.inf if self.config.batch_mode else self.config.t_target
        return min(self.config.t_target, min(self._tpot_targets))

    @property
    def rescue_stretch(self) -> float:
        """How far, in t_targets, a deadline-saving iteration may stretch now (`rescue_stretch`):
        the configured factor, but no decode's token past a hard TPOT limit (tpot_slo, live
        per-request targets), and a request arriving meanwhile still within half the shortest
        derived deadline (deadline_min) of its first token, after the stretched iteration in
        flight and its own `depth` ticks. 1 in batch mode (no budget to stretch)."""
        cfg = self.config
        token = self.token_target
        if token == math.inf:
            return 1.0
        hard = min(self._tpot_targets, default=math.inf)
        if cfg.tpot_slo is not None:
            hard = min(hard, cfg.tpot_slo)
        arrival = 0.5 * cfg.deadline_min / ((1 + cfg.depth) * token / cfg.depth)
        return max(1.0, min(cfg.rescue_stretch, hard / token, arrival))

    @property
    def t_target(self) -> float:
        """This iteration's time budget: `token_target` over the pipeline depth (an iteration is one
        tick; a token passes `depth` ticks of lockstep stages). Equal to token_target without SPP."""
        return self.token_target / self.config.depth

    # ---- one iteration -----------------------------------------------------------------------
    def schedule(self, now: float) -> ScheduledBatch:
        batch = ScheduledBatch(group_rows=[0] * self.groups, group_tokens=[0] * self.groups)
        self.passed_over_last, self.passed_over = self.passed_over, set()
        self._schedule_decodes(batch, now)
        self.packer.pack_prefills(self, batch, now)
        if self._matched:
            self._settle_offers()
        if not batch.is_empty and self.predictor is not None and batch.predicted_time is None:
            if self.kv.kvp == 1:
                batch.predicted_time = self.predictor.predict(Composition.from_batch(batch))
            else:
                comp = Composition.from_batch(batch)
                batch.predicted_time = predict_pairs(self.predictor, self.kv, comp.seqs, comp.groups)
        if batch.predicted_time:
            self.busy_until = max(now, self.busy_until) + batch.predicted_time
            self._on_device.append((batch, batch.predicted_time))
        return batch

    def on_batch_done(self, batch: ScheduledBatch, now: float, measured_time: float | None = None, *,
                      tokens_pending: bool = False, record: bool = True) -> None:
        """Advance every scheduled request by its tokens and (record=True) record the iteration.

        tokens_pending: the batch's sampled tokens stay on the device for now; each sequence that
        samples leaves its request one pending token (`Request.num_pending_tokens`), which the
        next batch may already compute, and `update_from_output` later turns into its id.
        record=False: the engine records the iteration itself once it is timed (`record`)."""
        commit = self.kv.commit if self.kv.prefix is not None else None
        in_flight, running, unsure = self._in_flight, self.running, self._unsure
        for seq in batch.chunks:
            req = seq.request
            in_flight.discard(req)
            if req.is_finished or req.num_computed_tokens != seq.start_pos or req not in running:
                continue  # finished, aborted or preempted while in flight: nothing to advance
            req.num_computed_tokens += seq.num_tokens
            if seq.samples:  # its prefill (or recompute) is complete: it decodes from now on
                if tokens_pending:
                    req.num_pending_tokens += 1
                self._start_decoding(req)
                if not tokens_pending or req.num_tokens >= self._decoding[req]:
                    unsure.add(req)  # its token is not back yet, or its pending token is its last
            if commit is not None:
                commit(req)
        in_flight.difference_update(batch.decodes)
        limits = self._decoding
        for req, start in zip(batch.decodes, batch.decode_starts):  # one token each, which samples
            if req.is_finished or req.num_computed_tokens != start or req not in running:
                continue
            req.num_computed_tokens = start + 1
            if tokens_pending:
                req.num_pending_tokens += 1
                if start + 2 >= limits[req]:  # its pending token (it had start + 2 with it) is its last
                    unsure.add(req)
            if commit is not None:
                commit(req)
        if batch.decodes and not tokens_pending:
            self._awaiting.append(batch.decodes)  # not ready again until their tokens are appended
        batch.tokens_pending = tokens_pending
        for req in batch.preempted:
            if req.status is RequestStatus.PREEMPTED:
                req.status = RequestStatus.WAITING
        if record:
            self.record(batch, now, measured_time)

    def record(self, batch: ScheduledBatch, now: float, measured_time: float | None) -> None:
        """The iteration's record (predicted vs measured); the predictor learns from the pair unless
        the iteration started more than IDLE_GAP after the last one ended."""
        if batch.is_empty:
            return
        self._ended(batch, now)
        comp = Composition.from_batch(batch)
        # after an idle gap since the last recorded iteration ended, the device starts slow, which
        # back-to-back iterations do not pay (IDLE_GAP)
        after_idle = (measured_time is not None and len(self.records) > 0
                      and now - measured_time - self.records[-1].time > IDLE_GAP)
        self.records.append(IterationRecord(comp, batch.predicted_time, measured_time, now))
        if self.predictor is not None and measured_time is not None and batch.predicted_time and not after_idle:
            if self.kv.kvp == 1:
                self.predictor.observe(comp, measured_time)
            else:  # the slowest kvp group's raw prediction
                self.predictor.observe_raw(predict_pairs(self.predictor, self.kv, comp.seqs, comp.groups, raw=True),
                                           measured_time, has_prefill(comp))
        if self.trace is not None:
            self.trace.write(batch, now, measured_time, self.predictor)

    def _ended(self, batch: ScheduledBatch, now: float) -> None:
        """`batch` ended at `now`: the batches scheduled after it run from now on, so `busy_until`
        is now plus their predictions. Adding each batch's prediction to the last one's predicted
        end instead let the errors add up while the device never idled: on the convoy benchmark's
        CPU engine, iterations ran ~4% under their predictions and during the long prompt's 20 s
        prefill the next batch's start was placed up to 0.94 s in the future, so every decode looked
        late (no whole tiles) and a prompt completing in the batch looked due within tens of ms
        (its batch cut to a 32-token chunk of the long prompt). Batches scheduled before `batch`
        and never recorded (a failed step) are dropped with it."""
        q = self._on_device
        if not any(b is batch for b, _ in q):
            return  # recorded twice, or never predicted: nothing to move
        while q.popleft()[0] is not batch:
            pass
        self.busy_until = now + sum(t for _, t in q)

    def close(self) -> None:
        """Close the iteration trace, if one is written."""
        if self.trace is not None:
            self.trace.close()
            self.trace = None

    def update_from_output(self, batch: ScheduledBatch, sampled: Sequence[int] | int, now: float, *,
                           logprobs: Sequence[float] | None = None, top_logprobs=None, prompt_scores=None,
                           on_token: Callable[[Request, int, bool], str | None] | None = None) -> list[Request]:
        """The tokens of `batch` came out of the model: append them and finish who stops.

        sampled: the token of sequence i at index i (only sequences that sample are read), or one
        token for all of them (a simulator has no model). logprobs: the same per sequence (kept
        where the request asked for them); top_logprobs: (ids i32[S, K], logprobs f32[S, K]), the K
        most likely tokens per sequence, of which a request keeps its `top_logprobs` first.
        prompt_scores: {sequence index: (logprobs f32[n], top ids i32[n, K], top logprobs f32[n, K])}
        for the chunks of prompts being scored, row j scoring position start_pos + j + 1 (kept once
        per position, in order: a chunk recomputed after preemption adds nothing).
        on_token(request, token, special) -> stop string | None
        is called after each append: the engine's detokenizer, which finds stop strings. A
        sequence whose request finished, or was preempted, while the batch was in flight gets
        nothing (a preempted one recomputes its context and samples again). Call after
        `on_batch_done` for the same batch. Returns the requests that finished."""
        finished = []
        eos = self.eos_token_ids
        pending = batch.tokens_pending
        chunks = batch.chunks
        if prompt_scores:
            for i, scores in prompt_scores.items():
                self._keep_prompt_scores(chunks[i], *scores)  # a scored prompt's chunk: never a decode
        if not isinstance(sampled, int) and hasattr(sampled, "tolist"):
            sampled = sampled.tolist()  # Python ints in one call, not one numpy scalar per sequence
        # (sequence index, request) of each sequence that samples: chunks first, then the decodes
        samplers = chain(((i, s.request) for i, s in enumerate(chunks) if s.samples),
                         zip(count(len(chunks)), batch.decodes))
        flushed = False  # the batch's decodes were made unsure one by one (a pass ran before their tokens)
        if not pending:  # the batch's decodes are sure again, but for those that get no token
            for i, waiting in enumerate(self._awaiting):
                if waiting is batch.decodes:
                    del self._awaiting[i]
                    break
            else:
                flushed = bool(batch.decodes)
        ready = []  # got their token with nothing else pending: ready for their next decode
        unsure = self._unsure
        n_chunks = len(chunks)
        one = sampled if isinstance(sampled, int) else None  # one token for all (a simulator)
        for i, req in samplers:
            if req.is_finished:
                continue
            if pending:  # the token was counted as pending when the batch was done
                if not req.num_pending_tokens:
                    continue  # not advanced by this batch (preempted while in flight)
                req.num_pending_tokens -= 1
            elif req.num_computed_tokens != req.num_tokens:
                if i >= n_chunks and req in self._decoding:  # a decode this batch did not advance
                    unsure.add(req)
                continue
            elif req.num_pending_tokens:
                unsure.add(req)  # pending tokens from another batch: checked one by one
            elif i < n_chunks or flushed:
                ready.append(req)  # its one token left to compute is the one appended now
            tok = one if one is not None else int(sampled[i])  # int(): a list may hold numpy ints
            req.output_token_ids.append(tok)
            if logprobs is not None and req.sampling_params.logprobs:
                req.output_logprobs.append(float(logprobs[i]))
                n_top = req.sampling_params.top_logprobs
                if n_top and top_logprobs is not None:
                    req.output_top_logprobs.append(list(zip(top_logprobs[0][i, :n_top].tolist(),
                                                            top_logprobs[1][i, :n_top].tolist())))
            req.token_times.append(now)
            if req.first_token_time is None:
                req.first_token_time = now
            hit = on_token(req, tok, is_special(tok, req, eos)) if on_token is not None else None
            stop = stop_status(req, tok, eos_token_ids=eos, max_model_len=self.max_model_len, stop_string=hit)
            if stop is not None:
                req.stop_reason = stop[1]
                self.finish(req, stop[0], now)
                finished.append(req)
        if ready:
            unsure.difference_update(ready)
        return finished

    @staticmethod
    def _keep_prompt_scores(seq: ScheduledSeq, lps, ids, tlps) -> None:
        req = seq.request
        if req.is_finished:
            return
        got, k = req.prompt_logprobs, req.sampling_params.prompt_logprobs
        for j in range(len(lps)):
            q = seq.start_pos + j + 1  # the prompt position row j scores
            if q >= req.prompt_len:
                break
            if q == len(got) + 1:
                got.append((float(lps[j]), list(zip(ids[j, :k].tolist(), tlps[j, :k].tolist())) if k else []))

    # ---- helpers shared by the packers ------------------------------------------------------
    @staticmethod
    def is_decode(req: Request) -> bool:
        return req.num_remaining_tokens == 1 and req.has_sampled

    def prefill_candidates(self, now: float):
        """Ready running partial prefills and waiting requests, best first (lazy)."""
        partials = [r for r in self.partials if r in self.running and r not in self._in_flight]
        return self.policy.candidates(partials, now)

    def offer_prefix(self, req: Request) -> None:
        """With prefix caching, give a waiting request its cached prefix before the packer sizes
        its chunk (its `num_computed_tokens` then starts after the prefix). Packers call it only
        for a request they are about to size, not for every candidate they pass over: a match
        hashes every cached page of the prompt. `schedule` takes the pages back from any that
        stays waiting."""
        if self.kv.prefix is None or req not in self.waiting or self.kv.holds(req):
            return
        req.num_computed_tokens = self.kv.match_prefix(req)
        self._matched.append(req)

    def _settle_offers(self) -> None:
        """After packing: an offered request that was admitted records its hit (on the request and
        in the cache's counters, once per admission); one that stays waiting gives its pages back
        (waiting requests hold none) and keeps the estimate it was ranked by."""
        kv = self.kv
        for req in self._matched:
            if req in self.waiting:
                kv.free(req)
                req.num_computed_tokens = 0
            elif req in self.running:
                req.num_cached_tokens = req.num_computed_tokens
                kv.prefix.record(req.prompt_len + len(req.output_token_ids), req.num_computed_tokens)
        self._matched.clear()

    @staticmethod
    def scores_prompt(req: Request) -> bool:
        """Its next chunk needs a logits row per token: its prompt is being scored
        (`SamplingParams.prompt_logprobs`) and positions before the prompt's last are left."""
        return req.sampling_params.prompt_logprobs is not None and req.num_computed_tokens < req.prompt_len - 1

    def rows_for(self, req: Request, n: int, batch: ScheduledBatch, group: int = 0) -> int:
        """Packers: the tokens of a chunk of `n` that fit its batch's logits rows (max_num_seqs;
        `group`: the batch that runs it, `run_group`): n, or for a prompt being scored (one row
        per token) the rows left, possibly 0."""
        if not self.scores_prompt(req):
            return n
        return max(0, min(n, self.config.max_num_seqs - batch.group_rows[group]))

    def run_group(self, req: Request, start: int, first_group: int | None = None) -> int:
        """The batch that runs `req`'s tokens from position `start`: with per-group batches the
        kvp group holding that position (`kvp_layout`; its chunks never cross a block, `room`),
        else 0. first_group: where it is placed (None: where the KV manager placed it)."""
        if self.groups == 1:
            return 0
        h = self.kv.first_groups.get(req.request_id, 0) if first_group is None else first_group
        return owner(1, start, h, self.kv.max_tokens_per_kvp_group, self.groups)

    def all_full(self, batch: ScheduledBatch) -> bool:
        """No batch of the iteration (one per kvp group with per-group batches) takes another token."""
        cap_t, cap_r = self.config.max_num_batched_tokens, self.config.max_num_seqs
        if self.groups == 1:  # one batch (called once per chunk packed)
            return batch.group_tokens[0] >= cap_t or batch.group_rows[0] >= cap_r
        return all(t >= cap_t or r >= cap_r for t, r in zip(batch.group_tokens, batch.group_rows))

    def room(self, batch: ScheduledBatch, req: Request, group: int) -> tuple[int, int]:
        """(tokens, rows) that `req`'s next chunk may add to batch `group`: what is left of
        max_num_batched_tokens and max_num_seqs there. With per-group batches the tokens also stop
        at the end of the kvp block holding its next position, so a chunk runs on one group."""
        tokens = self.config.max_num_batched_tokens - batch.group_tokens[group]
        if self.groups > 1:
            M = self.kv.max_tokens_per_kvp_group
            tokens = min(tokens, M - req.num_computed_tokens % M)
        return tokens, self.config.max_num_seqs - batch.group_rows[group]

    def add_seq(self, batch: ScheduledBatch, req: Request, n: int, now: float) -> ScheduledSeq:
        """Put `n` tokens of `req` into the batch (pages must already be reserved)."""
        if req in self.waiting:
            del self.waiting[req]
            self.policy.on_leave_waiting(req)
            self._start_running(req)
        req.status = RequestStatus.RUNNING
        if req.first_scheduled_time is None:
            req.first_scheduled_time = now
        start = req.num_computed_tokens
        rows = n if self.scores_prompt(req) else 1
        seq = ScheduledSeq(req, start, n, self.kv.page_tables(req), start + n == req.num_tokens, rows,
                           self.kv.first_groups.get(req.request_id, 0))
        batch.chunks.append(seq)
        batch.num_rows += rows
        g = self.run_group(req, start)
        batch.group_rows[g] += rows
        batch.group_tokens[g] += n
        self._in_flight.add(req)
        return seq

    def reserve(self, req: Request, n: int, batch: ScheduledBatch, now: float, group: int | None = None) -> bool:
        """Make sure `req` has pages for `n` more tokens, preempting others if it is running;
        `group`: the kvp group to place it on if it holds no pages yet (None: the KV manager's choice).

        Returns False when the pages cannot be had (a decode with no victim left preempts
        itself; a waiting request simply has to wait)."""
        kv = self.kv
        while not kv.try_allocate(req, n, group):
            if req not in self.running:
                return False
            victim = self._pick_victim(req, now)
            if victim is None:
                if self.is_decode(req):
                    self._preempt(req)
                    batch.preempted.append(req)
                return False
            self._preempt(victim)
            batch.preempted.append(victim)
        return True

    def _pick_victim(self, requester: Request, now: float) -> Request | None:
        decode = self.is_decode(requester)
        key = self.policy.key
        floor = None if decode else key(requester, now)
        worst, worst_key = None, None
        after = False  # past the requester in admission order: on equal keys, newer gives way to older
        for r in self.running:
            if r is requester:
                after = True
                continue
            # num_remaining_tokens == 0: its last chunk or decode is still in the pipeline (SPP).
            if r in self._in_flight or self.is_decode(r) or r.num_remaining_tokens == 0 or r.num_pending_tokens:
                continue
            k = key(r, now)
            if (floor is None or k > floor or (k == floor and after)) and (worst is None or k >= worst_key):
                worst, worst_key = r, k  # >=: the newest of equal keys
        if worst is not None or not decode:
            return worst
        for r in reversed(self.running):
            if r is not requester and r not in self._in_flight and self.is_decode(r) and not r.num_pending_tokens:
                return r
        return None

    def _preempt(self, req: Request) -> None:
        self.kv.free(req)
        self._stop_running(req)
        req.num_computed_tokens = 0
        req.status = RequestStatus.PREEMPTED
        req.num_preemptions += 1
        self.num_preemptions += 1
        self.waiting[req] = None
        self.policy.on_waiting(req)

    # ---- the running requests: prefilling, then decoding ------------------------------------
    def _start_running(self, req: Request) -> None:
        """`req` got pages and its first chunk: it joins `running` (last) as a prefill."""
        self.running[req] = None
        self._rank[req] = next(self._admissions)
        self._prefilling[req] = None

    def _start_decoding(self, req: Request) -> None:
        """`req`'s prefill (or recompute) is complete: it joins the roster at its place in `running`."""
        del self._prefilling[req]
        rank = self._rank[req]
        i = bisect_left(self._roster_ranks, rank)
        self._roster.insert(i, req)
        self._roster_ranks.insert(i, rank)
        self._roster_ids.insert(i, req.request_id)
        self._roster_tables.insert(i, self.kv.tables[req.request_id])
        limit = len(req.prompt_token_ids) + req.sampling_params.max_tokens
        self._decoding[req] = limit if self.max_model_len is None else min(limit, self.max_model_len)

    def _stop_decoding(self, req: Request) -> None:
        """Out of the roster (into neither part: the caller says where it goes)."""
        del self._decoding[req]
        i = bisect_left(self._roster_ranks, self._rank[req])
        del self._roster[i], self._roster_ranks[i], self._roster_ids[i], self._roster_tables[i]
        self._unsure.discard(req)

    def _stop_running(self, req: Request) -> None:
        """`req` left `running` (finished, aborted, preempted); nothing if it was not there."""
        if self.running.pop(req, 0) is not None:
            return
        if req in self._decoding:
            self._stop_decoding(req)
        else:
            del self._prefilling[req]
        del self._rank[req]

    def add_decoding(self, req: Request, token: int) -> None:
        """Put `req` in as a running decode whose prompt is computed and whose first sampled token is
        `token`, with no model computing anything: the setup of the benchmarks that time the
        scheduler alone (`scheduler_overhead.py`, `host_step_cost.py`). Its pages are allocated."""
        self.add_request(req)
        del self.waiting[req]
        self.policy.on_leave_waiting(req)
        self._start_running(req)
        self.kv.allocate(req, req.prompt_len)
        req.num_computed_tokens = req.prompt_len
        req.output_token_ids.append(token)
        req.status = RequestStatus.RUNNING
        self._start_decoding(req)

    def _check_unsure(self) -> set[Request]:
        """Looks at each unsure decoding request not in flight as the decode pass once looked at
        every running request; returns those not ready (their token is not back, or their pending
        token is their last). A ready one is sure again; one with more than a token to compute
        (progress written from outside) goes back to prefilling."""
        not_ready = set()
        in_flight = self._in_flight
        for req in [r for r in self._unsure if r not in in_flight]:
            if req.num_remaining_tokens > 1:
                self._stop_decoding(req)
                self._prefilling[req] = None
                self._prefilling = dict.fromkeys(sorted(self._prefilling, key=self._rank.__getitem__))
            elif not self.is_decode(req) or (req.num_pending_tokens and at_length(req, self.max_model_len)):
                not_ready.add(req)
            else:
                self._unsure.discard(req)
        return not_ready

    def _schedule_decodes(self, batch: ScheduledBatch, now: float) -> None:
        """Phase 1: every ready decode, oldest first; collects ready partial prefills on the way.

        The hot path of the scheduler (hundreds of decodes per iteration). It does not look at
        every running request's counts: the running requests are kept in two parts as they come
        and go (`_prefilling`; `_decoding`, whose `_roster` keeps `running`'s order), and a
        decoding request is ready unless `_unsure` holds it (its token is not back, its pending
        token is its last), which only those are checked for. The roster's positions are read in C
        (`map`), its ids and page tables copied; only decodes whose next position starts a page
        can need one (pages are whole) and get it in one call (`KVCacheManager.try_add_pages`);
        the first that needs more hands the rest of the pass to `_decode_loop` (`reserve`, which
        may preempt). The batch keeps the decodes as lists (`ScheduledBatch.decodes`): no object
        per decode."""
        in_flight = self._in_flight
        if self._awaiting:  # batches whose tokens are not back (a pipeline, or tokens appended later)
            self._unsure.update(r for lst in self._awaiting for r in lst if r in self._decoding)
            self._awaiting.clear()
        not_ready = self._check_unsure() if self._unsure else ()
        partials = []
        strays = []
        for req in self._prefilling:  # a few requests: the plain rule, read from the request
            if req in in_flight:
                continue
            if self.is_decode(req):
                strays.append(req)  # one token left after a sampled one: decoding (only if written from outside)
            elif req.num_remaining_tokens > 0:
                partials.append(req)
        for req in strays:
            self._start_decoding(req)
            self._unsure.add(req)
        if strays:
            not_ready = self._check_unsure()
        roster = self._roster
        if in_flight or not_ready:
            pool = [r for r in roster if r not in in_flight and r not in not_ready]
            ids = tables = None  # looked up below
        else:  # every decoding request decodes: the roster's own lists
            pool, ids, tables = roster.copy(), self._roster_ids.copy(), self._roster_tables.copy()
        n = batch.num_seqs
        if self.groups > 1:  # per-group caps and groups: the general loop
            decodes, starts = [], []
            n = self._decode_loop(batch, pool, decodes, starts, n, now)
            ids = tables = None
        else:
            room = max(self.config.max_num_seqs - n, 0)
            decodes = pool
            if len(pool) > room:
                decodes = pool[:room]
                ids = tables = None
            starts = list(map(_done_of, decodes))
            # a decode whose position starts a page may need one (its pages, whole pages, end at or after it)
            ps = self.kv.page_size
            maybe = [i for i, s in enumerate(starts) if not s % ps]
            k = self.kv.try_add_pages([decodes[i] for i in maybe], [starts[i] for i in maybe]) if maybe else 0
            if k < len(maybe):  # none at hand: `reserve` (which may preempt) for this one, the general loop from here
                i = maybe[k]
                decodes, starts = decodes[:i], starts[:i]
                in_flight.update(decodes)  # scheduled decodes are no victims
                n = self._decode_loop(batch, pool[i:], decodes, starts, n + i, now)
                ids = tables = None
            else:
                in_flight.update(decodes)
                n += len(decodes)
            batch.group_rows[0] = batch.group_tokens[0] = n
        if decodes:  # the batch's decode lists (`ScheduledBatch.decodes`), their tables and groups made in C
            if ids is None:
                ids = list(map(_id_of, decodes))
                tables = list(map(self.kv.tables.__getitem__, ids))
            batch.decodes, batch.decode_starts, batch.decode_tables = decodes, starts, tables
            if self.kv.kvp > 1:
                batch.decode_groups = list(map(self.kv.first_groups.__getitem__, ids))
        batch.num_rows = n
        self.partials = partials

    def _decode_loop(self, batch: ScheduledBatch, pool: list[Request], decodes: list[Request], starts: list[int],
                     n: int, now: float) -> int:
        """Phase 1 one ready decode at a time (per-group caps, pages by `reserve`): appends to
        `decodes` and `starts` (those passed in are already in flight) and returns the batch's
        sequences. In order, a decode is left out if its batch is full or it was preempted as an
        earlier one's victim; it preempts itself if no page and no victim are left."""
        in_flight = self._in_flight
        cap = self.config.max_num_seqs  # per batch; with per-group batches, per kvp group
        per_group = self.groups > 1
        k, M = self.groups, self.kv.max_tokens_per_kvp_group
        g_rows, g_tokens = batch.group_rows, batch.group_tokens
        running = self.running
        covered = self.kv.covered
        add_page = self.kv.try_add_page
        first_groups = self.kv.first_groups
        preempted = batch.preempted
        marked = len(decodes)  # decodes[marked:]: scheduled, not yet marked in flight
        for req in pool:
            if preempted and req not in running:
                continue  # preempted as a victim of an earlier decode
            done = req.num_computed_tokens
            if per_group:
                g = (first_groups[req.request_id] + done // M) % k  # the group holding `done` (kvp_layout.owner, inlined)
                if g_rows[g] >= cap:
                    continue
            elif n >= cap:
                continue
            c = covered[req.request_id]
            if done >= c and (done != c or not add_page(req)):  # position `done` needs a page; none at hand
                in_flight.update(decodes[marked:])  # scheduled decodes are no victims
                marked = len(decodes)
                if not self.reserve(req, 1, batch, now):
                    continue  # it got none: it preempted itself
            decodes.append(req)
            starts.append(done)
            n += 1
            if per_group:
                g_rows[g] += 1
                g_tokens[g] += 1
        in_flight.update(decodes[marked:])
        return n
