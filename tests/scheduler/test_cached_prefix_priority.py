"""The priority policies see a waiting request's cached prefix: it is ranked, given its derived
deadline and judged feasible by the work it has left, not by its whole prompt.

Scene: a 32,000-token document is prefilled once and stays in the prefix cache; then a follow-up
(the document + 300 new tokens) and an unrelated 2,000-token prompt wait side by side. With the
linear predictor below the document alone takes ~2 s, the follow-up's new tokens ~20 ms.
"""

import pytest

from medha_jax.kv_cache_manager import KVCacheManager
from medha_jax.request import Request
from medha_jax.sampling_params import SamplingParams
from medha_jax.scheduler import RuntimePredictor, SchedulerConfig, make_scheduler
from tests.scheduler.factories import sample_all

COEFS = {"const": 4e-3, "tokens": 6e-5, "chunk_kv": 2e-10, "chunk_sq": 1e-10, "decodes": 2e-5, "decode_kv": 1e-8}
DOC = list(range(10_000, 42_000))
PAGE = 16


def _req(rid, tokens, arrival, deadline=None):
    return Request(rid, list(tokens), SamplingParams(max_tokens=1), arrival, ttft_deadline=deadline)


def _scheduler(policy, prefix_caching=True, **config):
    kv = KVCacheManager(4096, PAGE, prefix_caching=prefix_caching)
    return make_scheduler(SchedulerConfig(policy=policy, prefill_cache_dir=None, **config), kv,
                          RuntimePredictor(COEFS))


def _run_until_idle(s, t):
    while s.has_unfinished:
        batch = s.schedule(t)
        t += 0.05
        sample_all(s, batch, t)
    return t


def _with_document_cached(policy, prefix_caching=True, **config):
    s = _scheduler(policy, prefix_caching, **config)
    s.add_request(_req("doc", DOC + [1] * PAGE, 0.0))
    return s, _run_until_idle(s, 0.0)


@pytest.mark.parametrize("policy", ["srpt", "edf", "slo"])  # lrs / lars: by slack, checked below
def test_a_follow_up_with_a_cached_prefix_goes_before_a_longer_new_prompt(policy):
    s, t = _with_document_cached(policy)
    follow = _req("follow", DOC + [2] * 300, t)
    other = _req("other", range(50_000, 52_000), t)
    s.add_request(follow)
    s.add_request(other)
    assert follow.num_cached_tokens == len(DOC)  # peeked on arrival; no pages taken
    assert not s.kv.holds(follow)
    assert [r.request_id for r in s.prefill_candidates(t)] == ["follow", "other"]


@pytest.mark.parametrize("policy", ["edf", "lrs", "lars", "slo"])
def test_remaining_work_and_the_derived_deadline_count_only_the_uncached_tokens(policy):
    s, t = _with_document_cached(policy)
    follow = _req("follow", DOC + [2] * 300, t)
    s.add_request(follow)
    cache = s.policy.cache
    left = cache.total_time(len(DOC) + 300) - cache.total_time(len(DOC))
    assert s.policy.remaining(follow) == pytest.approx(left)
    assert left < 0.05 < cache.total_time(len(DOC) + 300)
    assert s.policy.deadline(follow) == max(1.5 * left, 0.5) == 0.5
    assert s.policy.slack(follow, t) == pytest.approx(0.5 - left)


def test_slo_does_not_give_up_a_follow_up_whose_whole_prompt_would_miss_its_deadline():
    s, t = _with_document_cached("slo")
    follow = _req("follow", DOC + [2] * 300, t, deadline=1.0)  # the whole prompt alone: ~2 s
    other = _req("other", range(50_000, 52_000), t, deadline=5.0)
    s.add_request(follow)
    s.add_request(other)
    assert [r.request_id for r in s.prefill_candidates(t)] == ["follow", "other"]
    assert follow not in s.policy.set_aside
    batch = s.schedule(t)
    assert [(q.request_id, q.start_pos) for q in batch.seqs][0] == ("follow", len(DOC))


def test_without_prefix_caching_the_whole_prompt_counts():
    s, t = _with_document_cached("srpt", prefix_caching=False)
    follow = _req("follow", DOC + [2] * 300, t)
    s.add_request(_req("other", range(50_000, 52_000), t))
    s.add_request(follow)
    assert follow.num_cached_tokens == 0
    assert [r.request_id for r in s.prefill_candidates(t)] == ["other", "follow"]


def test_a_request_passed_over_for_several_iterations_counts_its_hit_once():
    # fcfs with a 512-token budget: a 2,000-token prompt ahead of the follow-up fills four
    # iterations; each offers the follow-up its prefix (the budget is gone after the offer) and
    # takes it back. The hit counters count the admission only.
    s, t = _with_document_cached("fcfs", max_num_batched_tokens=512)
    hits_before = s.kv.prefix.hit_tokens
    s.add_request(_req("hog", range(50_000, 52_000), t))
    follow = _req("follow", DOC + [2] * 40, t + 0.01)
    s.add_request(follow)
    passed_over = 0
    while follow in s.waiting:
        batch = s.schedule(t)
        passed_over += follow in s.waiting
        t += 0.05
        sample_all(s, batch, t)
    assert passed_over >= 3
    assert follow.num_cached_tokens == len(DOC)
    assert s.kv.prefix.hit_tokens - hits_before == len(DOC)
