"""When the device worked and when it waited for the host: per-tick launch and finish times.

  Executor.launch_arrays -> timeline.launched(t_launch, tokens) -> a watcher thread blocks on
  `tokens` (the tick's last output) and stamps t_done -> ticks [(t_launch, t_done)]
  idle_fraction(): the device's gaps between ticks over the whole span
  Engine.step (asynchronous scheduling) -> timeline.host_step(seconds per HOST_PHASES) ->
  host_summary(): median milliseconds of each host phase per step

A tick starts on the device at max(t_launch, previous t_done) (XLA runs a device's programs in
launch order), so the device waited for the host max(0, t_launch - previous t_done) before each
tick. A synchronous engine pays its whole host work (schedule, pack, detokenize) in those gaps;
an engine that launches step n+1 before waiting for step n hides it when the device is the
slower side. Which host phase those gaps are made of: `HOST_PHASES`, per step. Off by default:
the benchmarks switch it on for a run with `recording(executor)`.
"""

from __future__ import annotations

import contextlib
import math
import queue
import statistics
import sys
import threading
import time
from dataclasses import dataclass, field


HOST_PHASES = ("outside", "drain", "schedule", "inputs", "launch", "wait", "outputs")
"""One asynchronous engine step on the host, in order: outside (from the previous step()'s return
to this one's call: the caller's loop, e.g. `LLM.generate` or the server), drain (adds and aborts
into the scheduler), schedule (`Scheduler.schedule`), inputs (host-tier swaps and
`StepInput.from_batch`), launch (`Executor.launch`: packing the arrays and the dispatch, host to
device copies included), wait (blocked on the previous step's tokens), outputs (record, append and
detokenize its tokens, RequestOutputs, `on_batch_done`). All but wait are host work: once they
add up to more than the device's step, the device idles for the difference."""


@dataclass
class DeviceTimeline:
    ticks: list[tuple[float, float]] = field(default_factory=list)
    """(launch, done) perf_counter seconds per tick, in launch order (done = nan until known)."""
    host: list[tuple[float, ...]] = field(default_factory=list)
    """Per asynchronous engine step: seconds in each of HOST_PHASES (outside is nan for a step that
    found nothing in flight: the engine was idle before it)."""

    def __post_init__(self):
        self._queue: queue.Queue = queue.Queue()
        self._thread = threading.Thread(target=self._watch, name="device-timeline", daemon=True)
        self._thread.start()

    def launched(self, t_launch: float, output) -> None:
        """A tick was launched at t_launch; `output` (a jax.Array it produces) is ready when it is done."""
        self.ticks.append((t_launch, float("nan")))
        self._queue.put((len(self.ticks) - 1, output))

    def host_step(self, phases: tuple[float, ...]) -> None:
        """One engine step's host seconds, in HOST_PHASES order."""
        self.host.append(phases)

    def host_summary(self) -> dict[str, float]:
        """Median milliseconds per step of each of HOST_PHASES, and of their sum without wait
        (`host`: the host's own work per step); {} when no step was recorded."""
        if not self.host:
            return {}
        out = {}
        for i, name in enumerate(HOST_PHASES):
            xs = [p[i] for p in self.host if not math.isnan(p[i])]
            out[name] = 1e3 * statistics.median(xs) if xs else math.nan
        work = [sum(x for name, x in zip(HOST_PHASES, p) if name != "wait") for p in self.host if not math.isnan(p[0])]
        out["host"] = 1e3 * statistics.median(work) if work else math.nan
        return out

    def describe_host(self) -> str:
        """`host_summary` in a line: 'host 2.10 ms a step (outside 0.05, drain 0.01, ...; wait 6.00)'."""
        m = self.host_summary()
        if not m:
            return "no host steps recorded"
        parts = ", ".join(f"{k} {m[k]:.2f}" for k in HOST_PHASES if k != "wait")
        return f"host {m['host']:.2f} ms a step ({parts}; wait {m['wait']:.2f})"

    def _watch(self) -> None:
        while True:
            i, out = self._queue.get()
            try:
                out.block_until_ready()
                self.ticks[i] = (self.ticks[i][0], time.perf_counter())
            except Exception:  # noqa: BLE001 - a failed tick has no finish time; the engine reports it
                pass
            finally:
                self._queue.task_done()

    def wait(self) -> None:
        """Until every launched tick has a finish time (or failed)."""
        self._queue.join()

    def reset(self) -> None:
        self.wait()
        self.ticks.clear()
        self.host.clear()

    def idle_fraction(self) -> tuple[float, float, int]:
        """(fraction of the span from the first launch to the last finish the device sat idle
        between ticks, that idle time in seconds, ticks counted)."""
        self.wait()
        done = [(a, b) for a, b in self.ticks if b == b]
        if len(done) < 2:
            return 0.0, 0.0, len(done)
        idle, prev = 0.0, done[0][1]
        for a, b in done[1:]:
            idle += max(0.0, a - prev)
            prev = max(prev, b)
        span = prev - done[0][0]
        return idle / span, idle, len(done)


@contextlib.contextmanager
def recording(executor):
    """Record `executor`'s ticks while inside; yields the DeviceTimeline. The interpreter's thread
    switch interval is 0.1 ms meanwhile, so the watcher stamps a tick's end promptly
    (benchmarks/host_overlap.py); both are restored on the way out."""
    timeline, switch = DeviceTimeline(), sys.getswitchinterval()
    executor.timeline = timeline
    sys.setswitchinterval(1e-4)
    try:
        yield timeline
    finally:
        executor.timeline = None
        sys.setswitchinterval(switch)
