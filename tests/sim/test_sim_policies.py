"""Every compared policy runs on a small mixed workload; the PecSched-style ones starve long requests."""

import pytest

from medha_jax.request import Request
from medha_jax.sampling_params import SamplingParams
from medha_jax.sim.experiment import Experiment
from medha_jax.sim.policies import POLICIES, ShortFirstPolicy, get_policy
from medha_jax.sim.profiles import load_profile
from medha_jax.sim.workload import RequestSpec, WorkloadSpec, generate


@pytest.fixture(scope="module")
def exp():
    return Experiment(load_profile("llama3-8b-a100x16-tp8-spp2"))


@pytest.fixture(scope="module")
def specs():
    return generate(WorkloadSpec(qps=0.5, duration=120, long_fraction=0.05, long_min=131072, long_max=200_000, seed=4))


@pytest.mark.parametrize("policy", list(POLICIES))
def test_every_policy_serves_a_mixed_workload(exp, specs, policy):
    run = exp.run(policy, specs, horizon=600)
    s = run.summary
    assert s["short"]["first_token"] == s["short"]["requests"] > 0
    assert s["all"]["completed"] > 0.8 * s["all"]["requests"]
    assert run.result.iterations > 0


def test_short_first_key_orders_classes_then_arrival():
    p = ShortFirstPolicy(long_prompt=100)
    mk = lambda i, n, a: Request(f"r{i}", range(n), SamplingParams(max_tokens=1), a)  # noqa: E731
    reqs = [mk(0, 500, 0.0), mk(1, 10, 2.0), mk(2, 10, 1.0), mk(3, 500, -1.0)]
    assert [r.request_id for r in p.order(reqs, 5.0)] == ["r2", "r1", "r3", "r0"]


def _long_progress(exp, policy, specs, rid):
    done = []
    run = exp.run(policy, specs, horizon=50.0,
                  observer=lambda s, e, b: done.extend(x.num_tokens for x in b.seqs if x.request_id == rid))
    return run, sum(done)


@pytest.mark.parametrize("policy", ["pecsched", "priority"])
def test_short_first_policies_starve_long_requests_under_a_stream_of_shorts(policy):
    """A saturating stream (0.5 s of short work every 0.5 s): short-first never has a moment without
    a short waiting, so the long request (5 s of work) never runs; LARS gives it a share."""
    exp = Experiment(load_profile("linear:1e-4"))
    specs = [RequestSpec(0.25, 50_000, 1, 16.0)] + [RequestSpec(0.5 * i, 5_000, 1, 1.0) for i in range(100)]
    run, progress = _long_progress(exp, policy, specs, "r1")  # r1: the long one, second by arrival
    long_ = next(o for o in run.outcomes if o.prompt == 50_000)
    assert long_.missed and long_.ttft is None and progress < 0.02 * 50_000  # crumbs from leftover budget
    assert not any(o.missed for o in run.outcomes if o.prompt != 50_000)
    _, lars_progress = _long_progress(exp, "medha", specs, "r1")
    assert lars_progress > 10_000


def test_unknown_policy_lists_the_valid_ones():
    with pytest.raises(ValueError, match="medha"):
        get_policy("sjf")


def test_kvp_deployment_spreads_a_long_request_over_groups():
    """kvp=2 with 64K tokens per group: a 100K prompt onboards the second group part-way."""
    from medha_jax.sim.profiles import load_profile as lp

    prof = lp("model=llama3-8b,device=h100,tp=8,spp=2,kvp=2,kvp_tokens=65536")
    kv = prof.kv_manager()
    assert kv.kvp == 2 and kv.max_tokens_per_kvp_group == 65536
    exp = Experiment(prof)
    specs = [RequestSpec(0.0, 100_000, 4), RequestSpec(1.0, 2000, 4)]
    groups = set()

    def observer(start, tick_end, batch):
        for s in batch.seqs:
            if s.request_id == "r0":
                groups.add(len(s.page_tables))

    run = exp.run("medha", specs, observer=observer)
    assert all(o.finished for o in run.outcomes)
    assert groups == {1, 2}
