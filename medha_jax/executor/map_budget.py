"""The kernel's limit on one process's memory mappings, and how much of it compiled buckets take.

  Executor.compile_bucket(b) -> BUDGET.check(1) -> compile -> BUDGET.record(mappings before)
      check(n): the process's mappings now (/proc/self/maps) + n more executables (the least one
      compile has added so far, PER_BUCKET_GUESS before the first) + RESERVE of the limit
      (/proc/sys/vm/max_map_count) must fit, else MappingLimitError naming the limit and the ways
      around it; no limit known (not Linux): everything fits
  Executor.warmup (every bucket): check(all of them) before the first compile
  Executor.runnable(b), b not compiled, no background compiler: BUDGET.fits(1), else padded into a
      compiled bucket that holds b (and so from the first refusal on)

Why: XLA:CPU maps each JIT-compiled kernel's code, constants and data as pages of their own, about
294 mappings per compiled tick of the demo model, plus ~130 once per sequence count for its
sampler (jaxlib 0.11.2, 2026-11-28; 426 a bucket while the sampler was compiled into every tick;
`benchmarks/mappings_per_bucket.py`), so the usual default of 65,530 holds ~210 compiled buckets
per process, counted over every engine in it (the samplers are few and fit in RESERVE). Past the limit LLVM cannot map memory (`LLVM compilation error: Cannot allocate
memory`) and the process dies with SIGSEGV, taking every request in it along: two engines of 92
buckets each in one process did (benchmarks/host_overlap.py). With the guard the compile that
would not fit raises instead; the background compiler stops there and the engine serves on the
buckets it has (`Executor.runnable` pads into them). One budget per process (`BUDGET`).
"""

from __future__ import annotations

import threading

PER_BUCKET_GUESS = 450
"""Mappings one compiled bucket is assumed to add before a compile has been measured."""
MIN_MEASURED = 50
"""A compile measured to add fewer mappings than this freed some meanwhile: not a measurement."""
RESERVE = 0.05
"""Share of the limit kept free for everything else (thread stacks, arrays, libraries)."""


class MappingLimitError(RuntimeError):
    """Compiling more shape buckets would pass the kernel's limit on memory mappings."""


def _read_limit() -> int | None:
    try:
        with open("/proc/sys/vm/max_map_count") as f:
            return int(f.read())
    except (OSError, ValueError):
        return None


def count_mappings() -> int | None:
    """This process's memory mappings now; None where /proc is not there."""
    try:
        with open("/proc/self/maps", "rb") as f:
            return f.read().count(b"\n")
    except OSError:
        return None


class MapBudget:
    def __init__(self, limit: int | None):
        self.limit = limit
        """The most mappings the process may hold, vm.max_map_count (None: unknown, no check)."""
        self._added: list[int] = []  # mappings each measured compile added
        self.refused = False
        """A compile was refused: the limit is near, serve on the buckets compiled."""
        self._lock = threading.Lock()

    @property
    def per_bucket(self) -> int:
        """Mappings one compile adds: the least measured so far, PER_BUCKET_GUESS before any. The
        least, because what inflates a measurement (mappings a first compile makes once, a compile
        in another thread at the same time) would refuse compiles that fit, multiplied by the
        buckets left when warm-up checks them all at once; the buckets of one model add within a
        few percent of each other (421-438 for the demo's). Measurements under MIN_MEASURED (memory
        freed while compiling) are not counted."""
        with self._lock:
            good = [a for a in self._added if a >= MIN_MEASURED]
            return min(good) if good else PER_BUCKET_GUESS

    def check(self, n: int = 1) -> int | None:
        """Raise MappingLimitError unless n more compiled buckets fit; returns the mappings now."""
        now = count_mappings()
        if self.limit is None or now is None:
            return now
        each = self.per_bucket
        if now + n * each > self.limit * (1.0 - RESERVE):
            self.refused = True
            raise MappingLimitError(
                f"compiling {n} more shape bucket(s) would pass the kernel's limit on memory mappings "
                f"(vm.max_map_count = {self.limit}; this process holds {now}, and each compiled bucket adds "
                f"~{each}: XLA:CPU maps every compiled kernel separately). Raise the limit "
                f"(`sudo sysctl -w vm.max_map_count=262144`), run fewer engines in one process, keep "
                f"background_compile on (buckets compile as ticks need them), or use coarser shape ladders "
                f"(larger min_token_bucket / min_page_bucket / min_seq_bucket, smaller max_model_len)")
        return now

    def fits(self, n: int = 1) -> bool:
        """`check` without the exception: whether n more compiled buckets fit (False also sets
        `refused`)."""
        try:
            self.check(n)
        except MappingLimitError:
            return False
        return True

    def record(self, before: int | None) -> None:
        """A compile that started with `before` mappings is done: learn what it added."""
        after = count_mappings()
        if before is None or after is None:
            return
        with self._lock:
            self._added.append(max(0, after - before))


BUDGET = MapBudget(_read_limit())
"""The process's budget, shared by every executor in it."""
