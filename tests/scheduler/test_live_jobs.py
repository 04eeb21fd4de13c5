"""slo keeps its feasibility-scan jobs between iterations (`LiveJobs`): after every scan they must
be what a scan built from scratch would use, and no request left live may be hopeless."""

from __future__ import annotations

import random

import pytest

from medha_jax.kv_cache_manager import KVCacheManager
from medha_jax.request import Request
from medha_jax.sampling_params import SamplingParams
from medha_jax.scheduler import SchedulerConfig, make_scheduler
from medha_jax.scheduler.live_jobs import LiveJobs
from medha_jax.scheduler.policies import SLOPolicy
from medha_jax.scheduler.predictor import RuntimePredictor

from tests.scheduler.factories import sample_all


def fresh_jobs(pol) -> list[tuple]:
    """The live jobs as a scan from scratch builds them: arrival order, estimates grown while set aside."""
    grow = 1.0 + pol.REJOIN
    out = []
    for r in pol._live:
        i = pol._info[r]
        left = i[2] - i[4]
        out.append((r.arrival_time + i[0], left * grow if r in pol.set_aside else left, r, r.priority_class))
    return out


@pytest.mark.parametrize("rescue", [1.0, 2.0])
@pytest.mark.parametrize("seed", range(3))
def test_kept_jobs_are_the_fresh_ones_and_none_is_hopeless(seed, rescue):
    rng = random.Random(seed)
    sched = slo_scheduler(rescue_stretch=rescue)
    pol = sched.policy
    now, given_up, aside = 0.0, 0, 0
    for n in range(400):
        if rng.random() < 0.5:
            length = rng.choice([rng.randint(1, 60), rng.randint(60, 600), rng.randint(600, 3000)])
            sched.add_request(Request(f"r{n}", [5] * length, SamplingParams(max_tokens=rng.randint(1, 20)),
                                      arrival_time=now, priority_class=rng.choice([0, 0, 1]),
                                      ttft_deadline=rng.choice([None, 0.1, 1.0])))
        batch = sched.schedule(now)
        assert pol._live.all_jobs() == fresh_jobs(pol)
        fastest = pol.inflate
        for d, _, r, _ in pol._live.all_jobs():
            i = pol._info[r]
            left = i[2] - i[4]
            assert not (d < now + fastest * left and (
                not pol._ladder or d < now + fastest * pol._fast(r, left, pol._ladder[-1][1]))), r.request_id
        given_up = max(given_up, len(pol._hopeless_order))
        aside += len(pol.set_aside)
        now += 0.02
        sample_all(sched, batch, now)
    assert given_up and aside  # overload: requests were given up and set aside


def test_due_hands_out_each_request_once_and_forgets_removed_ones():
    a, b, c = (Request(x, [1], SamplingParams(), arrival_time=0.0) for x in "abc")
    live = LiveJobs()
    live.add(a, (1.0, 0.5, a, 0), give_up_at=0.5)
    live.add(b, (2.0, 0.5, b, 0), give_up_at=1.5)
    live.add(c, (3.0, 0.5, c, 0), give_up_at=0.2)
    live.remove(c)
    live.add(a, (1.0, 0.6, a, 0), give_up_at=0.4)  # re-added: keeps its place, new time
    assert live.due(0.3) == []
    assert live.due(1.0) == [a]
    assert live.due(1.0) == []  # handed out: not again until given a time
    assert live.jobs() == [(1.0, 0.6, a, 0), (2.0, 0.5, b, 0)]
    assert live.in_order([b, a]) == [a, b]
    live.remove(a)
    assert list(live) == [b] and len(live) == 1 and live.due(10.0) == [b]


def test_dormant_jobs_leave_the_scan_until_their_threshold_and_keep_their_places():
    a, b, c, d = (Request(x, [1], SamplingParams(), arrival_time=0.0) for x in "abcd")
    live = LiveJobs()
    for r, deadline in zip((a, b, c, d), (4.0, 1.0, 3.0, 2.0)):
        live.add(r, (deadline, 0.5, r, 0), give_up_at=100.0)
    live.sleep(b, threshold=2.0, start=1.0)
    live.sleep(c, threshold=5.0, start=1.5)
    assert live.jobs() == [(4.0, 0.5, a, 0), (2.0, 0.5, d, 0)]  # the scan's: active only, in the order added
    assert [e[2] for e in live.dormant_in_order()] == [b, c]  # by deadline
    assert set(live.dormant()) == {b, c} and live.num_dormant == 2 and len(live) == 4
    live.wake(scale=6.0, start=2.0)  # above both thresholds: both stay out
    assert live.num_dormant == 2
    live.wake(scale=4.0, start=2.0)  # at or below c's threshold: c wakes, back in its place
    assert [j[2] for j in live.jobs()] == [a, c, d] and list(live.dormant()) == [b]
    live.wake(scale=6.0, start=1.2)  # the start went back (a smaller margin): every one wakes
    assert [j[2] for j in live.jobs()] == [a, b, c, d] and live.num_dormant == 0
    live.sleep(a, threshold=1.0, start=3.0)
    live.sleep(d, threshold=1.0, start=3.0)
    live.set_job(a, (4.0, 0.7, a, 0))  # a new job: its threshold is stale, it wakes
    live.remove(d)  # gone while dormant
    assert live.jobs() == [(4.0, 0.7, a, 0), (1.0, 0.5, b, 0), (3.0, 0.5, c, 0)]
    assert live.num_dormant == 0 and live.dormant_in_order() == [] and len(live) == 3
    assert live.all_jobs() == live.jobs()


def check_every_scan(monkeypatch, pol) -> list[int]:
    """Every slo scan, rerun with the dormant jobs put back, must admit the same requests and set
    aside exactly the scan's set-aside ones plus the dormant ones; returns the dormant count per scan."""
    import medha_jax.scheduler.policies as policies
    real, checked = policies.sacrifice, []

    def sacrifice_and_check(jobs, now, **kw):
        admitted, aside = real(jobs, now, **kw)
        dormant = list(pol._live.dormant())
        full_admitted, full_aside = real(jobs + [pol._live.job(r) for r in dormant], now, **kw)
        assert full_admitted == admitted and set(full_aside) == set(aside) | set(dormant)
        checked.append(len(dormant))
        return admitted, aside

    monkeypatch.setattr(policies, "sacrifice", sacrifice_and_check)
    return checked


def slo_scheduler(**config):
    cfg = dict(policy="slo", t_target=0.02, deadline_min=0.05, max_num_batched_tokens=256, chunk_granularity=16,
               min_chunk=16)
    return make_scheduler(SchedulerConfig(**(cfg | config)), KVCacheManager(4000, page_size=16),
                          RuntimePredictor({"const": 1e-3, "tokens": 1e-4}))


@pytest.mark.parametrize("seed", range(4))
def test_a_scan_without_the_dormant_jobs_decides_what_a_scan_with_them_would(seed, monkeypatch):
    """Random overload, one class, no rescue: bursts of chat and lulls."""
    rng = random.Random(seed)
    sched = slo_scheduler()
    pol = sched.policy
    checked = check_every_scan(monkeypatch, pol)
    now = 0.0
    for n in range(600):
        # bursts of chat with long answers (decodes pile up: a small prefill share) and lulls
        # with none (the share recovers)
        burst = (n // 100) % 2 == 0
        for k in range(rng.choice([1, 2, 3] if burst else [0, 0, 0, 1])):
            long = not burst or rng.random() < 0.3
            length = rng.randint(200, 3000) if long else rng.randint(1, 60)
            sched.add_request(Request(f"r{n}.{k}", [5] * length,
                                      SamplingParams(max_tokens=rng.randint(1, 20) if long else rng.randint(50, 150)),
                                      arrival_time=now, ttft_deadline=rng.choice([None, rng.uniform(0.03, 10.0 if long else 1.0)])))
        batch = sched.schedule(now)
        now += (batch.predicted_time or 0.01) * rng.uniform(0.8, 1.5)
        sample_all(sched, batch, now)
    assert sum(map(bool, checked)) > 120  # dormant jobs were left out of many scans


def test_a_dormant_request_rejoins_when_the_decodes_leave(monkeypatch):
    """A long prompt late even alone while 200 decodes hold the device turns dormant; once they
    finish and the prefill share recovers it fits again, and it must rejoin the EDF order (ahead
    of a request due later), not stay set aside."""
    sched = slo_scheduler()
    pol = sched.policy
    checked = check_every_scan(monkeypatch, pol)
    chats = [Request(f"c{k}", [5] * 8, SamplingParams(max_tokens=1000), arrival_time=0.0) for k in range(200)]
    for r in chats:
        sched.add_decoding(r, 7)
    late = Request("long", [5] * 3000, SamplingParams(max_tokens=1), arrival_time=0.0, ttft_deadline=1.5)
    other = Request("other", [5] * 3000, SamplingParams(max_tokens=1), arrival_time=0.0, ttft_deadline=30.0)
    sched.add_request(late)
    sched.add_request(other)
    now, was_dormant, first_chunk = 0.0, False, None
    for it in range(200):
        if it == 10:
            for r in chats:
                sched.abort(r.request_id)
        was_dormant |= late in pol._live.dormant()
        batch = sched.schedule(now)
        chunked = [s.request for s in batch.chunks]
        if first_chunk is None and chunked:
            first_chunk = chunked[0]
        now += batch.predicted_time or 0.01
        sample_all(sched, batch, now)
        if late.output_token_ids:
            break
    assert was_dormant and any(checked)
    assert first_chunk is late  # it rejoined before `other` got any chunk
    assert late.output_token_ids and late.first_token_time <= late.arrival_time + 1.5


def test_a_request_given_up_twice_is_a_candidate_once():
    """Given up, admitted, preempted back to the queue and given up again: the first give-up's
    entry is stale, and the candidate order holds the request once (it used to appear twice, and
    the copy took one of the slack borrowing's BORROW_SCAN looks)."""
    sched = slo_scheduler()
    pol = sched.policy
    r = Request("r", [5] * 500, SamplingParams(max_tokens=4), arrival_time=0.0, ttft_deadline=0.01)
    other = Request("o", [5] * 500, SamplingParams(max_tokens=4), arrival_time=0.0, ttft_deadline=0.005)
    sched.add_request(r)
    sched.add_request(other)
    assert list(pol.candidates([], 1.0)).count(r) == 1 and r in pol._hopeless
    pol.on_leave_waiting(r)  # admitted ...
    pol.on_waiting(r)  # ... and preempted before computing anything
    order = list(pol.candidates([], 2.0))
    assert r in pol._hopeless and order.count(r) == 1 and order.count(other) == 1


@pytest.mark.parametrize("with_admitted", [False, True])
def test_the_given_up_order_survives_the_packer_taking_requests_out_while_walking_it(with_admitted):
    """The candidate order reads the given-up entries lazily from their live list; the packer takes
    each request it admits out of that list mid-walk (`on_leave_waiting`). No entry may be skipped
    or repeated: the walk with removals yields what a walk without them does. More than
    BORROW_SCAN given-up requests, so the walk goes past the slack borrowing's slice (with an
    admitted request) or is the lazy merge alone (without)."""
    n = SLOPolicy.BORROW_SCAN * 2 + 5

    def given_up_walk(remove: bool) -> list[str]:
        sched = slo_scheduler()
        pol = sched.policy
        for i in range(n):  # deadlines out of arrival order, some equal
            sched.add_request(Request(f"h{i}", [5] * (300 + 7 * i), SamplingParams(max_tokens=4), arrival_time=0.0,
                                      ttft_deadline=0.01 + 1e-3 * ((i * 37) % (n // 2))))
        if with_admitted:
            sched.add_request(Request("ok", [5] * 16, SamplingParams(max_tokens=4), arrival_time=1.0,
                                      ttft_deadline=0.6))
        walked = []
        for r in pol.candidates([], 1.0):
            if r.request_id.startswith("h"):
                walked.append(r.request_id)
                if remove:
                    pol.on_leave_waiting(r)  # admitted: out of the given-up list while the walk goes on
        assert len(pol._hopeless_order) == (0 if remove else n)
        return walked

    kept = given_up_walk(remove=False)
    assert len(kept) == len(set(kept)) == n
    assert given_up_walk(remove=True) == kept


def bursty_run(seed: int) -> list[list]:
    """Every iteration's whole candidate order and batch (request, start, tokens) of slo under
    random overload with running prefills falling late: bursts of chat with long answers, long
    prompts with tight deadlines."""
    rng = random.Random(seed)
    sched = slo_scheduler(max_num_batched_tokens=512)
    now, seen = 0.0, []
    candidates = sched.policy.candidates

    def listed(partials, now):  # the whole order, recorded (the packer reads the same list)
        order = list(candidates(partials, now))
        seen.append([r.request_id for r in order])
        return iter(order)

    sched.policy.candidates = listed
    for n in range(500):
        for k in range(rng.choice([0, 1, 2, 3])):
            long = rng.random() < 0.4
            length = rng.randint(300, 3000) if long else rng.randint(1, 60)
            sched.add_request(Request(f"r{n}.{k}", [5] * length,
                                      SamplingParams(max_tokens=rng.randint(1, 20) if long else rng.randint(20, 120)),
                                      arrival_time=now, ttft_deadline=rng.choice([None, rng.uniform(0.03, 3.0)])))
        batch = sched.schedule(now)
        seen.append([(s.request.request_id, s.start_pos, s.num_tokens) for s in batch.seqs])
        now += (batch.predicted_time or 0.01) * rng.uniform(0.8, 1.5)
        sample_all(sched, batch, now)
    return seen


@pytest.mark.parametrize("seed", range(3))
def test_running_prefills_late_alone_skip_the_scan_and_nothing_changes(seed, monkeypatch):
    """A running prefill late even alone is set aside without the scan (one class, no rescue);
    every candidate order and batch must be the ones slo makes when the scan sees it (and sets it
    aside itself)."""
    import medha_jax.scheduler.policies as policies
    real, fired = policies.late_alone, []

    def counted(*args):
        out = real(*args)
        fired.append(out)
        return out

    monkeypatch.setattr(policies, "late_alone", counted)
    skipping = bursty_run(seed)
    monkeypatch.setattr(policies, "late_alone", lambda *args: False)  # every running prefill into the scan
    assert skipping == bursty_run(seed)
    assert sum(fired) > 50  # the skip was taken often


def test_running_prefills_late_alone_join_the_set_aside_order_by_deadline():
    """b and c (running prefills, c admitted after b but due first) and a (waiting) are late even
    alone at half the device; x, y and z (waiting) fit alone but not together, so the scan sets z
    (the longest) aside. The set-aside run after x and y in deadline order: c, a, z, b."""
    sched = slo_scheduler()
    pol = sched.policy
    reqs = {x: Request(x, [5] * n, SamplingParams(max_tokens=1), arrival_time=0.0, ttft_deadline=d)
            for x, n, d in (("b", 3000, 0.6), ("c", 3000, 0.4), ("a", 3000, 0.5),
                            ("x", 500, 0.45), ("y", 1200, 0.5), ("z", 1500, 0.55))}
    for r in reqs.values():
        sched.add_request(r)
    running = [reqs["b"], reqs["c"]]
    for r in running:  # admitted in this order, a chunk done
        pol.on_leave_waiting(r)
        r.num_computed_tokens = 16
    # the device runs at half its predicted speed: x and y leave no slack to borrow (`_borrow_slack`
    # would sort the set-aside requests it looks at), so the order is the sources' merged
    pol.on_iteration(0.5, 0.02, slowdown=2.0)
    assert [r.request_id for r in pol.candidates(running, 0.0)] == ["x", "y", "c", "a", "z", "b"]
    assert pol.set_aside == {reqs[x] for x in "abcz"}
