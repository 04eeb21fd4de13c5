"""Serve while compiling: the shape buckets other than the one every batch fits compile in a
background thread, cheapest first.

  Executor.warmup(background=True)
      compile cover = (largest tokens, largest seqs, largest pages)   before serving: every batch fits it
      BackgroundCompiler(executor, the other buckets)
  Executor.start_background()    (engine_builder: after the start-up profile, which must not share the device)
          thread: next bucket = the oldest one a tick asked for (want), else the cheapest of the
                  first `eager` buckets (smallest first) not compiled yet -> executor.compile_bucket(b)
                  (XLA compiles without holding the GIL, so the engine thread keeps stepping)
  a tick needing bucket b (Executor.runnable):
      b compiled -> b;  else want(b) and run in the cheapest compiled bucket holding b (padded up:
      same tokens out, more work), unless the last tick there (before any: twice the predicted
      one) took longer than a compile: then wait (at most that long) for b, compiled next
      (`Executor._wait_for`)

Only the `eager` cheapest buckets are compiled unasked: a ladder with hundreds of buckets would
otherwise spend minutes and, on a CPU, run into the kernel's limit on memory mappings (each
XLA:CPU executable holds hundreds); the rest compile when a tick first needs them. On a CPU the
eager ones also wait for a pause in the ticks (`Executor.busy`): there a compile takes the cores
the ticks run on, and an offline job's ticks ran ~2-3x slower beside the eager compiles.

The thread keeps only a weak reference to the executor between compiles, so an engine dropped
mid-warm-up is collected and its thread ends after the compile in progress; `stop()` ends it at
the next bucket; at interpreter exit every compiler is stopped and its compile in progress awaited
(XLA torn down under a running compile crashes the process). Compile errors are kept (`error`)
and end the thread: the engine keeps serving on the buckets it has.
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
import weakref
from collections.abc import Callable

from medha_jax.executor.buckets import Bucket

log = logging.getLogger(__name__)

BUSY_POLL_S = 0.2  # how often eager compiles deferred for busy ticks look for a pause


def bucket_cost(b: Bucket) -> int:
    """Padded work of a tick in this bucket, for choosing among compiled buckets and ordering
    compiles: token rows (matmuls) plus page-table slots (the attention walks every one)."""
    return b.tokens + b.seqs * b.pages


_live: "weakref.WeakSet[BackgroundCompiler]" = weakref.WeakSet()


@atexit.register
def _stop_all() -> None:
    """At interpreter exit, let each compile in progress finish: XLA torn down under a running
    compile crashes the process (SIGSEGV) after the user's program has ended well."""
    for bc in list(_live):
        bc.stop()
    for bc in list(_live):
        if bc._thread.is_alive():
            bc._thread.join(timeout=120)


class BackgroundCompiler:
    def __init__(self, executor, buckets: list[Bucket], eager: int | None = None,
                 busy: Callable[[], bool] | None = None):
        order = sorted(buckets, key=lambda b: (bucket_cost(b), b.tokens, b.seqs, b.pages))
        self.eager = order if eager is None else order[:eager]
        # busy(): ticks are running now. Where given (a CPU, whose cores run both the ticks and the
        # compiles), the eager buckets wait for a pause; wanted ones compile at once either way
        self.busy = busy
        self.wanted: list[Bucket] = []  # appended by the engine thread, popped here
        self.current: Bucket | None = None  # being compiled
        self.done = 0
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._finished = threading.Event()
        self._thread = threading.Thread(target=_run, args=(weakref.ref(executor), self),
                                        name="medha-background-compile", daemon=True)

    @property
    def total(self) -> int:
        return self.done + len(self.eager) + len(self.wanted)

    def start(self) -> "BackgroundCompiler":
        """Start the thread (a second call does nothing)."""
        if self not in _live:
            _live.add(self)
            self._thread.start()
        return self

    def want(self, b: Bucket) -> None:
        """A tick needed b and ran padded: compile b next."""
        if b not in self.wanted:
            self.wanted.append(b)
            self._wake.set()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()

    @property
    def idle(self) -> bool:
        """Nothing left to compile now (more may be wanted later)."""
        return self._finished.is_set() or (not self.eager and not self.wanted and self.current is None)

    @property
    def finished(self) -> bool:
        """The thread has ended (stopped, failed, or its executor is gone)."""
        return self._finished.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the eager buckets and every wanted one are compiled (or the thread ended);
        True when so."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.idle:
            if deadline is not None and time.monotonic() > deadline:
                return False
            time.sleep(0.05)
        return True

    def _next(self, compiled) -> Bucket | None:
        while self.wanted:
            b = self.wanted.pop(0)
            if b not in compiled:
                return b
        if self.eager and self.busy is not None and self.busy():
            return None  # deferred: the ticks have the cores
        while self.eager:
            b = self.eager.pop(0)
            if b not in compiled:
                return b
        return None


def _run(executor_ref, bc: BackgroundCompiler) -> None:
    try:
        while not bc._stop.is_set():
            ex = executor_ref()
            if ex is None:
                return
            b = bc.current = bc._next(ex._compiled)
            if b is None:
                del ex
                bc._wake.clear()
                if not bc.wanted:  # checks on its executor (and, while deferred, the pause) again soon
                    bc._wake.wait(BUSY_POLL_S if bc.eager else 1.0)
                continue
            ex.compile_bucket(b)
            del ex  # no strong reference while waiting for the next compile
            bc.done += 1
            bc.current = None
    except BaseException as e:  # noqa: BLE001 - keep serving on the buckets already compiled
        bc.error = e
        log.error("background compile stopped after %d buckets: %s", bc.done, e)
    finally:
        bc._finished.set()
