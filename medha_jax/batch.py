"""The scheduler's record of one iteration: one `ScheduledBatch` per engine step.

The scheduler decides *what* runs (which requests, how many tokens each, where their KV pages
are) and keeps this record until the step's tokens come back (`Scheduler.on_batch_done`, then
`Scheduler.update_from_output`). It refers to live `Request` objects and the KV manager's page
lists, so it never leaves the scheduler's side: the engine hands the executor a self-contained
copy, `step_input.StepInput.from_batch(batch)`. Pure Python, no JAX: the simulator consumes the
same batches and hands their composition to a device model instead of a device.

Order inside a batch: prefill chunks first, then decodes (the fused attention kernel and the
runtime predictor both rely on it only for speed, never for correctness). The decodes are kept
as parallel lists (`ScheduledBatch.decodes`), not one object each.
"""

from __future__ import annotations

import operator
from array import array
from dataclasses import dataclass, field
from itertools import repeat
from typing import NamedTuple

from medha_jax.request import Request


class ScheduledSeq(NamedTuple):
    """One request's share of an iteration: `num_tokens` tokens starting at position `start_pos`.

    A tuple, never changed once made (a third of what a dataclass's `__init__` costs). A batch
    keeps its decodes as lists instead (`ScheduledBatch.decodes`); `ScheduledBatch.seqs` makes
    theirs on request."""

    request: Request
    start_pos: int
    """Absolute position of the first scheduled token (= request.num_computed_tokens)."""
    num_tokens: int
    """Query tokens this iteration: a prefill chunk, or 1 for a decode."""
    page_tables: list[array]
    """Pages holding this request's KV, one table per block it touches (block b holds positions
    [b*M, (b+1)*M) for M = max_tokens_per_kvp_group, on kvp group (first_group + b) % kvp; one
    table when kvp == 1), each an int32 `array` of page ids. Covers every position up to
    start_pos + num_tokens. Aliases the KV manager's tables."""
    samples: bool
    """Whether this iteration reaches the end of the request's tokens, so a token is sampled
    (fixed when the batch is formed: start_pos + num_tokens == request.num_tokens)."""
    num_rows: int = 1
    """Logits rows the step computes for it: one per token for a chunk of a prompt being scored
    (`SamplingParams.prompt_logprobs`), else one (its last token's)."""
    first_group: int = 0
    """The kvp group holding its block 0 (`kvp_layout`; 0 unless the groups run their own batches)."""

    @property
    def request_id(self) -> str:
        return self.request.request_id

    @property
    def is_prefill(self) -> bool:
        return self.num_tokens > 1 or not self.request.has_sampled

    @property
    def token_ids(self) -> list[int]:
        """The scheduled tokens, read from the request now."""
        return self.request.token_ids_slice(self.start_pos, self.start_pos + self.num_tokens)

    @property
    def kv_len(self) -> int:
        """Context length after this iteration (cached + scheduled tokens)."""
        return self.start_pos + self.num_tokens


seq_start_pos, seq_num_tokens, seq_first_group = (operator.itemgetter(ScheduledSeq._fields.index(f))
                                                 for f in ("start_pos", "num_tokens", "first_group"))
"""ScheduledSeq fields as C-level getters, for `map` over a batch's sequences."""


@dataclass(slots=True)
class ScheduledBatch:
    """One iteration as the scheduler formed it (the executor gets a `StepInput` copy of it).

    Two parts, in this order (the contract: prefill chunks first):
      chunks   every sequence the packer added (`Scheduler.add_seq`): prefill chunks
      decodes  phase 1's decodes as parallel lists (one token each, at `decode_starts`, sampling,
               one logits row), not one object per decode: a batch carries hundreds, and making
               a `ScheduledSeq` for each was a third of forming the batch. The hot consumers
               (`StepInput.from_batch`, `Scheduler.on_batch_done` / `update_from_output`,
               `Composition.from_batch`, the packers) read the lists; `seqs` makes the objects
               for everyone else."""

    chunks: list[ScheduledSeq] = field(default_factory=list)
    decodes: list[Request] = field(default_factory=list)
    decode_starts: list[int] = field(default_factory=list)
    """Per decode, the position of its one token (= its num_computed_tokens when scheduled)."""
    decode_tables: list[list[array]] = field(default_factory=list)
    """Per decode, its page tables (`ScheduledSeq.page_tables`: aliases the KV manager's)."""
    decode_groups: list[int] | None = None
    """Per decode, the kvp group holding its block 0; None: group 0 for every one (kvp == 1)."""
    predicted_time: float | None = None
    """The runtime predictor's estimate for this batch, in seconds (None without a predictor)."""
    preempted: list[Request] = field(default_factory=list)
    """Requests whose pages were freed while forming this batch (for records and metrics)."""
    tokens_pending: bool = False
    """Set by `Scheduler.on_batch_done`: its sampled tokens were left pending on the device."""
    num_rows: int = 0
    """Logits rows of all its sequences (kept by `Scheduler.add_seq` and the decode pass)."""
    group_rows: list[int] = field(default_factory=lambda: [0])
    """Logits rows per batch that runs: one entry, or one per kvp group when the groups run their
    own batches (each at most `SchedulerConfig.max_num_seqs`; `Scheduler.run_group`)."""
    group_tokens: list[int] = field(default_factory=lambda: [0])
    """Tokens per batch that runs, as group_rows (each at most max_num_batched_tokens)."""

    @property
    def seqs(self) -> list[ScheduledSeq]:
        """Every sequence as a `ScheduledSeq`, chunks first then decodes (made on each call)."""
        groups = repeat(0) if self.decode_groups is None else self.decode_groups
        return self.chunks + list(map(tuple.__new__, repeat(ScheduledSeq),
                                      zip(self.decodes, self.decode_starts, repeat(1), self.decode_tables,
                                          repeat(True), repeat(1), groups)))

    @property
    def num_seqs(self) -> int:
        return len(self.chunks) + len(self.decodes)

    @property
    def num_tokens(self) -> int:
        return sum(s.num_tokens for s in self.chunks) + len(self.decodes)

    @property
    def num_prefill_tokens(self) -> int:
        return sum(s.num_tokens for s in self.chunks if s.is_prefill)

    @property
    def num_decodes(self) -> int:
        return sum(1 for s in self.chunks if not s.is_prefill) + len(self.decodes)

    @property
    def is_empty(self) -> bool:
        return not self.chunks and not self.decodes
