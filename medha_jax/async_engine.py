"""AsyncEngine: the bridge between asyncio front ends and the synchronous Engine loop.

  front end (asyncio loop)                         engine thread (the only caller of step())
  ------------------------                         -----------------------------------------
  await add_request(...) -- validate, tokenize --> Engine.add_request (pending queue), wake
      -> RequestStream                             loop: while work: outs = Engine.step()
  async for out in stream  <-- call_soon_threadsafe(_dispatch, outs) --+
  leaving the stream early (cancel, disconnect) -> Engine.abort(id), wake: pages freed next step

One asyncio.Queue per request carries its RequestOutput snapshots. The thread sleeps on a
threading.Event while the engine has nothing to do. A request counts against `max_queue` from
admission (its stream is registered before the engine sees it) until the engine's final output
for it (also after its client left: its pages are held until the abort step), so a full queue
answers QueueFullError at once instead of piling up. An iteration that fails inside the executor
is handled by the Engine (its requests finish with "error"); the stream raises
RequestFailedError for them. Should `step()` itself raise (a bug outside the executor), which
requests it touched is unknown: every request in flight gets RequestFailedError and is aborted,
and the loop carries on; after `max_consecutive_failures` such failures in a row the engine is
declared failed and new requests are refused. `drain()` stops admission and waits for
everything in flight; `shutdown()` stops the thread.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Sequence

from medha_jax.outputs import RequestOutput
from medha_jax.sampling_params import SamplingParams

log = logging.getLogger(__name__)

_VALIDATE_IN_THREAD = 8192  # prompts longer than this (characters or ids) are checked off the event loop


class QueueFullError(RuntimeError):
    """The engine already holds `max_queue` unfinished requests."""


class EngineUnavailableError(RuntimeError):
    """The engine is draining, stopped or failed and accepts no new requests."""


class RequestFailedError(RuntimeError):
    """The iteration running this request failed; other requests are unaffected."""


class EngineState(enum.Enum):
    CREATED = "created"
    SERVING = "serving"
    DRAINING = "draining"
    STOPPED = "stopped"
    FAILED = "failed"


class RequestStream:
    """Async iterator over one request's outputs. Leaving it before the end aborts the request.

    Use as `async with stream: async for out in stream: ...`; `__aexit__` (also on cancellation)
    aborts the request if it has not finished. The last output has `finished=True`; a request
    whose iteration failed raises RequestFailedError instead.
    """

    def __init__(self, owner: AsyncEngine, request_id: str, prompt_token_ids: list[int]):
        self._owner = owner
        self.request_id = request_id
        self.prompt_token_ids = prompt_token_ids
        self._queue: asyncio.Queue[RequestOutput | BaseException] = asyncio.Queue()
        self.finished = False

    def _put(self, item: RequestOutput | BaseException) -> None:
        self._queue.put_nowait(item)

    def __aiter__(self) -> RequestStream:
        return self

    async def __anext__(self) -> RequestOutput:
        if self.finished:
            raise StopAsyncIteration
        item = await self._queue.get()
        if isinstance(item, BaseException):
            self.finished = True
            raise item
        if item.finished:
            self.finished = True
            if item.finish_reason == "error":
                raise RequestFailedError(item.error or "the iteration running this request failed")
        return item

    def abort(self) -> None:
        if not self.finished:
            self.finished = True
            self._owner.abort(self.request_id)

    async def __aenter__(self) -> RequestStream:
        return self

    async def __aexit__(self, *exc) -> None:
        self.abort()


class AsyncEngine:
    def __init__(self, engine, *, max_queue: int = 256, max_consecutive_failures: int = 3):
        if max_queue < 1:
            raise ValueError(f"max_queue must be >= 1, got {max_queue}")
        self.engine = engine
        self.max_queue = max_queue
        self.max_consecutive_failures = max_consecutive_failures
        self.state = EngineState.CREATED
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._wake = threading.Event()
        self._stop = False
        self._streams: dict[str, RequestStream] = {}  # loop-owned: admitted, engine not yet finished
        self._idle: asyncio.Event | None = None
        self.output_listeners: list[Callable[[RequestOutput], None]] = []
        """Called on the event loop for every output (metrics)."""
        self.iteration_listeners: list[Callable[[float], None]] = []
        """Called on the engine thread with each iteration's wall time (metrics)."""
        self.num_step_failures = 0

    # ---- lifecycle ---------------------------------------------------------------------------
    def start(self) -> None:
        """Start the engine thread; call from the event loop the front ends run on."""
        if self.state is not EngineState.CREATED:
            raise RuntimeError(f"AsyncEngine already started (state {self.state.value})")
        self._loop = asyncio.get_running_loop()
        self._idle = asyncio.Event()
        self._idle.set()
        self.state = EngineState.SERVING
        self._thread = threading.Thread(target=self._run, name="medha-engine", daemon=True)
        self._thread.start()

    async def drain(self, timeout: float | None = None) -> bool:
        """Refuse new requests and wait until every admitted one has finished; True if all did."""
        if self.state is EngineState.SERVING:
            self.state = EngineState.DRAINING
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
            return True
        except TimeoutError:
            return False

    async def shutdown(self) -> None:
        """Abort whatever is left and stop the engine thread."""
        if self.state in (EngineState.SERVING, EngineState.DRAINING):
            self.state = EngineState.STOPPED
        for rid in list(self._streams):
            self.engine.abort(rid)
        self._stop = True
        self._wake.set()
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join, 30.0)
        for stream in self._streams.values():
            stream._put(EngineUnavailableError("the server shut down"))
        self._streams.clear()

    @property
    def accepting(self) -> bool:
        return self.state is EngineState.SERVING

    @property
    def num_inflight(self) -> int:
        return len(self._streams)

    # ---- requests ----------------------------------------------------------------------------
    async def add_request(
        self,
        prompt: str | Sequence[int],
        sampling_params: SamplingParams,
        *,
        request_id: str | None = None,
        ttft_deadline: float | None = None,
        priority_class: int = 0,
        tpot_target: float | None = None,
        stream: bool = True,
    ) -> RequestStream:
        """Admit a request; raises ValueError (bad input, names the field), QueueFullError or
        EngineUnavailableError. The returned stream yields its outputs.

        ttft_deadline, tpot_target and priority_class are the SLO hints the scheduler uses.
        stream=False: the stream yields one output, the final one (every token in it as new), for a
        caller that reads only that: no snapshot per token is made, crosses threads or wakes it."""
        if not self.accepting:
            raise EngineUnavailableError(f"the engine is not accepting requests (state {self.state.value})")
        if self.num_inflight >= self.max_queue:
            raise QueueFullError(f"the server queue is full ({self.max_queue} unfinished requests); retry later")
        rid = request_id or f"cmpl-{uuid.uuid4().hex}"
        if rid in self._streams:
            raise ValueError(f"request_id {rid!r} is already in use")
        # Registered before the engine sees the request, so no output can arrive for an unknown id.
        outputs = RequestStream(self, rid, [])
        self._streams[rid] = outputs
        self._idle.clear()
        kwargs = dict(request_id=rid, ttft_deadline=ttft_deadline, priority_class=priority_class,
                      tpot_target=tpot_target, stream=stream)
        try:
            if isinstance(prompt, (str, list, tuple)) and len(prompt) > _VALIDATE_IN_THREAD:
                req = await self._add_in_thread(prompt, sampling_params, kwargs)
            else:
                req = self.engine.add_request(prompt, sampling_params, **kwargs)
        except BaseException:
            self._streams.pop(rid, None)
            self._maybe_idle()
            raise
        outputs.prompt_token_ids = req.prompt_token_ids
        self._wake.set()
        return outputs

    async def _add_in_thread(self, prompt, sampling_params, kwargs):
        """Engine.add_request on a worker thread (long prompts: tokenizing and checking take a while).

        If the caller is cancelled meanwhile, the thread still finishes admitting the request;
        it is then aborted at once instead of running with nobody listening."""
        fut = asyncio.ensure_future(asyncio.to_thread(self.engine.add_request, prompt, sampling_params, **kwargs))
        try:
            return await asyncio.shield(fut)
        except asyncio.CancelledError:
            def abort_if_admitted(f: asyncio.Future) -> None:
                if not f.cancelled() and f.exception() is None:
                    self.abort(f.result().request_id)

            fut.add_done_callback(abort_if_admitted)
            raise

    async def generate(self, prompt, sampling_params: SamplingParams, **kwargs) -> AsyncIterator[RequestOutput]:
        """Convenience: yield a request's outputs; closing the iterator early aborts it."""
        stream = await self.add_request(prompt, sampling_params, **kwargs)
        async with stream:
            async for out in stream:
                yield out

    def abort(self, request_id: str) -> None:
        """Abort a request (thread-safe); its pages are freed at the engine's next step."""
        self.engine.abort(request_id)
        self._wake.set()

    # ---- the loop thread ---------------------------------------------------------------------
    def _run(self) -> None:
        failures = 0
        while not self._stop:
            if not self.engine.has_unfinished():
                self._wake.wait(timeout=1.0)
                self._wake.clear()
                continue
            iterations = getattr(self.engine, "num_iterations", None)
            try:
                outs = self.engine.step()
            except Exception as e:  # noqa: BLE001 - fail the requests in flight, keep the server up
                failures += 1
                self.num_step_failures += 1
                log.exception("engine step failed (%d in a row)", failures)
                fatal = failures >= self.max_consecutive_failures
                self._loop.call_soon_threadsafe(self._fail_inflight, e, fatal)
                if fatal:
                    return
                time.sleep(0.01 * failures)
                continue
            failures = 0
            if outs:
                self._loop.call_soon_threadsafe(self._dispatch, outs)
            ran = iterations is None or self.engine.num_iterations != iterations
            if ran and self.engine.last_iteration_time is not None:
                for listener in self.iteration_listeners:
                    try:
                        listener(self.engine.last_iteration_time)
                    except Exception:  # noqa: BLE001 - metrics must never break serving
                        log.exception("iteration listener failed")
            elif not ran and not outs:
                time.sleep(0.001)  # work exists but nothing could be scheduled: do not spin

    # ---- on the event loop -------------------------------------------------------------------
    def _dispatch(self, outs: list[RequestOutput]) -> None:
        for out in outs:
            stream = self._streams.get(out.request_id)
            if stream is not None:
                stream._put(out)
                if out.finished:
                    del self._streams[out.request_id]
            for listener in self.output_listeners:
                try:
                    listener(out)
                except Exception:  # noqa: BLE001 - metrics must never break serving
                    log.exception("output listener failed")
        self._maybe_idle()

    def _fail_inflight(self, err: Exception, fatal: bool) -> None:
        # The failed step may have swallowed final outputs, so the streams are settled here and
        # now (not when the engine's abort output arrives, which may never come).
        msg = f"engine iteration failed: {type(err).__name__}: {err}"
        if err.__context__ is not None:
            msg += f" (while handling {type(err.__context__).__name__}: {err.__context__})"
        streams, self._streams = self._streams, {}
        for rid, stream in streams.items():
            stream._put(RequestFailedError(msg))
            self.engine.abort(rid)
        if fatal:
            self.state = EngineState.FAILED
        self._wake.set()
        self._maybe_idle()

    def _maybe_idle(self) -> None:
        if not self._streams:
            self._idle.set()
