"""The host KV tier (swap space) behind the prefix cache, no device: which pages are copied where.

The last test runs random requests with shared prefixes through the scheduler under memory
pressure against a model of the device and host memory: every step applies the tier's copies,
then checks that each scheduled sequence's KV for the positions before its chunk is exactly its
own tokens' (page by page, offset by offset), then writes the chunk. A restore into the wrong
page, a save after its page was overwritten or a slot reused too early fails it.
"""

import random

import pytest

from medha_jax.host_page_store import HostPageStore, SwapOp
from medha_jax.kv_cache_manager import KVCacheManager
from tests.scheduler.factories import make_scheduler, mark_computed, request_of, run_shared_prefix_traffic


def test_an_evicted_page_is_saved_to_host_and_a_match_restores_it():
    kv = KVCacheManager(4, page_size=4, prefix_caching=True, host_slots=8)
    a = request_of("a", range(13))
    mark_computed(kv, a, 13)  # pages 0-2 full and cached, page 3 holds token 12
    pages = list(kv.page_tables(a)[0])
    kv.free(a)
    big = request_of("big", range(500, 516))
    kv.allocate(big, 16)  # takes every page: the three cached ones are evicted to host
    out = kv.take_swap_ops()
    assert sorted(op.page for op in out) == sorted(pages[:3]) and {op.kind for op in out} == {"out"}
    assert len(kv.host) == 3 and len(kv.prefix) == 0
    kv.free(big)
    b = request_of("b", range(13))
    assert kv.prefix.peek(list(range(13)), 3) == 3  # the policies' estimate sees host pages too
    assert kv.match_prefix(b) == 12
    ins = kv.take_swap_ops()
    assert [op.kind for op in ins] == ["in"] * 3
    slot_of = {op.page: op.slot for op in out}
    # page i of b gets the slot page i of a was saved to
    assert [op.slot for op in ins] == [slot_of[p] for p in pages[:3]]
    assert [op.page for op in ins] == list(kv.page_tables(b)[0])
    assert kv.host.restored_pages == 3


def test_a_page_already_on_host_is_not_copied_again():
    kv = KVCacheManager(4, page_size=4, prefix_caching=True, host_slots=8)
    a = request_of("a", range(8))
    mark_computed(kv, a, 8)
    kv.free(a)
    fill = request_of("fill", range(900, 916))
    kv.allocate(fill, 16)
    assert len(kv.take_swap_ops()) == 2
    kv.free(fill)
    b = request_of("b", range(9))
    assert kv.match_prefix(b) == 8
    kv.take_swap_ops()
    kv.free(b)
    kv.allocate(request_of("fill2", range(700, 716)), 16)  # evicts b's restored pages again: host has them
    assert kv.take_swap_ops() == [] and kv.host.saved_pages == 2


def test_the_least_recently_used_host_page_makes_room():
    store = HostPageStore(2)
    store.save(1, 0, 0, (1,), page=10)
    store.save(2, 0, 1, (2,), page=11)
    store.touch(1)
    store.save(3, 0, 2, (3,), page=12)  # slot of entry 2 (least recently used) is reused
    assert store.has(1, 0, 0, (1,)) and not store.has(2, 0, 1, (2,)) and store.has(3, 0, 2, (3,))
    assert store.take_ops() == [SwapOp("out", 0, 10, 0), SwapOp("out", 0, 11, 1), SwapOp("out", 0, 12, 1)]
    assert store.dropped_pages == 1


def toks_of_first_page(entry):
    return entry[3] == (0, 1, 2, 3)


def test_a_host_entry_with_other_tokens_is_a_miss():
    kv = KVCacheManager(4, page_size=4, prefix_caching=True, host_slots=8)
    a = request_of("a", range(9))
    mark_computed(kv, a, 9)
    kv.free(a)
    kv.allocate(request_of("fill", range(900, 916)), 16)
    h, (slot, g, parent, toks) = next((h, e) for h, e in kv.host._entries.items() if toks_of_first_page(e))
    kv.host._entries[h] = (slot, g, parent, (1, 2, 3, 4))  # same key, other tokens: a forged collision
    assert kv.prefix.peek(list(range(9)), 2) == 0


def test_a_restore_stops_where_the_device_has_no_page_left():
    kv = KVCacheManager(4, page_size=4, prefix_caching=True, host_slots=8)
    a = request_of("a", range(13))
    mark_computed(kv, a, 13)
    kv.free(a)
    hog1, hog2 = request_of("hog1", range(900, 908)), request_of("hog2", range(800, 808))
    kv.allocate(hog1, 8)
    kv.allocate(hog2, 8)  # every page: a's three cached pages are saved to host
    assert len(kv.take_swap_ops()) == 3
    kv.free(hog1)  # two free pages
    b = request_of("b", range(13))
    assert kv.match_prefix(b) == 8  # two pages restored, the third has no device page to go to
    assert [op.kind for op in kv.take_swap_ops()] == ["in", "in"]


def test_swap_space_without_prefix_caching_is_refused():
    with pytest.raises(ValueError, match="needs prefix caching"):
        KVCacheManager(4, page_size=4, host_slots=8)


def test_clearing_the_prefix_cache_forgets_the_host_tier():
    kv = KVCacheManager(4, page_size=4, prefix_caching=True, host_slots=8)
    a = request_of("a", range(9))
    mark_computed(kv, a, 9)
    kv.free(a)
    kv.allocate(request_of("fill", range(900, 916)), 16)
    kv.clear_prefix_cache()
    assert len(kv.host) == 0 and kv.take_swap_ops() == []


class _Memory:
    """What each device page and host slot holds: offset -> the tokens up to that position."""

    def __init__(self, page_size):
        self.ps = page_size
        self.device: dict[int, dict[int, tuple]] = {}
        self.host: dict[int, dict[int, tuple]] = {}

    def apply(self, ops):
        for op in ops:
            if op.kind == "out":
                self.host[op.slot] = dict(self.device.get(op.page, {}))
            else:
                self.device[op.page] = dict(self.host[op.slot])

    def check_and_write(self, seq):
        req, ps = seq.request, self.ps
        toks = req.prompt_token_ids + req.output_token_ids
        table = seq.page_tables[0]
        for q in range(seq.start_pos):  # what this step's attention reads
            assert self.device.get(table[q // ps], {}).get(q % ps) == tuple(toks[:q + 1]), (req.request_id, q)
        for q in range(seq.start_pos, seq.start_pos + seq.num_tokens):
            self.device.setdefault(table[q // ps], {})[q % ps] = tuple(toks[:q + 1])


@pytest.mark.parametrize("policy,host_slots", [("fcfs", 64), ("srpt", 64), ("fcfs", 3)])
def test_random_traffic_reads_exactly_its_own_kv_through_evictions_and_restores(policy, host_slots):
    rng = random.Random(5)
    s = make_scheduler(policy, num_pages=24, page_size=8, max_num_batched_tokens=48)
    s.kv = KVCacheManager(24, page_size=8, prefix_caching=True, host_slots=host_slots)
    mem = _Memory(8)

    def run_step(s, b):  # the tier's copies, then the step's reads and writes
        mem.apply(s.kv.take_swap_ops())
        for seq in b.seqs:
            mem.check_and_write(seq)

    reqs = run_shared_prefix_traffic(s, rng, num_docs=5, steps=600, arrive_until=200, abort_every=41, abort_at=7,
                                     token=lambda: rng.randrange(1000), before_done=run_step)
    assert not s.has_unfinished and all(r.is_finished for r in reqs)
    host = s.kv.host
    assert s.num_preemptions > 0 and host.saved_pages > 0 and host.restored_pages > 0
    assert s.kv.num_free_pages == s.kv.num_total_pages
