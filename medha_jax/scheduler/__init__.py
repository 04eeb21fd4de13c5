"""The scheduler package: policy + packer + KV pages -> one `ScheduledBatch` per iteration.

  make_scheduler(config, kv_manager, predictor) -> Scheduler(policy, packer)
    fcfs             FCFSPolicy + TokenBudgetPacker(chunked=True)    (Sarathi)
    fcfs_nonchunked  FCFSPolicy + TokenBudgetPacker(chunked=False)   (convoy baseline)

Pure Python, no JAX: the engine and the simulator run the same code.
"""

from __future__ import annotations

from medha_jax.kv_cache_manager import KVCacheManager
from medha_jax.scheduler.base import Scheduler
from medha_jax.scheduler.config import POLICIES, SchedulerConfig
from medha_jax.scheduler.policies import FCFSPolicy
from medha_jax.scheduler.records import Composition, IterationRecord
from medha_jax.scheduler.token_budget import TokenBudgetPacker


def make_scheduler(config: SchedulerConfig, kv_manager: KVCacheManager, predictor=None, *,
                   max_model_len: int | None = None, model_config=None, mesh_spec=None) -> Scheduler:
    """A `Scheduler` for `config.policy`; ValueError listing the valid names otherwise.

    `model_config` and `mesh_spec` are accepted for the engine's convenience (they identify the
    predictor profile the engine should load); the scheduler itself only needs `predictor`."""
    name = config.policy
    if name == "fcfs":
        return Scheduler(config, kv_manager, FCFSPolicy(), TokenBudgetPacker(chunked=True), predictor,
                         max_model_len=max_model_len)
    if name == "fcfs_nonchunked":
        return Scheduler(config, kv_manager, FCFSPolicy(), TokenBudgetPacker(chunked=False), predictor,
                         max_model_len=max_model_len)
    raise ValueError(f"unknown or not yet available scheduling policy {name!r}; valid: {', '.join(POLICIES)}")


__all__ = ["Composition", "IterationRecord", "POLICIES", "Scheduler", "SchedulerConfig", "make_scheduler"]
