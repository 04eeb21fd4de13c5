"""Python's cyclic garbage collector, run where the engine's host would wait for the device anyway.

  Engine.__init__        gc.freeze(): the start-up heap (params' wrappers, tables, tokenizer)
                         leaves the collector's walks for good
  Engine.step():  with HostWork():      automatic collection off while the host schedules, packs
                                        and launches (restored on exit, so code between steps
                                        collects as usual)
                      collect_due()     right before the host blocks on the device's tokens: the
                                        generations CPython itself would have collected by now
                                        (its counts vs thresholds), so a collection costs time the
                                        host would have spent waiting, not scheduling time

The scheduler's hot loops allocate hundreds of short-lived tracked objects per iteration (one
per scheduled sequence, job tuples), so with automatic collection a young-generation pass lands
inside `schedule()` every few iterations, and every tenth one walks the middle generation:
the 0.3-1 ms tail of batch formation (`benchmarks/scheduler_overhead.py --gc`). Nothing is
skipped: the same collections run, at a different point of the step. Pure Python.
"""

from __future__ import annotations

import gc


def collect_due() -> int:
    """Once the young generation is over its threshold, run the oldest generation whose count is
    over its threshold, as CPython's automatic collector picks it (CPython additionally skips a
    full pass while few objects await one; here a due full pass runs); returns the generation
    collected, or -1."""
    counts, thresholds = gc.get_count(), gc.get_threshold()
    if not thresholds[0] or counts[0] <= thresholds[0]:
        return -1
    gen = max(g for g in range(3) if counts[g] > thresholds[g])
    gc.collect(gen)
    return gen


class HostWork:
    """`with HostWork():` automatic collection is off inside (if it was on), back on after."""

    __slots__ = ("_was_enabled",)

    def __enter__(self) -> HostWork:
        self._was_enabled = gc.isenabled()
        if self._was_enabled:
            gc.disable()
        return self

    def __exit__(self, *exc) -> None:
        if self._was_enabled:
            gc.enable()
