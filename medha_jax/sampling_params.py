"""Per-request sampling parameters, validated on construction.

User code builds one `SamplingParams`; the engine copies its fields into per-request device
arrays each iteration (never static jit arguments), so changing them never recompiles.
Pure Python: imported by the scheduler, the servers and the simulator.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

MIN_TEMPERATURE = 1e-5
"""Smallest temperature above 0 (greedy). float32 logits / temperature overflow far below it
(~1e-37); the bound keeps a wide margin and still admits "almost greedy"."""
MAX_TEMPERATURE = 100.0
"""Largest temperature (OpenAI allows 2): sampling is near-uniform long before it, and past
float32's range (~3.4e38) packing would overflow to inf."""
MAX_TOP_LOGPROBS = 20
"""Alternatives per sampled token the device returns (OpenAI's limit for top_logprobs)."""
MAX_TOP_K = 2**31 - 1
"""top_k is packed as int32 (any value above the vocabulary size keeps every token)."""


def _finite(name: str, v) -> None:
    if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v):
        raise ValueError(f"{name} must be a finite number, got {v!r}")


@dataclass(slots=True)
class SamplingParams:
    """How to pick each next token and when to stop."""

    max_tokens: int = 16
    """Most tokens to generate (>= 1)."""
    temperature: float = 1.0
    """0 means greedy; otherwise logits are divided by it before sampling (MIN_TEMPERATURE..MAX_TEMPERATURE)."""
    top_k: int = 0
    """Keep only the k most likely tokens; 0 keeps all (at most MAX_TOP_K)."""
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
    top_logprobs: int = 0
    """Also return, per sampled token, the top_logprobs most likely tokens and their
    log-probabilities (0..MAX_TOP_LOGPROBS, computed on the device; needs logprobs)."""
    skip_special_tokens: bool = True
    """Leave the tokenizer's special tokens (<|eot_id|>, ...) out of the text; False renders them.
    A token that ends the generation (EOS, a stop token id) adds no text either way."""
    prompt_logprobs: int | None = None
    """Score the prompt: the log-probability of every prompt token after the first given the ones
    before it, plus that many most likely tokens at each position (0..MAX_TOP_LOGPROBS); None: off.
    Computed in the prefill itself (one logits row per prompt token), so such a request takes no
    cached prefix and its chunks are at most max_num_seqs tokens."""

    def __post_init__(self) -> None:
        if not isinstance(self.max_tokens, int) or isinstance(self.max_tokens, bool) or self.max_tokens < 1:
            raise ValueError(f"max_tokens must be an integer >= 1, got {self.max_tokens!r}")
        _finite("temperature", self.temperature)
        if self.temperature != 0 and not MIN_TEMPERATURE <= self.temperature <= MAX_TEMPERATURE:
            raise ValueError(f"temperature must be 0 (greedy) or in [{MIN_TEMPERATURE:g}, {MAX_TEMPERATURE:g}], "
                             f"got {self.temperature!r}")
        if not isinstance(self.top_k, int) or isinstance(self.top_k, bool) or not 0 <= self.top_k <= MAX_TOP_K:
            raise ValueError(f"top_k must be an integer in [0, {MAX_TOP_K}] (0 disables it), got {self.top_k!r}")
        _finite("top_p", self.top_p)
        if not (0.0 < self.top_p <= 1.0):
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p!r}")
        if self.seed is not None and (not isinstance(self.seed, int) or isinstance(self.seed, bool)):
            raise ValueError(f"seed must be an integer or None, got {self.seed!r}")
        if isinstance(self.stop, str):
            self.stop = [self.stop]
        if any(not isinstance(s, str) or not s for s in self.stop):
            raise ValueError(f"stop must be a list of non-empty strings, got {self.stop!r}")
        if (not isinstance(self.top_logprobs, int) or isinstance(self.top_logprobs, bool)
                or not 0 <= self.top_logprobs <= MAX_TOP_LOGPROBS):
            raise ValueError(f"top_logprobs must be an integer in [0, {MAX_TOP_LOGPROBS}], got {self.top_logprobs!r}")
        if not isinstance(self.skip_special_tokens, bool):
            raise ValueError(f"skip_special_tokens must be a boolean, got {self.skip_special_tokens!r}")
        if self.prompt_logprobs is not None and (
                not isinstance(self.prompt_logprobs, int) or isinstance(self.prompt_logprobs, bool)
                or not 0 <= self.prompt_logprobs <= MAX_TOP_LOGPROBS):
            raise ValueError(f"prompt_logprobs must be None or an integer in [0, {MAX_TOP_LOGPROBS}], "
                             f"got {self.prompt_logprobs!r}")
        if self.top_logprobs and not self.logprobs:
            raise ValueError("top_logprobs needs logprobs=True")
        if any(not isinstance(t, int) or isinstance(t, bool) or t < 0 for t in self.stop_token_ids):
            raise ValueError(f"stop_token_ids must be non-negative integers, got {self.stop_token_ids!r}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0
