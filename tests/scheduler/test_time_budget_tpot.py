"""A live request's TPOT target tightens the time-budget packer's iteration budget."""

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
