"""What the engine hands back for a request: the tokens so far, the text, why it ended, timings.

`RequestOutput` is a snapshot taken after an iteration; `new_token_ids`/`new_text` hold what that
iteration added, for streaming front ends. Pure Python.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class RequestMetrics:
    arrival_time: float
    first_scheduled_time: float | None
    first_token_time: float | None
    finish_time: float | None
    token_times: list[float] = field(default_factory=list)
    num_preemptions: int = 0

    @property
    def ttft(self) -> float | None:
        """Seconds from arrival to the first generated token."""
        return None if self.first_token_time is None else self.first_token_time - self.arrival_time

    @property
    def inter_token_times(self) -> list[float]:
        """Seconds between consecutive generated tokens (TBT)."""
        return [b - a for a, b in zip(self.token_times, self.token_times[1:])]

    @property
    def tpot(self) -> float | None:
        """Mean time per output token after the first."""
        gaps = self.inter_token_times
        return sum(gaps) / len(gaps) if gaps else None


@dataclass(slots=True)
class RequestOutput:
    request_id: str
    prompt_token_ids: list[int]
    token_ids: list[int]
    text: str
    logprobs: list[float]
    finished: bool
    finish_reason: str | None
    """"stop" (EOS, stop token or stop string), "length" (max_tokens or context), "abort", "error"."""
    stop_reason: str | int | None
    new_token_ids: list[int]
    new_text: str
    metrics: RequestMetrics
    error: str | None = None
