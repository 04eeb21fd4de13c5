"""One experiment: a workload, a device profile, a policy -> outcomes and a summary.

  specs + Profile --assign_deadlines--> specs with TTFT deadlines (the trace's, or
        D = max(deadline_k * (w(prompt) - w(reused prefix)), deadline_min), w = prefill time alone
        on the deployment's device, the reused prefix what an earlier turn of the conversation
        sent (0 for other requests); the same D for every policy, and the scheduler is given it)
  policy name --SimPolicy.build(KV manager [+ prefix cache], predictor, config overrides)--> Scheduler
  Scheduler + device --simulate--> SimResult --metrics--> outcomes, summary (+ "device": tokens
        computed, busy seconds, prefix-cache hit tokens)

The scheduler's runtime predictor is a RuntimePredictor fitted to the simulated device (or the
measured profile itself). `Experiment` caches what policies share (that predictor, the reference
prefill times), so a
policy sweep builds them once. Deterministic: no wall-clock or unseeded randomness reaches the
simulated timeline. Pure Python.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from medha_jax.sim.driver import SimResult, simulate
from medha_jax.sim.metrics import device_summary, offered_load, request_outcomes, summarize
from medha_jax.sim.policies import get_policy
from medha_jax.sim.predictors import fit_predictor
from medha_jax.sim.profiles import Profile
from medha_jax.sim.workload import RequestSpec


@dataclass
class PolicyRun:
    policy: str
    result: SimResult
    outcomes: list
    summary: dict


class Experiment:
    def __init__(self, profile: Profile, *, t_target: float = 0.05, deadline_k: float = 1.5,
                 deadline_min: float = 0.5, seed: int = 0, config: dict | None = None,
                 prefix_caching: bool = False):
        self.profile = profile
        self.prefix_caching = prefix_caching
        self.t_target = t_target
        self.deadline_k, self.deadline_min = deadline_k, deadline_min
        # prefill-time caches stay in memory: a simulation leaves nothing behind on disk
        self.depth = getattr(profile.device, "depth", 1)
        self.config = {"t_target": t_target, "deadline_k": deadline_k, "deadline_min": deadline_min,
                       "prefill_cache_dir": None, "pipeline_depth": self.depth, **(config or {})}
        if hasattr(profile.device, "predictor"):  # a measured profile already is a predictor
            self.predictor, self.predictor_info = profile.device.predictor, {"kind": "measured profile"}
        else:
            self.predictor, info = fit_predictor(profile.group_device or profile.device, seed=seed)
            self.predictor_info = {"kind": "fitted", **info}

    def work(self, prompt_tokens: int) -> float:
        """Seconds the prompt takes alone on the deployment (adaptive chunks, each tick within the
        scheduler's budget t_target / spp)."""
        return self.profile.device.prefill_alone(prompt_tokens, self.t_target / self.depth)

    def assign_deadlines(self, specs: list[RequestSpec]) -> list[RequestSpec]:
        return [s if s.ttft_deadline is not None else
                replace(s, ttft_deadline=max(self.deadline_k * (self.work(s.prompt_tokens) - self.work(s.reused_prefix)),
                                             self.deadline_min))
                for s in specs]

    def offered_load(self, specs: list[RequestSpec], horizon: float) -> dict:
        return offered_load(specs, self.work, horizon)

    def run(self, policy: str, specs: list[RequestSpec], *, horizon: float | None = None, observer=None,
            prefix_caching: bool | None = None, settle: bool = False) -> PolicyRun:
        """One policy over `specs`; prefix_caching None: the experiment's setting; settle: run past
        the horizon until every admitted request's deadline is decided (`simulate`)."""
        pol = get_policy(policy)
        specs = self.assign_deadlines(specs)
        caching = self.prefix_caching if prefix_caching is None else prefix_caching
        self.predictor.reset_correction()  # shared by the runs: each starts where a fresh engine would
        sched = pol.build(self.profile.kv_manager(prefix_caching=caching), self.predictor, **self.config)
        result = simulate(sched, specs, self.profile.device_for(pol.device_kind), horizon=horizon, observer=observer,
                          settle=settle)
        outcomes = request_outcomes(result, self.work)
        summary = summarize(outcomes, result.horizon, tpot_target=self.t_target)
        summary["device"] = device_summary(result, caching)
        return PolicyRun(policy, result, outcomes, summary)
