"""Prefix caching in the KV manager and the scheduler, no device: matching, sharing, eviction.

The last test drives random requests with shared prefixes through the scheduler under memory
pressure and checks the page bookkeeping after every step: a page's refcount is the number of
page tables holding it, parked (evictable) pages are held by nobody, and every cache entry
points at a page whose content it describes (held or parked, never handed to other KV).
"""

import random

import pytest

from medha_jax.kv_cache_manager import KVCacheManager
from tests.scheduler.factories import make_scheduler, mark_computed, request_of, run_shared_prefix_traffic


def test_a_second_request_reuses_the_full_pages_of_a_shared_prefix():
    kv = KVCacheManager(16, page_size=4, prefix_caching=True)
    a = request_of("a", range(100, 110))  # pages [100..103], [104..107], tail 108, 109
    mark_computed(kv, a, 10)
    b = request_of("b", list(range(100, 108)) + [7, 7, 7])
    assert kv.match_prefix(b) == 8  # the two full pages; b's own tail is computed
    assert kv.page_tables(b) == [kv.page_tables(a)[0][:2]]
    assert [kv.allocators[0].refcount(p) for p in kv.page_tables(a)[0]] == [2, 2, 1]
    c = request_of("c", [100, 101, 102, 9, 9])  # differs inside the first page: nothing to reuse
    assert kv.match_prefix(c) == 0 and not kv.holds(c)


def test_a_fully_cached_prompt_still_computes_its_last_token():
    kv = KVCacheManager(16, page_size=4, prefix_caching=True)
    a = request_of("a", range(8))
    mark_computed(kv, a, 8)
    again = request_of("again", range(8))
    assert kv.match_prefix(again) == 4  # 8 tokens: one page reused, the last page recomputed


def test_freed_pages_stay_reusable_until_memory_is_needed_then_leave_the_cache():
    kv = KVCacheManager(4, page_size=4, prefix_caching=True)
    a = request_of("a", range(13))
    mark_computed(kv, a, 13)  # 4 pages, 3 full ones cached
    kv.free(a)
    assert kv.num_free_pages == 4 and kv.allocators[0].num_parked == 3
    b = request_of("b", range(13))
    assert kv.match_prefix(b) == 12
    kv.free(b)
    big = request_of("big", range(500, 516))
    kv.allocate(big, 16)  # every page, the parked ones evicted
    assert len(kv.prefix) == 0
    kv.free(big)
    assert kv.match_prefix(request_of("c", range(13))) == 0


def test_a_hash_collision_cannot_serve_another_prompts_kv():
    kv = KVCacheManager(8, page_size=4, prefix_caching=True)
    a = request_of("a", range(9))
    mark_computed(kv, a, 9)
    (h, (g, page, parent, toks)), *_ = kv.prefix._entries.items()
    kv.prefix._entries[h] = (g, page, parent, (1, 2, 3, 4))  # same key, other tokens: a forged collision
    assert kv.match_prefix(request_of("b", range(9))) == 0


def test_without_prefix_caching_nothing_is_matched():
    kv = KVCacheManager(8, page_size=4)
    a = request_of("a", range(9))
    mark_computed(kv, a, 9)
    assert kv.match_prefix(request_of("b", range(9))) == 0 and kv.prefix is None


def test_kvp_groups_share_cached_pages_group_by_group():
    kv = KVCacheManager(8, page_size=4, kvp=2, max_tokens_per_kvp_group=8, prefix_caching=True)
    a = request_of("a", range(15))
    mark_computed(kv, a, 15)  # group 0: positions 0-7 (2 pages), group 1: 8-14
    b = request_of("b", range(15))
    assert kv.match_prefix(b) == 12
    assert kv.page_tables(b) == [kv.page_tables(a)[0], kv.page_tables(a)[1][:1]]


def _check_pages(sched):
    kv = sched.kv
    holders: dict[int, int] = {}
    for tables in kv.tables.values():
        for p in tables[0]:
            holders[p] = holders.get(p, 0) + 1
    alloc = kv.allocators[0]
    for p in range(alloc.num_total):
        assert alloc.refcount(p) == holders.get(p, 0), p
    assert not set(alloc._parked) & set(holders)
    for h, (g, p, _, toks) in kv.prefix._entries.items():
        assert p in alloc._cached and (p in holders or p in alloc._parked)
    for r in sched.waiting:
        assert not kv.holds(r) and r.num_computed_tokens == 0


@pytest.mark.parametrize("policy", ["fcfs", "srpt"])
def test_random_shared_prefixes_under_memory_pressure_keep_the_page_bookkeeping_exact(policy):
    s = make_scheduler(policy, num_pages=24, page_size=8, max_num_batched_tokens=48)
    s.kv = KVCacheManager(24, page_size=8, prefix_caching=True)
    reqs = run_shared_prefix_traffic(s, random.Random(3), num_docs=4, steps=400, arrive_until=150, abort_every=37,
                                     abort_at=5, after_output=lambda s, b: _check_pages(s))
    assert not s.has_unfinished
    assert sum(r.num_cached_tokens for r in reqs) > 0 and s.num_preemptions > 0
    assert all(r.is_finished for r in reqs)
    assert s.kv.num_free_pages == s.kv.num_total_pages
