"""When the device worked and when it waited for the host: per-tick launch and finish times.

  Executor.launch_arrays -> timeline.launched(t_launch, tokens) -> a watcher thread blocks on
  `tokens` (the tick's last output) and stamps t_done -> ticks [(t_launch, t_done)]
  idle_fraction(): the device's gaps between ticks over the whole span

A tick starts on the device at max(t_launch, previous t_done) (XLA runs a device's programs in
launch order), so the device waited for the host max(0, t_launch - previous t_done) before each
tick. A synchronous engine pays its whole host work (schedule, pack, detokenize) in those gaps;
an engine that launches step n+1 before waiting for step n hides it when the device is the
slower side. Off by default: the benchmarks switch it on for a run with `recording(executor)`.
"""

from __future__ import annotations

import contextlib
import queue
import sys
import threading
import time
from dataclasses import dataclass, field


@dataclass
class DeviceTimeline:
    ticks: list[tuple[float, float]] = field(default_factory=list)
    """(launch, done) perf_counter seconds per tick, in launch order (done = nan until known)."""

    def __post_init__(self):
        self._queue: queue.Queue = queue.Queue()
        self._thread = threading.Thread(target=self._watch, name="device-timeline", daemon=True)
        self._thread.start()

    def launched(self, t_launch: float, output) -> None:
        """A tick was launched at t_launch; `output` (a jax.Array it produces) is ready when it is done."""
        self.ticks.append((t_launch, float("nan")))
        self._queue.put((len(self.ticks) - 1, output))

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
