"""Request state: one `Request` per generation, shared by engine, scheduler and simulator.

Lifecycle: WAITING -> RUNNING -> FINISHED_*; a RUNNING request may be PREEMPTED (its KV pages
freed, `num_computed_tokens` reset to 0) and later resumes by recomputing its prompt plus what
it already generated. Progress is one counter, as in vLLM v1: the request holds
`num_tokens = len(prompt) + len(output)` tokens and the KV of the first `num_computed_tokens`
is cached. An iteration schedules `n` of the remaining `num_tokens - num_computed_tokens`
tokens; when that reaches `num_tokens` the last position is sampled and a token appended. A
decode is just the case `remaining == 1`.

One writer per field: the engine builds a request (identity, prompt, params, SLO hints, seed)
and sets `error`; everything that changes afterwards (status, progress, output tokens, times,
stop_reason, preemptions) is written by the `Scheduler` (`update_from_output`, `finish`, its
scheduling pass). Pure Python, no JAX.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from medha_jax.sampling_params import SamplingParams


class RequestStatus(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    PREEMPTED = "preempted"
    FINISHED_STOPPED = "stop"
    FINISHED_LENGTH = "length"
    FINISHED_ABORTED = "abort"
    FINISHED_ERROR = "error"

    @property
    def finished(self) -> bool:
        return self._value_ in ("stop", "length", "abort", "error")  # _value_: no enum descriptor per read


@dataclass(eq=False, slots=True)
class Request:
    """One generation request and its progress. Identity semantics (eq=False): hashable by id()."""

    request_id: str
    prompt_token_ids: list[int]
    sampling_params: SamplingParams
    arrival_time: float
    """Seconds on the engine's clock (time.monotonic() in the engine, simulated in the simulator)."""
    ttft_deadline: float | None = None
    """Per-request TTFT deadline in seconds after arrival; None: the scheduler derives one."""
    priority_class: int = 0
    """SLO hint from the API; lower is more important. Policies may use it to break ties."""
    tpot_target: float | None = None
    """Per-request time-per-output-token target in seconds; while the request is live the
    time-budget packer keeps iterations under min(t_target, every live tpot_target)."""
    seed: int = 0
    """Sampling seed: SamplingParams.seed, or one the engine drew when it was None."""

    output_token_ids: list[int] = field(default_factory=list)
    output_logprobs: list[float] = field(default_factory=list)
    output_top_logprobs: list[list[tuple[int, float]]] = field(default_factory=list)  # per token, most likely first
    prompt_logprobs: list[tuple[float, list[tuple[int, float]]]] = field(default_factory=list)
    """SamplingParams.prompt_logprobs: entry q-1 scores prompt position q (its token's
    log-probability given positions < q, and the most likely tokens there), filled as chunks run."""
    num_computed_tokens: int = 0
    """Tokens whose KV is in the cache (prompt first, then generated)."""
    num_pending_tokens: int = 0
    """Tokens sampled on the device whose ids the host does not have yet (0 or 1; only an engine
    that schedules the next step while this one runs, `EngineConfig.async_scheduling`). They
    count in `num_tokens`: the next step may already compute the pending token's KV, the
    device feeding it its own sampled id (`SeqInput.feed`)."""
    status: RequestStatus = RequestStatus.WAITING
    num_preemptions: int = 0
    num_cached_tokens: int = 0
    """Prompt tokens whose KV came from the prefix cache when the request was last admitted;
    before its first admission, what the cache held for it when it arrived (the priority policies
    count these as done while the request waits)."""

    # Timings, on the engine's clock.
    first_scheduled_time: float | None = None
    first_token_time: float | None = None
    token_times: list[float] = field(default_factory=list)
    finish_time: float | None = None
    stop_reason: str | int | None = None
    """The stop string or stop token id that ended generation, if any."""
    error: str | None = None

    @property
    def prompt_len(self) -> int:
        return len(self.prompt_token_ids)

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_token_ids) + len(self.output_token_ids) + self.num_pending_tokens

    @property
    def num_remaining_tokens(self) -> int:
        """Tokens still to push through the model before the next token can be sampled."""
        return self.num_tokens - self.num_computed_tokens

    @property
    def num_output_tokens(self) -> int:
        return len(self.output_token_ids)

    @property
    def has_sampled(self) -> bool:
        """A token has been sampled (on the host, or pending on the device)."""
        return bool(self.output_token_ids) or self.num_pending_tokens > 0

    @property
    def is_prefill(self) -> bool:
        """True until the prompt's KV (plus any recomputed output) is cached."""
        return self.num_remaining_tokens > 1 or not self.has_sampled

    @property
    def is_finished(self) -> bool:
        status = self.status
        return status is not RequestStatus.RUNNING and status.finished  # the hot case first: no enum property read

    def token_ids_slice(self, start: int, stop: int) -> list[int]:
        """Token ids at positions [start, stop) of prompt + output; 0 at a pending token's position
        (the device fills in the id it sampled)."""
        p = self.prompt_len
        if stop <= p:
            return self.prompt_token_ids[start:stop]
        known = p + len(self.output_token_ids)
        tail = [0] * (stop - max(known, start)) if stop > known else []
        if start >= p:
            return self.output_token_ids[start - p : stop - p] + tail
        return self.prompt_token_ids[start:] + self.output_token_ids[: stop - p] + tail
