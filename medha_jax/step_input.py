"""The scheduler -> executor contract: a self-contained snapshot of one iteration.

  Scheduler.schedule(now) -> ScheduledBatch (live Requests, the KV manager's page lists)
      --StepInput.from_batch--> StepInput: per sequence its token ids, positions, page tables
        (copied), sampling settings and seed; nothing that the scheduler mutates afterwards
      --Executor.tick / execute--> packed arrays -> the compiled step

Everything the executor reads is here, so a batch can sit in a stream pipeline for several
steps while the scheduler moves on (tokens appended, pages allocated or freed) without the
executor ever seeing those changes. Order: as in the batch (prefill chunks first, then decodes).
A token sampled by the previous step whose id the host does not have yet is a `feed` index: the
device reads it from that step's output (asynchronous scheduling), so no host round trip.
Logits rows: one per sequence (its last token), except a chunk of a prompt being scored, which
has one per token (`targets`); rows follow the sequences' order (`last_rows`).
Pure Python, no JAX.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import repeat
from typing import NamedTuple

from medha_jax.batch import ScheduledBatch


class SeqInput(NamedTuple):
    """One sequence's share of a step: `num_tokens` tokens from position `start_pos`.

    A tuple, never changed once made: `from_batch` builds one per sequence every step (hundreds
    of decodes), at a third of what a frozen dataclass's `__init__` costs."""

    request_id: str
    start_pos: int
    num_tokens: int
    token_ids: tuple[int, ...]
    """The scheduled tokens: positions [start_pos, start_pos + num_tokens) of prompt + output."""
    page_tables: tuple[Sequence[int], ...]
    """Pages holding this sequence's KV, one page-id sequence per kvp group it touches (a copy:
    from the scheduler, int32 `array`s, copied as buffers)."""
    samples: bool
    """A token is sampled from this sequence's last position."""
    temperature: float
    top_k: int
    top_p: float
    seed: int
    """The request's sampling seed (SamplingParams.seed, or the one the engine drew)."""
    step: int
    """Tokens the request had generated when this step was formed (the sampler's counter)."""
    feed: int = -1
    """>= 0: the last scheduled token is pending (`Request.num_pending_tokens`): the device reads
    its id from the previous step's sampled tokens at this index (a logits row of that step);
    -1: all ids are above."""
    first_group: int = 0
    """The kvp group holding its block 0 (`kvp_layout`): which group runs its tokens follows."""
    targets: tuple[int, ...] = ()
    """A chunk of a prompt being scored (`SamplingParams.prompt_logprobs`): per scheduled token,
    the prompt token after it, whose log-probability its logits row gives (-1: none, the row
    samples or is not needed). Empty: one row, the last token's."""

    @property
    def num_rows(self) -> int:
        """Logits rows of this sequence in the step: one per token when scored, else one."""
        return len(self.targets) or 1


def _not_sampled(req) -> RuntimeError:
    return RuntimeError(f"request {req.request_id!r} has a pending token the previous step did not sample")


@dataclass(frozen=True, slots=True)
class StepInput:
    seqs: tuple[SeqInput, ...]

    @staticmethod
    def from_batch(batch: ScheduledBatch, sampled_at: dict[str, int] | None = None) -> StepInput:
        """sampled_at: request id -> its sampling row in the previous step (`last_rows`), for the
        requests whose token from that step is still pending (every pending token comes from the
        previous step)."""
        seqs = []
        append, new, seq_input = seqs.append, tuple.__new__, SeqInput
        for s in batch.chunks:
            req = s.request
            sp = req.sampling_params
            start, n = s.start_pos, s.num_tokens
            pending = req.num_pending_tokens
            feed = -1
            if pending and s.samples:  # it ends at the request's last token: the pending one
                if sampled_at is None or req.request_id not in sampled_at:
                    raise _not_sampled(req)
                feed = sampled_at[req.request_id]
            targets = ()
            if s.num_rows > 1:  # row j scores prompt position start + j + 1
                p = req.prompt_len
                targets = tuple(req.prompt_token_ids[q] if q < p else -1 for q in range(start + 1, start + n + 1))
            # the fields in SeqInput's order (tuple.__new__: no per-call keyword parsing)
            append(new(seq_input, (req.request_id, start, n, tuple(req.token_ids_slice(start, start + n)),
                                   tuple([t[:] for t in s.page_tables]), s.samples, sp.temperature, sp.top_k,
                                   sp.top_p, req.seed, len(req.output_token_ids) + pending, feed, s.first_group,
                                   targets)))
        # the decodes: one token each at `start` (>= the prompt's length: it has sampled), which samples
        groups = batch.decode_groups or repeat(0)
        for req, start, tables, g in zip(batch.decodes, batch.decode_starts, batch.decode_tables, groups):
            sp = req.sampling_params
            out = req.output_token_ids
            # its token: an output, or the pending one (id 0, as `Request.token_ids_slice` gives it)
            j = start - len(req.prompt_token_ids)
            pending = req.num_pending_tokens
            feed = -1
            if pending:  # its token is the pending one
                if sampled_at is None or req.request_id not in sampled_at:
                    raise _not_sampled(req)
                feed = sampled_at[req.request_id]
            append(new(seq_input, (req.request_id, start, 1, (out[j] if j < len(out) else 0,),
                                   tuple([t[:] for t in tables]), True, sp.temperature, sp.top_k, sp.top_p,
                                   req.seed, len(out) + pending, feed, g, ())))
        return StepInput(tuple(seqs))

    @property
    def num_rows(self) -> int:
        """Logits rows of the step (sequences, plus one per extra token of a scored chunk)."""
        return sum(s.num_rows for s in self.seqs)

    def last_rows(self) -> list[int]:
        """Per sequence, the index of its last logits row (the one that samples): rows are laid
        out sequence after sequence."""
        out, row = [], -1
        for s in self.seqs:
            row += s.num_rows
            out.append(row)
        return out

    @property
    def num_tokens(self) -> int:
        return sum(s.num_tokens for s in self.seqs)

    @property
    def max_pages(self) -> int:
        """Widest page table of any sequence on any kvp group (at least 1)."""
        return max((len(t) for s in self.seqs for t in s.page_tables), default=1)
