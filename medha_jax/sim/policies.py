"""The policies the simulator compares: each a real `Scheduler` plus the device it runs on.

  name --build(kv, predictor, **config overrides)--> Scheduler (medha_jax.scheduler objects)
  name --device_kind--> "chunked" (the deployment's own device) or "elastic_sp" (whole prompts over
                        elastic sequence parallelism, LoongServe-like; see sim/device_models.py)

  sarathi-512 / sarathi-2048  fcfs, fixed token budget per iteration (Sarathi-Serve, vLLM > 32K)
  vllm-2048                   fcfs, 2048-token budget with vLLM's long-prefill limits: prompts over
                              1024 tokens get at most 1024-token chunks, one such prompt per iteration
  srpt-2048                   shortest remaining prompt first, aged (2000 tokens/s), 2048-token budget
  loongserve                  fcfs_nonchunked: whole prompts, non-preemptive, elastic-SP cost
  edf / lrs                   deadline order / least remaining slack, time-budget packing, one
                              prefill per batch (the paper's 6.4 baselines keep Medha's mechanisms
                              but not its multi-prefill batching)
  lars                        LARS without multi-prefill batching and space sharing
  medha                       LARS + multi-prefill batching + space sharing (the scheduler's lars)
  medha-wtotal                the same with LARS as the paper writes it, rho = slack / w_total; the
                              engine follows the authors' code, rho = slack / D (D = max(1.5 w, 0.5 s)
                              is ~10x w for short prompts, so a short request is held back ~10x longer
                              once some long request is late)
  slo                         EDF while every deadline can be met, Moore-Hodgson sacrifice of the
                              fewest when not (the engine's slo policy), multi-prefill batching
  pecsched                    short-first preemption (PecSched): short prompts always before long
                              ones, chunked under the time budget; long ones run in the gaps
  priority                    strict non-preemptive priority (PecSched's "Priority" baseline, after
                              Past-Future): shorts first, a long prompt starts only when no short
                              one waits and then runs whole

medha-wtotal and the two PecSched-style policies are defined here (not in the engine's registry): the simulator
builds `Scheduler(config, kv, policy, packer, predictor)` with them, the constructor the
registry itself uses. Pure Python.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from medha_jax.request import Request
from medha_jax.scheduler import PrefillTimeCache, Scheduler, SchedulerConfig, make_scheduler
from medha_jax.scheduler.policies import LARSPolicy, Policy
from medha_jax.scheduler.time_budget import TimeBudgetPacker
from medha_jax.scheduler.token_budget import TokenBudgetPacker

LONG_PROMPT = 32768
"""Prompt length from which the short-first policies treat a request as long (the generated
workloads have shorts <= 8K and longs >= 128K, so any value in between splits them the same)."""


class ShortFirstPolicy(Policy):
    """Short prompts before long ones; arrival order within each class. Long partial prefills are
    the first victims under memory pressure. No space sharing (relative slack 0)."""

    name = "short_first"

    def __init__(self, long_prompt: int = LONG_PROMPT):
        self.long_prompt = long_prompt

    def key(self, request: Request, now: float) -> float:
        return request.arrival_time + (1e12 if request.prompt_len >= self.long_prompt else 0.0)

    def group_and_key(self, request: Request):
        """One group, static key (the key does not change with time): the scheduler's waiting
        index keeps the queue sorted instead of re-sorting it every iteration."""
        return 0, self.key(request, 0.0)

    def relative_slack(self, request: Request, now: float) -> float:
        return 0.0


class PaperLARSPolicy(LARSPolicy):
    """LARS with the paper's normalisation (Medha 4.1): rho = slack / w_total, w_total the predicted
    prefill time of the prompt alone; space sharing uses the same rho."""

    name = "lars_wtotal"

    def _w(self, request: Request) -> float:
        return max(self.work(request), 1e-9)

    def key(self, request: Request, now: float) -> float:
        return self.slack(request, now) / self._w(request)

    def relative_slack(self, request: Request, now: float) -> float:
        return self.slack(request, now) / self._w(request)

    def group_and_key(self, request: Request):
        """Group by w_total: (anchor - now) / w keeps its order among equal w (the index's contract)."""
        return self._w(request), self._fresh(request)[3]


@dataclass(frozen=True)
class SimPolicy:
    name: str
    description: str
    build: Callable[..., Scheduler]
    device_kind: str = "chunked"
    needs_predictor: bool = True


def _registry(policy: str, **fixed):
    def build(kv, predictor, **overrides):
        cfg = SchedulerConfig(policy=policy, **{**overrides, **fixed})
        return make_scheduler(cfg, kv, predictor)
    return build


def _custom(config_policy: str, packer: str, long_prompt: int = LONG_PROMPT):
    def build(kv, predictor, **overrides):
        cfg = SchedulerConfig(policy=config_policy, **overrides)
        p = TimeBudgetPacker(predictor) if packer == "time" else TokenBudgetPacker(chunked=packer == "chunked")
        return Scheduler(cfg, kv, ShortFirstPolicy(long_prompt), p, predictor)
    return build


def _paper_lars(kv, predictor, **overrides):
    cfg = SchedulerConfig(policy="lars", **overrides)
    policy = PaperLARSPolicy(PrefillTimeCache(predictor, cfg), cfg.deadline_k, cfg.deadline_min)
    return Scheduler(cfg, kv, policy, TimeBudgetPacker(predictor), predictor)


POLICIES: dict[str, SimPolicy] = {p.name: p for p in [
    SimPolicy("sarathi-512", "FCFS, 512-token chunks (Sarathi-Serve)", _registry("fcfs", max_num_batched_tokens=512)),
    SimPolicy("sarathi-2048", "FCFS, 2048-token chunks (Sarathi-Serve)", _registry("fcfs", max_num_batched_tokens=2048)),
    SimPolicy("vllm-2048", "FCFS, 2048-token budget, long prompts (> 1024 tokens) capped at 1024-token chunks, one per iteration (vLLM's long_prefill_token_threshold / max_long_partial_prefills)",
              _registry("fcfs", max_num_batched_tokens=2048, long_prefill_token_threshold=1024, max_long_partial_prefills=1)),
    SimPolicy("srpt-2048", "shortest remaining prompt first, aged 2000 tokens/s, 2048-token budget",
              _registry("srpt", max_num_batched_tokens=2048)),
    SimPolicy("loongserve", "FCFS, whole prompts, non-preemptive, elastic SP (LoongServe-like)",
              _registry("fcfs_nonchunked"), device_kind="elastic_sp"),
    SimPolicy("edf", "earliest TTFT deadline first, time budget, one prefill per batch",
              _registry("edf", multi_prefill=False, rho_max=0.0)),
    SimPolicy("lrs", "least remaining slack, time budget, one prefill per batch",
              _registry("lrs", multi_prefill=False, rho_max=0.0)),
    SimPolicy("lars", "LARS, one prefill per batch (no multi-prefill, no space sharing)",
              _registry("lars", multi_prefill=False, rho_max=0.0)),
    SimPolicy("medha", "LARS + multi-prefill batching + space sharing (Medha)", _registry("lars")),
    SimPolicy("slo", "EDF while feasible, Moore-Hodgson sacrifice when not, multi-prefill batching", _registry("slo")),
    SimPolicy("medha-wtotal", "medha with rho = slack / w_total as the paper writes LARS", _paper_lars),
    SimPolicy("pecsched", "short-first preemptive (PecSched-style), time budget", _custom("lars", "time")),
    SimPolicy("priority", "strict non-preemptive short-first priority, whole prompts, elastic SP",
              _custom("fcfs_nonchunked", "whole"), device_kind="elastic_sp"),
]}


def get_policy(name: str) -> SimPolicy:
    try:
        return POLICIES[name]
    except KeyError:
        raise ValueError(f"unknown simulator policy {name!r}; valid: {', '.join(POLICIES)}") from None
