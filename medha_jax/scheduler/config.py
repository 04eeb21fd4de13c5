"""`SchedulerConfig`: every scheduling knob, validated on construction.

One field per knob, each with a docstring that the CLI turns into `--help` text. The scheduler,
the batch packers, the prefill-time cache and the simulator all read this one object.
Pure Python, no JAX.
"""

from __future__ import annotations

from dataclasses import dataclass

POLICIES = ("fcfs", "fcfs_nonchunked", "srpt", "edf", "lrs", "lars", "slo")
TIME_BUDGET_POLICIES = ("edf", "lrs", "lars", "slo")


@dataclass(slots=True)
class SchedulerConfig:
    policy: str = "slo"
    """Scheduling policy: fcfs (Sarathi chunked prefills under a token budget), fcfs_nonchunked
    (whole prompts, the convoy baseline), srpt (shortest remaining prompt first with aging, token
    budget), or edf / lrs / lars / slo (priority order, chunks sized by
    the runtime predictor under a time budget; lars is Medha's; slo is EDF while every TTFT deadline
    can be met and sacrifices the fewest requests when not)."""
    max_num_batched_tokens: int | None = None
    """Most tokens in one iteration. fcfs/srpt: the Sarathi token budget (default 512). edf/lrs/lars/slo: a
    hard cap beside the time budget (default max_chunk + max_num_seqs). fcfs_nonchunked: the cap on
    extra whole prompts (default 512); the first prompt of an iteration always runs whole."""
    max_num_seqs: int = 256
    """Most sequences (decodes + prefill chunks) in one iteration."""
    t_target: float | None = None
    """Iteration time budget in seconds for edf/lrs/lars/slo (default 0.05, or tpot_slo when given)."""
    tpot_slo: float | None = None
    """Decode time-per-output-token SLO in seconds; when set, t_target defaults to it."""
    pipeline_depth: int | None = None
    """Stream-pipeline stages (the mesh's spp; None: the engine fills it in, 1 outside an engine).
    t_target is per output token: a decode's next token needs its batch to pass every stage, one
    tick each (the stages run in lockstep), so one iteration (a tick) gets t_target /
    pipeline_depth, and the runtime predictor predicts ticks."""
    batch_mode: bool = False
    """No TPOT target for requests that give none of their own: while no live request has one,
    the time-budget policies pack each iteration for throughput (the largest chunks the token cap
    allows, several prefills per batch) instead of under t_target. `LLM(...)` turns it on unless
    told otherwise (an offline batch has nobody waiting between tokens); servers keep it off, so
    every decode is held to t_target by default (save slo's deadline rescue, `rescue_stretch`)."""
    long_prefill_token_threshold: int = 0
    """fcfs / srpt (vLLM's limit): a prompt longer than this many tokens is long; its prefill chunks
    are capped at this size and at most max_long_partial_prefills long prompts get a chunk per
    iteration. 0: off."""
    max_long_partial_prefills: int = 1
    """fcfs / srpt: most long prompts (see long_prefill_token_threshold) prefilled in one iteration."""
    srpt_aging: float = 2000.0
    """srpt: tokens of priority a waiting request gains per second waited (key = remaining prompt
    tokens - srpt_aging x seconds since arrival), so long prompts are not starved."""
    deadline_k: float = 1.5
    """Derived TTFT deadline D = max(deadline_k * T_prefill(prompt), deadline_min)."""
    deadline_min: float = 0.5
    """Smallest derived TTFT deadline, in seconds."""
    chunk_granularity: int = 32
    """Prefill chunk sizes are multiples of this (except a request's last chunk)."""
    min_chunk: int = 32
    """Smallest prefill chunk the time-budget packer schedules (unless fewer tokens remain)."""
    max_chunk: int = 8192
    """Largest prefill chunk the time-budget packer schedules."""
    accept_within: float = 0.1
    """Stop the chunk binary search once a chunk's predicted time is within this fraction of the budget."""
    multi_prefill: bool = True
    """Multi-prefill batching: after the first prefill chunk, keep adding others while the batch is
    predicted under multi_prefill_fraction * t_target. Off: one prefill per batch (the paper's
    EDF/LRS baselines)."""
    multi_prefill_fraction: float = 0.9
    """Keep adding prefills to a batch while its predicted time is below this fraction of t_target."""
    long_threshold: int = 262144
    """A prefill is long once it has processed this many tokens: at most one long prefill per batch
    (per kvp group), and long prefills yield part of t_target to others (space sharing)."""
    rho_max: float = 0.5
    """Largest fraction of t_target a long prefill yields to others (space sharing)."""
    bank_cap: float = 1.5
    """Most an iteration may take, in t_targets, when its decodes are ahead of their mean-TPOT
    schedule (`tpot_bank`), and only to run a prefill chunk in whole attention tiles (a runtime
    profile with tiled terms). 1: every iteration within t_target (the paper's hard budget)."""
    rescue_stretch: float = 1.0
    """slo: how far, in t_targets, an iteration may stretch while that lets a prompt meet its TTFT
    deadline that the budget alone would give up (the least of 1.5x, 2x and this that does):
    longer iterations prefill faster (at 900K cached keys a 128-token chunk costs 13% more per
    token than a 2048-token one), at the cost of the decodes' time per token meanwhile. Never past
    tpot_slo or a live request's tpot_target (set either to make the TPOT target hard), never in
    overload (a request is waiting that cannot make its deadline even stretched: the load is past
    what can be served, and the decodes keep their budget), and never so far that a request
    arriving meanwhile could not get its first token within half of deadline_min. 1 (the
    default): off, the paper's hard budget. Opt in with e.g. 3: in the simulator it saved the
    long prompts the budget lost on one workload draw and on another put a third to a half of the
    requests over the TPOT target for no first token saved (docs/simulator.md, "Deadline
    rescue")."""
    prefill_cache_granularity: int = 256
    """Token granularity of the simulated prefill-time cache (Algorithm 3)."""
    prefill_cache_dir: str | None = "~/.cache/medha_jax/prefill_times"
    """Directory to persist prefill-time caches in (keyed by predictor and chunk settings); None keeps them in memory only."""
    max_prefill_candidates: int = 64
    """Most prefill candidates (best priority first) the time-budget packer examines per iteration."""
    max_records: int = 4096
    """Iteration records kept (composition, predicted and measured time); oldest dropped first."""
    iteration_trace: str | None = None
    """Append one JSON line per iteration to this file (predicted and measured seconds, the
    runtime predictor's correction, the decodes and prefill chunks), to see where a deployment's
    device strays from its predictions; summarize with `python -m
    medha_jax.scheduler.iteration_trace FILE`. None: off."""

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise ValueError(f"unknown scheduling policy {self.policy!r}; valid: {', '.join(POLICIES)}")
        if not isinstance(self.long_prefill_token_threshold, int) or self.long_prefill_token_threshold < 0:
            raise ValueError(f"long_prefill_token_threshold must be an integer >= 0, got {self.long_prefill_token_threshold!r}")
        if not self.srpt_aging >= 0:
            raise ValueError(f"srpt_aging must be >= 0 tokens per second, got {self.srpt_aging!r}")
        for name in ("max_num_seqs", "max_long_partial_prefills", "chunk_granularity", "min_chunk",
                     "max_chunk", "long_threshold", "prefill_cache_granularity",
                     "max_prefill_candidates", "max_records"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
        if self.pipeline_depth is not None and (
                not isinstance(self.pipeline_depth, int) or isinstance(self.pipeline_depth, bool) or self.pipeline_depth < 1):
            raise ValueError(f"pipeline_depth must be an integer >= 1 (the mesh's spp), got {self.pipeline_depth!r}")
        if self.max_num_batched_tokens is None:
            self.max_num_batched_tokens = (
                self.max_chunk + self.max_num_seqs if self.policy in TIME_BUDGET_POLICIES else 512
            )
        if not isinstance(self.max_num_batched_tokens, int) or self.max_num_batched_tokens < 1:
            raise ValueError(f"max_num_batched_tokens must be an integer >= 1, got {self.max_num_batched_tokens!r}")
        if self.tpot_slo is not None and not self.tpot_slo > 0:
            raise ValueError(f"tpot_slo must be > 0 seconds, got {self.tpot_slo!r}")
        if self.t_target is None:
            self.t_target = self.tpot_slo if self.tpot_slo is not None else 0.05
        if not self.t_target > 0:
            raise ValueError(f"t_target must be > 0 seconds, got {self.t_target!r}")
        if self.tpot_slo is not None and self.t_target > self.tpot_slo:
            raise ValueError(
                f"t_target={self.t_target} s exceeds tpot_slo={self.tpot_slo} s: every decode would miss its SLO"
            )
        if not self.deadline_k > 0:
            raise ValueError(f"deadline_k must be > 0, got {self.deadline_k!r}")
        if not self.deadline_min >= 0:
            raise ValueError(f"deadline_min must be >= 0 seconds, got {self.deadline_min!r}")
        if self.min_chunk % self.chunk_granularity or self.max_chunk % self.chunk_granularity:
            raise ValueError(
                f"min_chunk={self.min_chunk} and max_chunk={self.max_chunk} must be multiples of "
                f"chunk_granularity={self.chunk_granularity}"
            )
        if self.min_chunk > self.max_chunk:
            raise ValueError(f"min_chunk={self.min_chunk} exceeds max_chunk={self.max_chunk}")
        if not 0.0 <= self.accept_within < 1.0:
            raise ValueError(f"accept_within must be in [0, 1), got {self.accept_within!r}")
        if not 0.0 < self.multi_prefill_fraction <= 1.0:
            raise ValueError(f"multi_prefill_fraction must be in (0, 1], got {self.multi_prefill_fraction!r}")
        if not 0.0 <= self.rho_max < 1.0:
            raise ValueError(f"rho_max must be in [0, 1), got {self.rho_max!r}")
        if not 1.0 <= self.rescue_stretch <= 4.0:
            raise ValueError(f"rescue_stretch must be in [1, 4] t_targets, got {self.rescue_stretch!r}")
        if not 1.0 <= self.bank_cap <= 4.0:
            raise ValueError(f"bank_cap must be in [1, 4] t_targets, got {self.bank_cap!r}")

    @property
    def depth(self) -> int:
        """Pipeline stages a token passes (pipeline_depth, 1 when not set)."""
        return self.pipeline_depth or 1

    @property
    def tick_target(self) -> float:
        """The configured budget of one iteration (one pipeline tick): t_target / depth."""
        return self.t_target / self.depth

    @property
    def uses_time_budget(self) -> bool:
        return self.policy in TIME_BUDGET_POLICIES
