"""The scheduler package: policy + packer + KV pages -> one `ScheduledBatch` per iteration.

  make_scheduler(config, kv_manager, predictor) -> Scheduler(policy, packer)
    fcfs             FCFSPolicy + TokenBudgetPacker(chunked=True)     (Sarathi)
    fcfs_nonchunked  FCFSPolicy + TokenBudgetPacker(chunked=False)    (convoy baseline)
    srpt             SRPTPolicy(aging) + TokenBudgetPacker(chunked=True)
    edf / lrs / lars / slo  EDF/LRS/LARS/SLOPolicy(PrefillTimeCache(predictor)) + TimeBudgetPacker(predictor)

Modules: config (SchedulerConfig), base (Scheduler: queues, pages, preemption, records),
policies (priority order), token_budget / time_budget (what goes into a batch), chunking (the
chunk-size binary search), stops (when a request ends), predictor (RuntimePredictor, profiles), kvp_cost (the slowest kvp
group's predicted time), prefill_cache (Algorithm 3),
records (Composition, IterationRecord), replay (a discrete-event driver on a simulated clock).
Pure Python, no JAX: the engine and the simulator run the same code.
"""

from __future__ import annotations

from medha_jax.kv_cache_manager import KVCacheManager
from medha_jax.scheduler.base import Scheduler
from medha_jax.scheduler.config import POLICIES, SchedulerConfig
from medha_jax.scheduler.policies import EDFPolicy, FCFSPolicy, LARSPolicy, LRSPolicy, SLOPolicy, SRPTPolicy
from medha_jax.scheduler.predictor import ProfileKey, RuntimePredictor
from medha_jax.scheduler.prefill_cache import PrefillTimeCache
from medha_jax.scheduler.records import Composition, IterationRecord
from medha_jax.scheduler.time_budget import TimeBudgetPacker
from medha_jax.scheduler.token_budget import TokenBudgetPacker

_DEADLINE_POLICIES = {"edf": EDFPolicy, "lrs": LRSPolicy, "lars": LARSPolicy, "slo": SLOPolicy}


def make_scheduler(config: SchedulerConfig, kv_manager: KVCacheManager, predictor: RuntimePredictor | None = None,
                   *, prefill_cache: PrefillTimeCache | None = None, max_model_len: int | None = None,
                   eos_token_ids: frozenset[int] = frozenset()) -> Scheduler:
    """A `Scheduler` for `config.policy`; ValueError listing the valid names otherwise.

    edf / lrs / lars need `predictor` (fcfs uses it, when given, only to fill
    `batch.predicted_time`). `prefill_cache` defaults to a fresh one built from the predictor
    (persisted under config.prefill_cache_dir when set). `max_model_len` and `eos_token_ids`
    are the engine's stop facts (`stops.stop_status`); a simulator leaves them unset."""
    name = config.policy
    if name in ("fcfs", "fcfs_nonchunked"):
        packer = TokenBudgetPacker(chunked=name == "fcfs")
        return Scheduler(config, kv_manager, FCFSPolicy(), packer, predictor, max_model_len=max_model_len,
                         eos_token_ids=eos_token_ids)
    if name == "srpt":
        return Scheduler(config, kv_manager, SRPTPolicy(config.srpt_aging), TokenBudgetPacker(chunked=True),
                         predictor, max_model_len=max_model_len, eos_token_ids=eos_token_ids)
    if name in _DEADLINE_POLICIES:
        if predictor is None:
            raise ValueError(
                f"policy {name!r} sizes chunks with a runtime predictor; pass one (fit from a profile), "
                f"or use policy 'fcfs'"
            )
        cache = prefill_cache if prefill_cache is not None else PrefillTimeCache(predictor, config)
        policy = _DEADLINE_POLICIES[name](cache, config.deadline_k, config.deadline_min)
        return Scheduler(config, kv_manager, policy, TimeBudgetPacker(predictor), predictor,
                         max_model_len=max_model_len, eos_token_ids=eos_token_ids)
    raise ValueError(f"unknown scheduling policy {name!r}; valid: {', '.join(POLICIES)}")


__all__ = [
    "Composition", "IterationRecord", "POLICIES", "PrefillTimeCache", "ProfileKey", "RuntimePredictor",
    "Scheduler", "SchedulerConfig", "make_scheduler",
]
