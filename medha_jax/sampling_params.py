"""Per-request sampling parameters, validated on construction.

User code builds one `SamplingParams`; the engine copies its fields into per-request device
arrays each iteration (never static jit arguments), so changing them never recompiles.
Pure Python: imported by the scheduler, the servers and the simulator.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class SamplingParams:
    """How to pick each next token and when to stop."""

    max_tokens: int = 16
    """Most tokens to generate (>= 1)."""
    temperature: float = 1.0
    """0 means greedy; otherwise logits are divided by it before sampling."""
    top_k: int = 0
    """Keep only the k most likely tokens; 0 keeps all."""
    top_p: float = 1.0
    """Nucleus sampling: keep the smallest set whose probability reaches top_p, in (0, 1]."""
    seed: int | None = None
    """Per-request seed: the same seed gives the same tokens whatever else is batched with it."""
    stop: list[str] = field(default_factory=list)
    """Stop strings: generation ends when the text contains one (it is cut from the text)."""
    stop_token_ids: list[int] = field(default_factory=list)
    """Token ids that end generation (kept in token_ids, not rendered in text)."""
    ignore_eos: bool = False
    """Keep generating past the model's end-of-sequence token."""
    logprobs: bool = True
    """Return the log-probability of each sampled token."""

    def __post_init__(self) -> None:
        if not isinstance(self.max_tokens, int) or isinstance(self.max_tokens, bool) or self.max_tokens < 1:
            raise ValueError(f"max_tokens must be an integer >= 1, got {self.max_tokens!r}")
        if not (self.temperature >= 0.0) or self.temperature != self.temperature:
            raise ValueError(f"temperature must be >= 0, got {self.temperature!r}")
        if not isinstance(self.top_k, int) or isinstance(self.top_k, bool) or self.top_k < 0:
            raise ValueError(f"top_k must be an integer >= 0 (0 disables it), got {self.top_k!r}")
        if not (0.0 < self.top_p <= 1.0):
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p!r}")
        if self.seed is not None and (not isinstance(self.seed, int) or isinstance(self.seed, bool)):
            raise ValueError(f"seed must be an integer or None, got {self.seed!r}")
        if isinstance(self.stop, str):
            self.stop = [self.stop]
        if any(not isinstance(s, str) or not s for s in self.stop):
            raise ValueError(f"stop must be a list of non-empty strings, got {self.stop!r}")
        if any(not isinstance(t, int) or isinstance(t, bool) or t < 0 for t in self.stop_token_ids):
            raise ValueError(f"stop_token_ids must be non-negative integers, got {self.stop_token_ids!r}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0
