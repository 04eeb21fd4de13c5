"""KVP groups running their own batches (Mnemosyne): placement, the rotated layout, the cost model
and the packer. Pure Python: the scheduler's side of `KVCacheManager(per_group_batches=True)`."""

from medha_jax.kv_cache_manager import KVCacheManager
from medha_jax.kvp_layout import owner, shards
from medha_jax.scheduler import RuntimePredictor, SchedulerConfig, make_scheduler
from medha_jax.scheduler.kvp_cost import KVPBatchCost
from tests.scheduler.factories import make_requests, mark_computed, request_of, sample_all


def test_layout_rotates_from_the_first_group():
    assert list(shards(20, 2, 8, 3)) == [(2, 0, 8), (0, 8, 16), (1, 16, 20)]
    assert owner(4, 14, 2, 8, 3) == 1 and owner(1, 7, 2, 8, 3) == 2


def test_requests_are_spread_over_the_groups_and_onboard_the_next_ones():
    kv = KVCacheManager(4, page_size=4, kvp=3, max_tokens_per_kvp_group=8, per_group_batches=True)
    a, b, c, d = make_requests(4, prompt_len=[20, 4, 4, 4])
    kv.allocate(a, 20)  # first on group 0 (all equally free), then 1 and 2
    assert kv.first_groups[a.request_id] == 0 and kv.num_free_pages_per_group == [2, 2, 3]
    for r in (b, c, d):  # each new one where the most pages are free
        kv.allocate(r, 4)
    assert [kv.first_groups[r.request_id] for r in (b, c, d)] == [2, 0, 1]
    assert kv.num_free_pages_per_group == [1, 1, 2]
    kv.free(a)
    assert kv.num_free_pages_per_group == [3, 3, 3] and a.request_id not in kv.first_groups
    e, = make_requests(1, prompt_len=12)
    kv.allocate(e, 12, group=2)  # the scheduler's choice: blocks on groups 2 and 0
    assert [len(t) for t in kv.page_tables(e)] == [2, 1] and kv.num_free_pages_per_group == [2, 3, 1]


def test_without_per_group_batches_everyone_starts_on_group_0():
    kv = KVCacheManager(4, page_size=4, kvp=2, max_tokens_per_kvp_group=8)
    a, b = make_requests(2, prompt_len=4)
    kv.allocate(a, 4)
    kv.allocate(b, 4, group=1)  # a placement hint is ignored: the groups replicate one batch
    assert kv.first_groups == {a.request_id: 0, b.request_id: 0}


def test_a_cached_prefix_places_the_request_where_its_pages_are():
    kv = KVCacheManager(8, page_size=4, kvp=2, max_tokens_per_kvp_group=8, prefix_caching=True,
                        per_group_batches=True)
    filler = request_of("f", range(100, 104))
    mark_computed(kv, filler, 4)  # group 0 now has fewer free pages: the next request goes to 1
    a = request_of("a", range(15))
    mark_computed(kv, a, 15)
    assert kv.first_groups["a"] == 1
    b = request_of("b", range(15))
    assert kv.peek_prefix(b) == 12 and kv.match_prefix(b) == 12
    assert kv.first_groups["b"] == 1 and kv.page_tables(b) == [kv.page_tables(a)[0], kv.page_tables(a)[1][:1]]


def test_each_group_pays_for_its_own_tokens_and_its_share_of_a_spanning_sequence():
    pred = RuntimePredictor({"tokens": 1e-3, "chunk_kv": 1e-6, "decode_kv": 1e-6})
    own = KVPBatchCost(pred, group_tokens=1000, kvp=2, replicated=False)
    rep = KVPBatchCost(pred, group_tokens=1000, kvp=2, replicated=True)
    for cost in (own, rep):
        cost.add(100, 0, 0)  # a short chunk on group 0
        cost.add(100, 0, 1)  # another on group 1
    assert own.group_time(0) == own.group_time(1) == 0.1  # each runs only its own tokens
    assert rep.group_time(0) == rep.group_time(1) == 0.2  # every group runs every token
    own.add(1, 1500, 0)  # a decode of a sequence spanning both groups, owned by group 1
    assert own.group_time(0) == 0.1 + 1e-6 * 1000  # attention over its 1000 keys there, no token
    assert own.group_time(1) == 0.1 + 1e-3 + 1e-6 * 500
    assert own.time_with(50, 0, 0) == 0.15 + 1e-6 * 1000  # only the groups it runs on


def _first_batch(per_group_batches):
    pred = RuntimePredictor({"const": 1e-3, "tokens": 1e-4})
    kv = KVCacheManager(256, page_size=16, kvp=2, max_tokens_per_kvp_group=2048, per_group_batches=per_group_batches)
    sched = make_scheduler(SchedulerConfig(policy="slo", t_target=0.05, chunk_granularity=16, min_chunk=16), kv, pred)
    for r in make_requests(4, prompt_len=300, max_tokens=3):
        sched.add_request(r)
    return sched, pred, sched.schedule(0.0)


def test_the_packer_gives_every_group_its_own_prefills_in_one_iteration():
    sched, pred, batch = _first_batch(True)
    assert {s.first_group for s in batch.seqs} == {0, 1}  # different requests on the two groups
    cost = KVPBatchCost(pred, 2048, 2, replicated=False)
    for s in batch.seqs:
        cost.add(s.num_tokens, s.start_pos, s.first_group)
    assert batch.predicted_time == cost.time() <= 0.05
    _, _, one = _first_batch(False)  # the same requests, one batch replicated on both groups
    assert {s.first_group for s in one.seqs} == {0}
    rate = lambda b: b.num_tokens / b.predicted_time  # noqa: E731  prefill tokens per second
    assert rate(batch) > 1.7 * rate(one)
    now, kv = 0.0, sched.kv
    while sched.has_unfinished:  # and they finish, every page back
        sample_all(sched, batch, now)
        now += 0.05
        batch = sched.schedule(now)
    assert kv.num_free_pages == kv.num_total_pages and not kv.first_groups


def test_a_new_request_is_not_placed_on_a_group_without_free_pages():
    pred = RuntimePredictor({"const": 1e-3, "tokens": 1e-4})
    kv = KVCacheManager(8, page_size=16, kvp=2, max_tokens_per_kvp_group=128, per_group_batches=True)
    sched = make_scheduler(SchedulerConfig(policy="slo", t_target=0.05, chunk_granularity=16, min_chunk=16), kv, pred)
    kv.allocators[0].allocate(8)  # every page of group 0 taken (outside the scheduler)
    hog, new = make_requests(2, prompt_len=[40, 40], max_tokens=8)
    sched.add_request(hog)
    sample_all(sched, sched.schedule(0.0), 0.0)  # hog prefilled on group 1, decoding there
    sched.add_request(new)
    batch = sched.schedule(0.1)  # group 0 has the most time left, but no pages
    assert sorted((s.request_id, s.first_group, s.num_tokens) for s in batch.seqs) == [
        (hog.request_id, 1, 1), (new.request_id, 1, 40)]
