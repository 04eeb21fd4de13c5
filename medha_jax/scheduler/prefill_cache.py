"""Prefill-time cache (Algorithm 3): how long an adaptively chunked prefill of L tokens takes.

  predictor.chunk_time + t_target + chunk config
  --simulate one prefill chunk by chunk (the packer's chunk at each KV length, `budget_chunk`)-->
  chunk boundaries with cumulative seconds --sampled every `granularity` tokens--> grid
  total_time(L) = grid interpolated at L;   remaining_time(total, processed) = T(total) - T(processed)

The chunk chosen at KV length kv does not depend on the prompt's length (except that the last
chunk is exact), so one simulation serves every length: T(L) = time to the last chunk boundary
b <= L, plus one chunk of L - b tokens at kv = b. The simulation is extended lazily (doubling)
when a longer length is asked for, and, given a directory, persisted as JSON under a key hashing
the predictor's coefficients, t_target, the chunk config and the granularity, so a restart with
the same setup skips the simulation (not for a provisional predictor, `medha_jax.nominal_profile`,
whose coefficients change with every start). The predictor's online correction is not applied (the key
must stay stable). Pure Python.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import os

from medha_jax.scheduler.chunking import budget_chunk
from medha_jax.scheduler.config import SchedulerConfig

_VERSION = 2  # 2: chunks cut back to whole attention tiles where that pays (budget_chunk)


class PrefillTimeCache:
    def __init__(self, predictor, config: SchedulerConfig, *, cache_dir: str | None = None,
                 initial_len: int = 1 << 16, stretch: float = 1.0):
        self.predictor = predictor
        self.config = config
        self.t_target = config.tick_target * stretch  # the packer's budget for one iteration (tick)
        self.granularity = config.prefill_cache_granularity
        self._chunk = dict(granularity=config.chunk_granularity, min_chunk=config.min_chunk,
                           max_chunk=config.max_chunk, accept_within=config.accept_within,
                           period=predictor.chunk_period)
        cache_dir = cache_dir if cache_dir is not None else config.prefill_cache_dir
        if getattr(predictor, "fit_info", {}).get("provisional"):  # rates measured anew each start: a key per start, kept in memory
            cache_dir = None
        self.cache_dir = os.path.expanduser(cache_dir) if cache_dir else None
        self._starts: list[int] = [0]      # KV length at each chunk boundary
        self._cum: list[float] = [0.0]     # seconds spent to reach each boundary
        self._grid: list[float] = [0.0]    # grid[i] = T(i * granularity)
        self.num_simulated_chunks = 0
        if not (self.cache_dir and self._load()):
            self._extend(initial_len)

    def stretched(self, factor: float) -> "PrefillTimeCache":
        """The same cache for iterations `factor` times longer (slo's deadline rescue)."""
        return PrefillTimeCache(self.predictor, self.config, cache_dir=self.cache_dir or "",  # "": in memory, as this one
                                stretch=factor)

    # ---- lookups ---------------------------------------------------------------------------
    def total_time(self, num_tokens: int) -> float:
        """Predicted seconds to prefill `num_tokens` tokens alone, chunked adaptively."""
        if num_tokens <= 0:
            return 0.0
        g = self.granularity
        i, r = divmod(num_tokens, g)
        grid = self._grid
        if i + 1 >= len(grid):
            self._extend(num_tokens + g)
            grid = self._grid
        if r == 0:
            return grid[i]
        lo = grid[i]
        return lo + (grid[i + 1] - lo) * (r / g)

    def remaining_time(self, total: int, processed: int) -> float:
        """Seconds still needed to prefill tokens [processed, total)."""
        if processed >= total:
            return 0.0
        return max(self.total_time(total) - self.total_time(processed), 0.0)

    def build(self, max_len: int) -> None:
        """Simulate up to `max_len` tokens now (engine warm-up), so no request pays for it later.
        About 35 ms per million tokens with single-GPU-like coefficients; far more where the
        smallest chunk overruns t_target (then every chunk is min_chunk tokens)."""
        if max_len > self.max_len:
            self._extend(max_len)

    def chunk_starts(self) -> tuple[int, ...]:
        """The cached length at each simulated chunk boundary so far, from 0 (`build` extends them):
        the chunks a prompt alone takes at the budget."""
        return tuple(self._starts)

    @property
    def max_len(self) -> int:
        return (len(self._grid) - 1) * self.granularity

    # ---- simulation ------------------------------------------------------------------------
    def _exact(self, n: int) -> float:
        i = bisect.bisect_right(self._starts, n) - 1
        b = self._starts[i]
        if b == n:
            return self._cum[i]
        return self._cum[i] + self.predictor.chunk_time(n - b, b)

    def _extend(self, upto: int) -> None:
        upto = max(upto, 2 * self.max_len)
        starts, cum = self._starts, self._cum
        chunk_time = self.predictor.chunk_time
        huge = 1 << 62
        while starts[-1] <= upto:
            kv = starts[-1]
            n, t = budget_chunk(lambda q: chunk_time(q, kv), huge, self.t_target, **self._chunk)
            if n == 0:  # even the smallest chunk overruns t_target: it still has to run
                n = self._chunk["min_chunk"]
                t = chunk_time(n, kv)
            starts.append(kv + n)
            cum.append(cum[-1] + t)
            self.num_simulated_chunks += 1
        g = self.granularity
        while (len(self._grid) - 1) * g < upto:
            self._grid.append(self._exact(len(self._grid) * g))
        if self.cache_dir:
            self._save()

    # ---- persistence -----------------------------------------------------------------------
    def key(self) -> str:
        blob = json.dumps({
            "v": _VERSION, "predictor": self.predictor.fingerprint(), "t_target": repr(self.t_target),
            "granularity": self.granularity, **self._chunk,
        }, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def path(self) -> str:
        return os.path.join(self.cache_dir, f"prefill_time_{self.key()}.json")

    def _save(self) -> None:
        os.makedirs(self.cache_dir, exist_ok=True)
        path = self.path()
        tmp = f"{path}.tmp{os.getpid()}"
        with open(tmp, "w") as f:
            json.dump({"version": _VERSION, "key": self.key(), "granularity": self.granularity,
                       "starts": self._starts, "cum": self._cum, "grid": self._grid}, f)
        os.replace(tmp, path)

    def _load(self) -> bool:
        try:
            with open(self.path()) as f:
                data = json.load(f)
        except (OSError, ValueError):
            return False
        if data.get("key") != self.key() or data.get("granularity") != self.granularity:
            return False
        self._starts, self._cum, self._grid = data["starts"], data["cum"], data["grid"]
        return True
