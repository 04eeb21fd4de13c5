"""The decode pass reads a roster kept as requests come and go (`Scheduler._roster`, `_unsure`)
instead of every running request's counts: it must choose what the plain rule chooses.

The reference here is that rule, read from the requests' public state just before each
`schedule`: in `running`'s order, every request not in flight with one token left to compute and
one sampled is a decode (unless its pending token is its last), every other with tokens left is a
ready partial prefill. Driven the ways engines drive the scheduler: tokens back before the next
batch (sync), left pending on the device (the asynchronous engine), back `depth` ticks later
(a stream pipeline), with aborts, stop tokens, preemption under memory pressure, kvp groups."""

from __future__ import annotations

import random

import pytest

from medha_jax.kv_cache_manager import KVCacheManager
from medha_jax.request import Request, RequestStatus
from medha_jax.sampling_params import SamplingParams
from medha_jax.scheduler import SchedulerConfig, make_scheduler
from medha_jax.scheduler.predictor import RuntimePredictor
from medha_jax.scheduler.stops import at_length

MAX_LEN = 2000


def plain_rule(sched) -> tuple[list[Request], list[Request]]:
    decodes, partials = [], []
    for r in sched.running:
        if r in sched._in_flight:
            continue
        if r.num_remaining_tokens == 1 and r.has_sampled:
            if not (r.num_pending_tokens and at_length(r, MAX_LEN)):
                decodes.append(r)
        elif r.num_remaining_tokens > 0:
            partials.append(r)
    return decodes, partials


def drive(policy: str, mode: str, seed: int, *, kvp: int = 1, pages: int = 400, max_seqs: int = 512,
          depth: int = 1, steps: int = 300):
    """Random traffic; yields (scheduler, batch, the plain rule's (decodes, partials) before it)."""
    rng = random.Random(seed)
    kv = KVCacheManager(pages, page_size=16, kvp=kvp, max_tokens_per_kvp_group=512 if kvp > 1 else None,
                        per_group_batches=kvp > 1)
    cfg = SchedulerConfig(policy=policy, max_num_batched_tokens=256, max_num_seqs=max_seqs, chunk_granularity=16,
                          min_chunk=16, pipeline_depth=depth if depth > 1 else None)
    sched = make_scheduler(cfg, kv, RuntimePredictor({"const": 1e-3, "tokens": 1e-4}), max_model_len=MAX_LEN,
                           eos_token_ids=frozenset([3]))
    now, n, queue = 0.0, 0, []  # queue: batches whose tokens are not back yet, with ticks left
    for _ in range(steps):
        if rng.random() < 0.4:
            n += 1
            length = rng.choice([rng.randint(1, 40), rng.randint(40, 400), rng.randint(400, 800)])
            sched.add_request(Request(f"r{n}", [rng.randrange(5, 100) for _ in range(length)],
                                      SamplingParams(max_tokens=rng.randint(1, 60)), arrival_time=now))
        if rng.random() < 0.02 and sched.num_running:
            sched.abort(rng.choice(list(sched.running)).request_id)
        expected = plain_rule(sched)
        batch = sched.schedule(now)
        yield sched, batch, expected
        now += 0.01

        def sample(b):
            return [3 if rng.random() < 0.03 else rng.randrange(5, 100) for _ in range(b.num_seqs)]
        if mode == "pending":  # the asynchronous engine: step n's tokens come back after step n+1 is formed
            if queue:
                b = queue.pop()
                sched.update_from_output(b, sample(b), now)
            sched.on_batch_done(batch, now, tokens_pending=True)
            queue.append(batch)
            continue
        sched.on_batch_done(batch, now)
        queue.append([batch, depth - 1 if mode == "spp" else 0])
        while queue and queue[0][1] <= 0:
            b = queue.pop(0)[0]
            sched.update_from_output(b, sample(b), now)
        for e in queue:
            e[1] -= 1


CASES = [("sync", 1, 1), ("pending", 1, 1), ("spp", 1, 3)]


@pytest.mark.parametrize("mode, kvp, depth", CASES + [("sync", 2, 1), ("pending", 2, 1)])
@pytest.mark.parametrize("policy", ["fcfs", "slo"])
def test_the_roster_chooses_what_the_plain_rule_chooses(policy, mode, kvp, depth):
    """Pages and rows to spare: every ready decode is in the batch, in `running`'s order, and the
    partial prefills offered to the packer are the plain rule's."""
    decoded = 0
    for sched, batch, (decodes, partials) in drive(policy, mode, 0, kvp=kvp, depth=depth, pages=2000):
        assert batch.decodes == decodes
        assert batch.decode_starts == [r.num_computed_tokens for r in decodes]
        assert all(t is sched.kv.tables[r.request_id] for r, t in zip(decodes, batch.decode_tables))
        assert sched.partials == partials
        assert sched._roster == [r for r in sched.running if r in sched._decoding]
        decoded += len(decodes)
    assert decoded > 500  # the traffic did decode


@pytest.mark.parametrize("mode, kvp, depth", CASES + [("sync", 2, 1)])
@pytest.mark.parametrize("seed", range(3))
def test_under_memory_pressure_the_decodes_are_the_plain_rules_in_order(mode, kvp, depth, seed):
    """Few pages (preemption) and 24 rows: the batch's decodes are the plain rule's in its order,
    less those preempted (as victims or for want of a page) and those past the row cap."""
    for sched, batch, (decodes, _) in drive("edf", mode, seed, kvp=kvp, depth=depth, pages=56 if kvp == 1 else 40,
                                            max_seqs=24):
        got = iter(batch.decodes)
        nxt = next(got, None)
        for r in decodes:
            if r is nxt:
                nxt = next(got, None)
            elif r in batch.preempted or r.status is RequestStatus.PREEMPTED:
                continue
            else:
                assert max(batch.group_rows) >= 24, (r.request_id, batch.group_rows)  # past the row cap
        assert nxt is None, "a decode the plain rule did not choose"
    assert sched.num_preemptions > 0  # memory ran short


def test_past_the_row_cap_the_oldest_decodes_run():
    kv = KVCacheManager(64, page_size=16)
    sched = make_scheduler(SchedulerConfig(policy="fcfs", max_num_seqs=5), kv)
    reqs = [Request(f"d{i}", list(range(5, 25)), SamplingParams(max_tokens=8), arrival_time=0.0) for i in range(8)]
    for r in reqs:
        sched.add_decoding(r, 9)
    sched.finish(reqs[1], RequestStatus.FINISHED_ABORTED)
    batch = sched.schedule(0.0)
    assert batch.decodes == [reqs[i] for i in (0, 2, 3, 4, 5)] and batch.num_rows == 5


def test_add_decoding_puts_a_ready_decode_in():
    kv = KVCacheManager(64, page_size=16)
    sched = make_scheduler(SchedulerConfig(policy="fcfs"), kv)
    r = Request("a", list(range(5, 37)), SamplingParams(max_tokens=4), arrival_time=0.0)
    sched.add_decoding(r, 9)
    batch = sched.schedule(0.0)
    assert batch.decodes == [r] and batch.decode_starts == [32] and r.output_token_ids == [9]
    assert kv.covered["a"] == 48  # its context's pages and the page its next position starts
