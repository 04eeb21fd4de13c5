"""Per-iteration records: what ran, what the predictor expected, what the device measured.

  Scheduler.schedule(now) ---------> batch.predicted_time
  Scheduler.on_batch_done(batch, now, measured_time) --> IterationRecord(composition, predicted, measured)

The engine reports measured times; the simulator reports the predictor's. The records feed the
predictor's held-out error (`RuntimePredictor.mape`) and the metrics endpoint. Bounded: the
oldest records are dropped first. Pure Python, no JAX.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from itertools import repeat

from medha_jax.batch import ScheduledBatch, seq_first_group, seq_num_tokens, seq_start_pos


@dataclass(frozen=True, slots=True)
class Composition:
    """What one iteration computes: one `(q_tokens, kv_len)` pair per sequence, where `kv_len` is
    the number of tokens already cached before this iteration (so a chunk attends to
    kv_len + its own tokens). Decodes are the pairs with q_tokens == 1 and kv_len > 0. `groups`:
    each sequence's first kvp group (`kvp_layout`), None when every one starts on group 0."""

    seqs: tuple[tuple[int, int], ...] = ()
    groups: tuple[int, ...] | None = None

    @classmethod
    def of(cls, pairs) -> "Composition":
        out = tuple((int(q), int(kv)) for q, kv in pairs)
        for q, kv in out:
            if q < 1 or kv < 0:
                raise ValueError(f"a sequence needs q_tokens >= 1 and kv_len >= 0, got ({q}, {kv})")
        return cls(out)

    @classmethod
    def from_batch(cls, batch: ScheduledBatch) -> "Composition":
        chunks, n = batch.chunks, len(batch.decodes)  # hundreds of decodes: the pairs are made in C
        pairs = (*zip(map(seq_num_tokens, chunks), map(seq_start_pos, chunks)), *zip(repeat(1), batch.decode_starts))
        groups = (*map(seq_first_group, chunks), *(batch.decode_groups or repeat(0, n)))
        return cls(pairs, groups if any(groups) else None)

    @property
    def num_tokens(self) -> int:
        return sum(q for q, _ in self.seqs)

    def to_json(self) -> list[list[int]]:
        return [[q, kv] for q, kv in self.seqs]

    @classmethod
    def from_json(cls, data) -> "Composition":
        return cls.of(data)


@dataclass(slots=True)
class IterationRecord:
    composition: Composition
    predicted: float | None
    """Predicted seconds (None when the scheduler had no predictor)."""
    measured: float | None
    """Measured seconds as reported by the engine (None when not reported)."""
    time: float
    """Clock time at which the iteration finished."""


class IterationLog:
    """The last `maxlen` iteration records."""

    def __init__(self, maxlen: int):
        self._records: deque[IterationRecord] = deque(maxlen=maxlen)

    def append(self, record: IterationRecord) -> None:
        self._records.append(record)

    def __len__(self) -> int:
        return len(self._records)

    def __iter__(self):
        return iter(self._records)

    def __getitem__(self, i: int) -> IterationRecord:
        return self._records[i]

    def measured_samples(self) -> list[tuple[Composition, float]]:
        """(composition, measured seconds) pairs, e.g. to refit or score the predictor."""
        return [(r.composition, r.measured) for r in self._records if r.measured is not None]

    def clear(self) -> None:
        self._records.clear()
