"""Host side of the stream pipeline: which microbatch is at which stage, and one tick's arrays.

  Executor.tick(step input) -> PipelineSlots.plan(new microbatch | None)
      stages = [new] + stages of the last tick minus the one that left the last stage
      bucket = elementwise max of the live microbatches' buckets, or a compiled one holding it
               while the rest still compile (Executor.runnable); every row padded to it
      inputs = every ModelInputs field stacked over stages: row s -> stage s      [spp, ...]
      sampling arrays and row order of the microbatch at the last stage (it exits this tick)
      feed_index of the microbatch at stage 0 (pending token ids read on the device)
  -> compiled tick -> PipelineSlots.commit(plan)

Design decision (shape buckets): each microbatch is packed once, at its own bucket, when it is
fed; a tick runs at the smallest bucket holding all microbatches in flight, and rows are padded
up to it with `packing.pad_to` (token padding after the real tokens, so activations keep their
layout whatever the bucket). The activation state on the device is sized for the largest token
bucket, so no tick depends on the previous tick's bucket and the compiled programs are exactly
one per bucket, as without a pipeline.

A microbatch keeps the page tables it was packed with: pages freed while it is in flight (an
abort) may be handed to a new request, but that request's writes at every stage come after the
stale ones (it enters stage 0 later), and it reads only positions it wrote. With depth 1 the
pipeline is the plain loop: the batch fed is the batch that exits. Numpy only.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from medha_jax.executor.buckets import Bucket
from medha_jax.executor.packing import EXIT_FIELDS, MODEL_FIELDS, PackedBatch, empty, pad_to
from medha_jax.step_input import StepInput


@dataclass(slots=True)
class Microbatch:
    batch: StepInput
    packed: PackedBatch


@dataclass(slots=True)
class TickPlan:
    bucket: Bucket
    arrays: dict[str, np.ndarray]
    """Every ModelInputs field stacked over stages ([spp, kvp, ...]) and the exiting microbatch's
    sampling arrays ([kvp, S]) and row order: the whole host input of one tick (what a
    multi-host leader sends)."""
    stages: list[Microbatch | None]
    """stages[s]: the microbatch stage s runs in this tick."""

    @property
    def exiting(self) -> Microbatch | None:
        return self.stages[-1]


class PipelineSlots:
    def __init__(self, depth: int, kvp: int):
        self.depth, self.kvp = depth, kvp
        self.stages: list[Microbatch | None] = [None] * depth
        """The microbatch each stage ran in the last tick."""

    @property
    def is_empty(self) -> bool:
        return all(m is None for m in self.stages[:-1])

    def plan(self, new: Microbatch | None, runnable=None) -> TickPlan | None:
        """The next tick with `new` entering stage 0; None when no stage would have work.
        runnable: the bucket a tick needing a given bucket runs in (default: that bucket)."""
        stages = [new] + self.stages[:-1]
        live = [m.packed.bucket for m in stages if m is not None]
        if not live:
            return None
        T, S, P = (max(b.tokens for b in live), max(b.seqs for b in live), max(b.pages for b in live))
        bucket = Bucket(T, S, P) if runnable is None else runnable(Bucket(T, S, P))
        rows = [pad_to(m.packed, bucket) if m is not None else _empty(bucket, self.kvp) for m in stages]
        arrays = {f: np.stack([getattr(r, f) for r in rows]) for f in MODEL_FIELDS}
        arrays.update({f: getattr(rows[-1], f) for f in EXIT_FIELDS})
        arrays["feed_index"] = rows[0].feed_index  # only stage 0 embeds token ids
        return TickPlan(bucket, arrays, stages)

    def commit(self, plan: TickPlan) -> None:
        self.stages = plan.stages

    def clear(self) -> None:
        self.stages = [None] * self.depth


@functools.lru_cache(maxsize=64)
def _empty(bucket: Bucket, kvp: int) -> PackedBatch:
    return empty(bucket, kvp)


def bucket_of(arrays: dict[str, np.ndarray]) -> Bucket:
    """The bucket of a tick's arrays (what a multi-host follower receives)."""
    *_, S, P = arrays["page_table"].shape  # [spp, kvp, kvp, S, P]
    return Bucket(arrays["token_ids"].shape[-1], S, P)
