"""The engine's collector policy: no automatic pass inside host work, the due generations at the
device wait (medha_jax/gc_pauses.py)."""

import gc

import pytest

from medha_jax.gc_pauses import HostWork, collect_due


@pytest.fixture
def gc_state():
    enabled, thresholds = gc.isenabled(), gc.get_threshold()
    gc.enable()
    yield
    gc.set_threshold(*thresholds)
    (gc.enable if enabled else gc.disable)()


def test_host_work_turns_automatic_collection_off_and_back_on(gc_state):
    with HostWork():
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    with HostWork():  # a caller that turned it off keeps it off
        assert not gc.isenabled()
    assert not gc.isenabled()


def test_collect_due_runs_what_is_due_and_nothing_before(gc_state):
    gc.collect()
    gc.set_threshold(100, 2, 1000)
    with HostWork():
        assert collect_due() == -1  # nothing allocated yet
        junk = [[] for _ in range(300)]  # tracked allocations past gen 0's threshold, no pass
        assert gc.get_count()[0] > 100
        assert collect_due() == 0
        assert gc.get_count()[0] < 100
        before = gc.get_stats()[1]["collections"]
        for _ in range(3):  # three more young passes: the middle generation is due
            junk += [[] for _ in range(300)]
            collect_due()
        assert gc.get_stats()[1]["collections"] > before
    del junk


def test_a_cycle_made_during_host_work_is_collected_at_the_device_wait(gc_state):
    import weakref

    class Node:
        pass

    gc.collect()
    gc.set_threshold(50, 10, 10)
    with HostWork():
        a, b = Node(), Node()
        a.other, b.other = b, a
        alive = weakref.ref(a)
        del a, b
        _ = [[] for _ in range(200)]
        assert alive() is not None  # no automatic pass while host work runs
        collect_due()
    assert alive() is None
