import pytest
from hypothesis import given, settings, strategies as st

from medha_jax.page_allocator import OutOfPagesError, PageAllocator, PageAllocatorError


def test_fresh_allocator_hands_out_lowest_ids_first():
    a = PageAllocator(8)
    assert a.allocate(3) == [0, 1, 2]
    assert a.allocate(2) == [3, 4]
    assert (a.num_free, a.num_used, a.num_total) == (3, 5, 8)


def test_freed_pages_are_reused_in_order():
    a = PageAllocator(8)
    pages = a.allocate(3)
    a.allocate(1)
    a.free(pages)
    assert a.allocate(3) == [0, 1, 2]


def test_out_of_pages_raises_and_allocates_nothing():
    a = PageAllocator(4)
    a.allocate(3)
    assert not a.can_allocate(2)
    with pytest.raises(OutOfPagesError, match="asked for 2 pages, 1 of 4 free"):
        a.allocate(2)
    assert a.num_free == 1


def test_double_free_is_an_error_and_changes_nothing():
    a = PageAllocator(4)
    pages = a.allocate(2)
    a.free(pages)
    with pytest.raises(PageAllocatorError, match="double free"):
        a.free([pages[0]])
    with pytest.raises(PageAllocatorError, match="double free"):
        a.free([a.allocate(1)[0], 3])  # 3 is free: nothing may be released
    assert a.num_free == 3


def test_refcounts_keep_shared_pages_until_last_owner():
    a = PageAllocator(2)
    (p,) = a.allocate(1)
    a.incref(p)
    assert a.refcount(p) == 2
    a.decref(p)
    assert a.num_free == 1
    a.decref(p)
    assert a.num_free == 2 and a.refcount(p) == 0
    with pytest.raises(PageAllocatorError, match="incref on free page"):
        a.incref(p)


def test_bad_arguments():
    with pytest.raises(ValueError, match="num_pages"):
        PageAllocator(0)
    a = PageAllocator(2)
    with pytest.raises(PageAllocatorError, match="out of range"):
        a.decref(5)
    with pytest.raises(ValueError, match="negative"):
        a.allocate(-1)
    assert a.allocate(0) == []


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(0, 5)), max_size=60))
def test_never_hands_out_a_page_twice(ops):
    a = PageAllocator(10)
    held: list[list[int]] = []
    for alloc, n in ops:
        if alloc:
            if a.can_allocate(n):
                held.append(a.allocate(n))
            else:
                with pytest.raises(OutOfPagesError):
                    a.allocate(n)
        elif held:
            a.free(held.pop(n % len(held)))
        flat = [p for h in held for p in h]
        assert len(flat) == len(set(flat))
        assert a.num_free == 10 - len(flat)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 9)), max_size=60))
def test_allocate_one_is_allocate_1(ops):
    """The decode pass's one-page path hands out the page allocate(1) would (never-cached pages
    first, then the least recently parked cached one, evicted), on any history of allocations,
    caching and frees; and raises as it does when none is free."""
    a, b = PageAllocator(6), PageAllocator(6)
    evicted_a, evicted_b = [], []
    a.on_evict, b.on_evict = evicted_a.append, evicted_b.append
    held: list[int] = []
    for op, i in ops:
        if op == 0:  # one page
            if a.num_free:
                p = a.allocate_one()
                assert [p] == b.allocate(1)
                held.append(p)
            else:
                with pytest.raises(OutOfPagesError):
                    a.allocate_one()
        elif op == 1 and held:  # the prefix cache keeps a held page's contents
            p = held[i % len(held)]
            for x in (a, b):
                x.mark_cached(p)
        elif op == 2 and held:  # free one (a cached one is parked)
            p = held.pop(i % len(held))
            a.free([p])
            b.free([p])
        elif op == 3 and a.num_free >= 2:  # several at once
            ps = a.allocate(2)
            assert ps == b.allocate(2)
            held.extend(ps)
        assert (a.num_free, evicted_a) == (b.num_free, evicted_b)
