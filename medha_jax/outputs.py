"""What the engine hands back for a request: the tokens so far, the text, why it ended, timings.

`RequestOutput` is a snapshot taken after an iteration; `new_token_ids`/`new_text`/`new_logprobs`
hold what that iteration added (the per-token delta streaming front ends send). Streaming stays
O(n) for an n-token output: a non-final snapshot's cumulative fields (`token_ids`, `logprobs`,
`metrics.token_times`, `text`) are O(1) views of the request's append-only lists (`Prefix`) and
of its streamed text pieces (`TextSoFar`), materialized only when read; the final snapshot
holds plain lists, copied once. Pure Python.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field

from medha_jax.detokenizer import TextSoFar


class Prefix(Sequence):
    """Read-only view of the first `n` items of a list that is only ever appended to."""

    __slots__ = ("_items", "_n")

    def __init__(self, items: list, n: int):
        self._items, self._n = items, n

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self._items[k] for k in range(*i.indices(self._n))]
        if i < 0:
            i += self._n
        if not 0 <= i < self._n:
            raise IndexError(f"index {i} out of range for {self._n} items")
        return self._items[i]

    def __iter__(self):
        return itertools.islice(self._items, self._n)

    def __eq__(self, other) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, str):
            return NotImplemented
        return len(other) == self._n and all(a == b for a, b in zip(self, other))

    __hash__ = None

    def __repr__(self) -> str:
        return repr(list(self))


@dataclass(slots=True)
class RequestMetrics:
    arrival_time: float
    first_scheduled_time: float | None
    first_token_time: float | None
    finish_time: float | None
    token_times: Sequence[float] = field(default_factory=list)
    num_preemptions: int = 0
    num_cached_tokens: int = 0
    """Prompt tokens served from the prefix cache instead of prefilled."""

    @property
    def ttft(self) -> float | None:
        """Seconds from arrival to the first generated token."""
        return None if self.first_token_time is None else self.first_token_time - self.arrival_time

    @property
    def inter_token_times(self) -> list[float]:
        """Seconds between consecutive generated tokens (TBT)."""
        times = list(self.token_times)
        return [b - a for a, b in zip(times, times[1:])]

    @property
    def tpot(self) -> float | None:
        """Mean time per output token after the first."""
        gaps = self.inter_token_times
        return sum(gaps) / len(gaps) if gaps else None


@dataclass(slots=True)
class RequestOutput:
    request_id: str
    prompt_token_ids: list[int]
    token_ids: Sequence[int]
    """Every generated token so far (a `Prefix` view until the final snapshot, then a list)."""
    text_so_far: str | TextSoFar
    logprobs: Sequence[float]
    finished: bool
    finish_reason: str | None
    """"stop" (EOS, stop token or stop string), "length" (max_tokens or context), "abort", "error"."""
    stop_reason: str | int | None
    new_token_ids: list[int]
    new_text: str
    metrics: RequestMetrics
    error: str | None = None
    new_logprobs: list[float] = field(default_factory=list)
    """Log-probabilities of `new_token_ids` (empty when the request did not ask for them)."""
    top_logprobs: Sequence[list[tuple[int, float]]] = ()
    """Per generated token, its `SamplingParams.top_logprobs` most likely alternatives as
    (token id, log-probability), most likely first (empty unless asked for)."""
    new_top_logprobs: list[list[tuple[int, float]]] = field(default_factory=list)
    """The same for `new_token_ids`."""
    prompt_logprobs: list[float | None] | None = None
    """With `SamplingParams.prompt_logprobs`: per prompt token, its log-probability given the
    tokens before it (None for the first, which has no context); complete from the first
    generated token on. None when not asked for."""
    prompt_top_logprobs: list[list[tuple[int, float]] | None] | None = None
    """The same positions' `prompt_logprobs` most likely tokens as (token id, log-probability),
    most likely first (None for the first)."""

    @property
    def text(self) -> str:
        """All text so far (joined on first read for a non-final snapshot)."""
        t = self.text_so_far
        return t if isinstance(t, str) else str(t)
