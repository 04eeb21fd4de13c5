"""A live request's TPOT target tightens the time-budget packer's iteration budget."""

import pytest

from medha_jax.kv_cache_manager import KVCacheManager
from medha_jax.request import Request, RequestStatus
from medha_jax.sampling_params import SamplingParams
from medha_jax.scheduler import RuntimePredictor, SchedulerConfig, make_scheduler


def _req(rid, n, tpot=None):
    return Request(rid, list(range(n)), SamplingParams(max_tokens=4), arrival_time=0.0, tpot_target=tpot)


def test_budget_is_the_tightest_live_tpot_target():
    pred = RuntimePredictor({"const": 1e-3, "tokens": 1e-4})  # 0.1 ms per token
    sched = make_scheduler(SchedulerConfig(policy="lars", t_target=0.05, chunk_granularity=1, min_chunk=1,
                                           accept_within=0.0),
                           KVCacheManager(4096, 16), pred)
    assert sched.t_target == 0.05
    long = _req("long", 10_000)
    tight = _req("tight", 8, tpot=0.011)
    sched.add_request(long)
    sched.add_request(tight)
    assert sched.t_target == 0.011
    batch = sched.schedule(0.0)
    assert batch.predicted_time <= 0.011 + 1e-12
    assert sum(s.num_tokens for s in batch.seqs) <= 100  # (0.011 - 0.001) / 1e-4
    sched.finish(tight, RequestStatus.FINISHED_ABORTED)
    assert sched.t_target == 0.05


def test_a_pipelined_engine_gives_each_tick_its_share_of_the_token_target():
    """With spp stages in lockstep a decode's next token takes spp ticks, so each tick (iteration)
    gets t_target / spp; the per-token target itself, and a request's TPOT target, stay per token."""
    pred = RuntimePredictor({"const": 1e-3, "tokens": 1e-4})
    cfg = dict(policy="lars", t_target=0.05, chunk_granularity=1, min_chunk=1, accept_within=0.0)
    one = make_scheduler(SchedulerConfig(**cfg), KVCacheManager(4096, 16), pred)
    two = make_scheduler(SchedulerConfig(**cfg, pipeline_depth=2), KVCacheManager(4096, 16), pred)
    assert (one.t_target, two.t_target, two.token_target) == (0.05, 0.025, 0.05)
    sizes = []
    for sched in (one, two):
        sched.add_request(_req("long", 10_000))
        batch = sched.schedule(0.0)
        sizes.append(sum(s.num_tokens for s in batch.seqs))
        assert batch.predicted_time <= sched.t_target + 1e-12
    assert sizes == [490, 240]  # (0.05 - 0.001) / 1e-4 and (0.025 - 0.001) / 1e-4
    two.add_request(_req("tight", 8, tpot=0.02))
    assert two.t_target == 0.01


def test_pipeline_depth_must_be_a_stage_count():
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="pipeline_depth"):
            SchedulerConfig(policy="lars", pipeline_depth=bad)
    assert SchedulerConfig(policy="lars").depth == 1
