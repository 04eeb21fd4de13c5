import pytest

from medha_jax.kv_cache_manager import KVCacheManager, OutOfPagesError
from tests.scheduler.factories import make_kv, make_requests


def tables(kv: KVCacheManager, r) -> list[list[int]]:
    """The request's page tables as lists (the manager keeps int32 arrays)."""
    return [list(t) for t in kv.page_tables(r)]


def test_single_group_pages_cover_positions():
    kv = make_kv(num_pages=8, page_size=4)
    (r,) = make_requests(1, prompt_len=10)
    assert kv.can_allocate(r, 10)
    kv.allocate(r, 10)  # positions [0, 10) -> 3 pages
    assert tables(kv, r) == [[0, 1, 2]]
    r.num_computed_tokens = 10
    kv.allocate(r, 2)  # [0, 12) still 3 pages
    assert tables(kv, r) == [[0, 1, 2]]
    kv.allocate(r, 3)  # [0, 13) -> 4 pages
    assert tables(kv, r) == [[0, 1, 2, 3]]
    assert (kv.num_free_pages, kv.num_total_pages) == (4, 8)
    assert kv.free(r) == 4
    assert kv.num_free_pages == 8 and tables(kv, r) == []


def test_progressive_onboarding_over_kvp_groups():
    kv = make_kv(num_pages=4, page_size=4, kvp=3, max_tokens_per_kvp_group=8)
    (r,) = make_requests(1, prompt_len=20)
    assert kv.max_tokens_per_request == 24
    assert kv.pages_for(20) == [2, 2, 1]
    kv.allocate(r, 6)
    assert tables(kv, r) == [[0, 1]]
    r.num_computed_tokens = 6
    kv.allocate(r, 14)  # up to 20: group 0 [0,8), group 1 [8,16), group 2 [16,20)
    assert tables(kv, r) == [[0, 1], [0, 1], [0]]
    assert kv.num_free_pages_per_group == [2, 2, 3]
    assert kv.num_free_pages == 7


def test_allocation_is_all_or_nothing():
    kv = make_kv(num_pages=2, page_size=4, kvp=2, max_tokens_per_kvp_group=8)
    a, b = make_requests(2, prompt_len=12)
    kv.allocate(b, 4)
    b.num_computed_tokens = 4
    kv.allocate(b, 4)  # b: group 0 full
    assert kv.num_free_pages_per_group == [0, 2]
    assert not kv.can_allocate(a, 12)
    with pytest.raises(OutOfPagesError, match="kvp group 0"):
        kv.allocate(a, 12)
    assert kv.num_free_pages_per_group == [0, 2] and not kv.holds(a)


def test_beyond_capacity_never_fits():
    kv = make_kv(num_pages=4, page_size=4)
    (r,) = make_requests(1, prompt_len=17)
    assert not kv.can_ever_fit(17) and kv.can_ever_fit(16)
    assert not kv.can_allocate(r, 17)
    with pytest.raises(OutOfPagesError, match="more than the 16"):
        kv.allocate(r, 17)
    with pytest.raises(ValueError, match="more than the 16"):
        kv.num_missing_pages(r, 17)
    assert kv.num_missing_pages(r, 16) == 4


@pytest.mark.parametrize("kwargs, msg", [
    (dict(num_pages_per_group=0, page_size=4), "num_pages_per_group"),
    (dict(num_pages_per_group=4, page_size=4, kvp=0), "kvp"),
    (dict(num_pages_per_group=4, page_size=4, kvp=2, max_tokens_per_kvp_group=6), "multiple of page_size"),
    (dict(num_pages_per_group=4, page_size=4, kvp=2, max_tokens_per_kvp_group=32), "capacity 16"),
])
def test_bad_config(kwargs, msg):
    with pytest.raises(ValueError, match=msg):
        KVCacheManager(**kwargs)


def test_free_unknown_request_is_a_no_op():
    kv = make_kv()
    (r,) = make_requests(1)
    assert kv.free(r) == 0


@pytest.mark.parametrize("kvp,m", [(1, None), (3, 8), (2, 12)])
def test_try_add_page_gives_what_allocate_gives(kvp, m):
    """The decode pass's one-page shortcut: for requests growing one position at a time, wherever
    the next position starts a page it either adds exactly the page the general path adds or
    refuses (allocating nothing), and it refuses only at a block's end or with no page free in the
    block's group, where the general path then takes over."""
    import random

    rng = random.Random(kvp)
    fast = make_kv(num_pages=6, page_size=4, kvp=kvp, max_tokens_per_kvp_group=m)
    slow = make_kv(num_pages=6, page_size=4, kvp=kvp, max_tokens_per_kvp_group=m)
    reqs = make_requests(3, prompt_len=fast.max_tokens_per_request)
    added = refused = 0
    for _ in range(400):
        r = rng.choice(reqs)
        if rng.random() < 0.05 or r.num_computed_tokens + 1 > fast.max_tokens_per_request:
            fast.free(r), slow.free(r)
            r.num_computed_tokens = 0
            continue
        if r.request_id not in fast.covered or r.num_computed_tokens < fast.covered[r.request_id]:
            ok = slow.try_allocate(r, 1)  # a first page, or no page needed: the general path on both
            assert fast.try_allocate(r, 1) is ok
        else:
            ok = slow.try_allocate(r, 1)
            if fast.try_add_page(r):
                assert ok
                added += 1
            else:
                refused += 1
                at_block_end = fast.covered[r.request_id] % fast.max_tokens_per_kvp_group == 0
                assert at_block_end or not ok
                assert fast.try_allocate(r, 1) is ok
        assert fast.page_tables(r) == slow.page_tables(r)
        assert fast.covered.get(r.request_id) == slow.covered.get(r.request_id)
        assert fast.num_free_pages_per_group == slow.num_free_pages_per_group
        if ok:
            r.num_computed_tokens += 1
    assert added and refused


@pytest.mark.parametrize("kvp,m", [(1, None), (3, 8), (2, 12)])
def test_try_allocate_shortcut_gives_what_allocate_gives(kvp, m):
    """try_allocate takes a shortcut when every new page lands in one group; on random growth
    steps it must leave the same tables, coverage and free counts as the general path, and
    refuse (allocating nothing) exactly when can_allocate says no."""
    import random

    rng = random.Random(kvp)
    fast = make_kv(num_pages=10, page_size=4, kvp=kvp, max_tokens_per_kvp_group=m)
    slow = make_kv(num_pages=10, page_size=4, kvp=kvp, max_tokens_per_kvp_group=m)
    reqs = make_requests(3, prompt_len=fast.max_tokens_per_request)
    for _ in range(300):
        r = rng.choice(reqs)
        if rng.random() < 0.1:
            fast.free(r), slow.free(r)
            r.num_computed_tokens = 0
            continue
        n = rng.choice([1, 1, 1, 2, 3, 5, 9])
        if r.num_computed_tokens + n > fast.max_tokens_per_request:
            continue
        ok = slow.can_allocate(r, n)
        if ok:
            slow.allocate(r, n)
        assert fast.try_allocate(r, n) is ok
        assert fast.page_tables(r) == slow.page_tables(r)
        assert fast.covered.get(r.request_id) == slow.covered.get(r.request_id)
        assert fast.num_free_pages_per_group == slow.num_free_pages_per_group
        if ok:
            r.num_computed_tokens += n
