"""Prefix reuse in the simulator: segment token ids, multi-turn long-document conversations, the
closed loop (a turn arrives after the previous answer + think time), and a device that is only
charged for the tokens the prefix cache did not hold."""

from dataclasses import replace

import pytest

from medha_jax.kv_cache_manager import KVCacheManager
from medha_jax.scheduler import SchedulerConfig, make_scheduler
from medha_jax.sim.device_models import LinearDevice
from medha_jax.sim.driver import simulate
from medha_jax.sim.experiment import Experiment
from medha_jax.sim.profiles import load_profile
from medha_jax.sim.tokens import SEGMENT_STRIDE, SegmentTokens
from medha_jax.sim.workload import RequestSpec, WorkloadSpec, generate, write_trace

CHAT = WorkloadSpec(qps=0.2, duration=120, long_fraction=0.0, seed=3, conversation_rate=0.05,
                    doc_min=2048, doc_max=6144, documents=2, turns=3.0, think=5.0)


def _tokens(spec: RequestSpec) -> list[int]:
    return [s * SEGMENT_STRIDE + i for s, n in spec.segments for i in range(n)]


def test_segment_tokens_slice_and_index_like_the_list_they_stand_for():
    segs = ((3, 5), (70, 2), (3, 4))
    full = [3 * SEGMENT_STRIDE + i for i in range(5)] + [70 * SEGMENT_STRIDE + i for i in range(2)] + \
        [3 * SEGMENT_STRIDE + i for i in range(4)]
    t = SegmentTokens(segs)
    assert len(t) == 11 and list(t) == full and t[-1] == full[-1]
    for a in range(12):
        for b in range(12):
            assert t[a:b] == full[a:b]
    with pytest.raises(IndexError):
        t[11]


def test_conversations_are_deterministic_and_leave_the_other_requests_of_a_seed_alone():
    specs = generate(CHAT)
    assert specs == generate(CHAT)
    assert specs != generate(replace(CHAT, seed=4))
    plain = generate(replace(CHAT, conversation_rate=0.0))
    assert specs[:len(plain)] == plain
    turns = specs[len(plain):]
    assert len(turns) > len([s for s in turns if s.follows is None]) > 1


def test_each_turn_resends_the_previous_prompt_token_for_token_and_documents_are_shared():
    specs = generate(CHAT)
    follow_ups = [(i, s) for i, s in enumerate(specs) if s.follows is not None]
    assert follow_ups
    for i, s in follow_ups:
        prev = specs[s.follows]
        assert s.follows == i - 1 and prev.segments is not None
        assert _tokens(s)[:prev.prompt_tokens] == _tokens(prev)
        assert s.reused_prefix == prev.prompt_tokens
        assert s.prompt_tokens == len(_tokens(s)) > prev.prompt_tokens + prev.output_tokens  # + answer + question
    openers = [s for s in specs if s.segments is not None and s.follows is None]
    docs = {}
    for s in openers:  # two documents for several conversations: the same document, the same tokens
        (doc, length) = s.segments[0]
        assert CHAT.doc_min <= length <= CHAT.doc_max
        docs.setdefault(doc, set()).add(tuple(_tokens(s)[:length]))
    assert len(docs) == 2 and all(len(v) == 1 for v in docs.values())
    with pytest.raises(ValueError, match="plain requests only"):
        write_trace("/dev/null", specs)


def test_a_turn_arrives_after_the_previous_answer_plus_think_time_and_never_without_it():
    doc = ((0, 1000),)
    specs = [RequestSpec(0.0, 1010, 5, segments=doc + ((1 << 20, 10),)),
             RequestSpec(2.5, 1030, 3, segments=doc + ((1 << 20, 10), (1 << 20 | 1, 5), (1 << 20 | 2, 15)),
                         follows=0, reused_prefix=1010)]
    sched = make_scheduler(SchedulerConfig(policy="fcfs", max_num_batched_tokens=512),
                           KVCacheManager(256, 16, prefix_caching=True))
    res = simulate(sched, specs, LinearDevice(1e-3))
    first, second = res.requests
    assert second.arrival_time == pytest.approx(first.token_times[-1] + 2.5)
    assert second.num_cached_tokens == 1008  # the previous prompt's full pages
    cut = simulate(make_scheduler(SchedulerConfig(policy="fcfs"), KVCacheManager(256, 16)), specs,
                   LinearDevice(1e-3), horizon=first.token_times[-1] - 0.1)
    assert [r.request_id for r in cut.requests] == ["r0"] and cut.not_arrived == 1


def _experiment(kv_tokens):
    return Experiment(load_profile("linear:1e-5", kv_tokens=kv_tokens), config={"prefill_cache_dir": None})


def test_cache_hits_are_not_charged_to_the_device():
    specs = generate(CHAT)
    exp = _experiment(1 << 20)
    on = exp.run("slo", specs, prefix_caching=True)
    off = exp.run("slo", specs, prefix_caching=False)
    assert on.result.num_preemptions == off.result.num_preemptions == 0
    assert len(on.result.requests) == len(off.result.requests) == len(specs)  # everything ran to the end
    hits = on.summary["device"]["prefix_hit_tokens"]
    assert hits > 0.5 * sum(s.reused_prefix for s in specs)
    assert off.summary["device"]["prefix_hit_tokens"] == 0
    assert off.result.batch_tokens - on.result.batch_tokens == hits  # linear device: tokens are time
    assert off.result.busy_time - on.result.busy_time == pytest.approx(hits * 1e-5)
    assert on.summary["follow_up"]["ttft_p50"] < off.summary["follow_up"]["ttft_p50"]


def test_a_finite_pool_evicts_cached_documents():
    specs = generate(replace(CHAT, documents=0))
    roomy = _experiment(1 << 20).run("slo", specs, prefix_caching=True).summary["device"]
    tight = _experiment(32_768).run("slo", specs, prefix_caching=True).summary["device"]
    assert roomy["prefix_evicted_tokens"] == 0
    assert tight["prefix_evicted_tokens"] > 0
    assert tight["prefix_hit_tokens"] < roomy["prefix_hit_tokens"]
