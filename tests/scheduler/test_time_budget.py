"""The time-budget packer (Algorithms 1 and 2) on fake linear devices, checked exactly."""

import pytest

from medha_jax.request import RequestStatus
from medha_jax.scheduler import RuntimePredictor, SchedulerConfig
from medha_jax.scheduler.predictor import IDLE_GAP, SPELL
from medha_jax.scheduler.records import Composition
from medha_jax.scheduler.replay import replay
from tests.scheduler.factories import make_requests, make_scheduler, sample_all, shape


def sched(coefs, policy="lars", num_pages=32768, **kw):
    kw.setdefault("accept_within", 0.0)
    return make_scheduler(policy, num_pages=num_pages, predictor=RuntimePredictor(coefs), **kw)


def largest_fitting(pred, kv, budget):
    fits = [q for q in range(32, 8193, 32) if pred.predict(Composition.of([(q, kv)])) <= budget]
    return max(fits) if fits else 0


def test_decodes_first_then_the_largest_chunk_that_fits_what_is_left():
    s = sched({"tokens": 1e-5, "decodes": 1e-3})
    shorts = make_requests(4, prompt_len=32, max_tokens=8)
    for r in shorts:
        s.add_request(r)
    sample_all(s, s.schedule(0.0), 0.1)  # four 32-token prefills -> four decodes
    (long_,) = make_requests(1, prompt_len=100_000, prefix="L")
    s.add_request(long_)
    b = s.schedule(0.1)
    # decodes: 4 tokens + 4 decodes = 0.00404 s; 1e-5 * q <= 0.04596 -> q = 4576
    assert shape(b) == [("L0", 0, 4576), ("r0", 32, 1), ("r1", 32, 1), ("r2", 32, 1), ("r3", 32, 1)]
    assert b.predicted_time == pytest.approx(0.00404 + 0.04576)


def test_adaptive_chunking_shrinks_chunks_as_kv_grows():
    s = sched({"tokens": 1e-5, "chunk_kv": 1e-9})
    pred = s.predictor
    (r,) = make_requests(1, prompt_len=200_000, max_tokens=1)
    res = replay(s, [r])
    chunks = [it.seqs[0] for it in res.trace]
    assert chunks[0] == ("r0", 0, 4992)
    for _, kv, n in chunks[:-1]:
        assert n == largest_fitting(pred, kv, 0.05)
        assert pred.predict(Composition.of([(n, kv)])) <= 0.05
    sizes = [n for _, _, n in chunks[:-1]]
    assert all(a >= b for a, b in zip(sizes, sizes[1:])) and sizes[-1] < 300
    assert sum(n for _, _, n in chunks) == 200_000 and r.status is RequestStatus.FINISHED_LENGTH


@pytest.mark.parametrize("fraction, expected", [(0.9, [800] * 6), (1.0, [800] * 6 + [192])])
def test_multi_prefill_keeps_adding_while_below_the_fraction(fraction, expected):
    s = sched({"tokens": 1e-5}, multi_prefill_fraction=fraction)
    for r in make_requests(8, prompt_len=800, ttft_deadline=5.0):
        s.add_request(r)
    assert [n for _, _, n in shape(s.schedule(0.0))] == expected


def test_at_most_one_long_prefill_per_batch_and_space_sharing():
    s = sched({"tokens": 1e-5}, long_threshold=1000)
    l1, l2 = make_requests(2, prompt_len=100_000, ttft_deadline=100.0, prefix="L")
    (short,) = make_requests(1, prompt_len=1000, ttft_deadline=100.0, prefix="S")
    for r in (l1, l2):
        s.add_request(r)
    b1 = s.schedule(0.0)
    assert shape(b1) == [("L0", 0, 4992)]  # nothing is long yet: the whole budget
    s.on_batch_done(b1, 0.05)
    b2 = s.schedule(0.05)
    assert shape(b2) == [("L1", 0, 4992)]  # L1 now has less slack (more work left)
    s.on_batch_done(b2, 0.1)
    s.add_request(short)
    b3 = s.schedule(0.1)
    # L0 is long with rho clamped to rho_max = 0.5: 25 ms -> 2496 tokens; L1 (also long, same
    # kvp group) must wait; the short prefill takes the yielded time
    assert s.policy.relative_slack(l1, 0.1) > 0.5
    assert shape(b3) == [("L0", 4992, 2496), ("S0", 0, 1000)]


@pytest.mark.parametrize("deadline, expect_rho", [(1.2, "between"), (0.5, "negative")])
def test_space_sharing_yields_rho_of_the_budget(deadline, expect_rho):
    s = sched({"tokens": 1e-5}, long_threshold=1000)
    (r,) = make_requests(1, prompt_len=100_000, ttft_deadline=deadline)
    s.add_request(r)
    s.on_batch_done(s.schedule(0.0), 0.05)
    rho = s.policy.relative_slack(r, 0.05)
    if expect_rho == "between":
        assert 0.0 < rho < 0.5
    else:
        assert rho < 0.0
    b = s.schedule(0.05)
    budget = 0.05 * (1.0 - min(max(rho, 0.0), 0.5))
    assert shape(b) == [("r0", 4992, largest_fitting(s.predictor, 4992, budget))]


def test_only_the_best_candidates_are_examined():
    s = sched({"tokens": 1e-5}, max_prefill_candidates=2)
    for r in make_requests(5, prompt_len=100, ttft_deadline=[5.0, 1.0, 4.0, 2.0, 3.0]):
        s.add_request(r)
    assert shape(s.schedule(0.0)) == [("r1", 0, 100), ("r3", 0, 100)]


def test_a_chunk_that_can_never_fit_still_runs_alone():
    s = sched({"const": 0.1, "tokens": 1e-5})  # every batch overruns 50 ms
    (r,) = make_requests(1, prompt_len=1000)
    s.add_request(r)
    assert shape(s.schedule(0.0)) == [("r0", 0, 32)]


@pytest.mark.parametrize("policy", ["lars", "edf", "lrs"])
def test_memory_pressure_finishes_everything(policy):
    s = sched({"tokens": 1e-5, "chunk_kv": 1e-9, "decodes": 1e-4}, policy=policy, num_pages=40,
              long_threshold=256)
    # 40 pages of 16 tokens; each request grows by 100 generated tokens
    reqs = make_requests(12, prompt_len=[100, 400, 37, 250, 60, 90, 300, 12, 80, 200, 64, 150],
                         max_tokens=100, arrival=[0.01 * k for k in range(12)])
    replay(s, reqs)
    assert all(r.status is RequestStatus.FINISHED_LENGTH and r.num_output_tokens == 100 for r in reqs)
    assert s.num_preemptions > 0 and s.kv.num_free_pages == 40


def test_measured_times_are_recorded_and_correct_the_predictor():
    s = sched({"tokens": 1e-5})
    for r in make_requests(1, prompt_len=1000):
        s.add_request(r)
    b = s.schedule(0.0)
    assert b.predicted_time == pytest.approx(0.01)
    s.on_batch_done(b, 0.02, measured_time=0.02)
    rec = s.records[-1]
    assert (rec.composition.seqs, rec.predicted, rec.measured) == (((1000, 0),), b.predicted_time, 0.02)
    assert s.predictor.correction == pytest.approx(1.0 + 0.05 * (SPELL - 1.0))  # ratio 2, clipped to SPELL


def test_an_iteration_after_an_idle_gap_leaves_the_correction_alone():
    """A device that starts slow after idle (the 2-core VM: 1.15-1.25x) must not set the correction
    that back-to-back iterations, the long prompt's chunks, are sized with."""
    s = sched({"tokens": 1e-5})
    reqs = make_requests(3, prompt_len=1000, max_tokens=1, arrival=[0.0, 0.0, 0.0])
    seen = []
    # each 1.2x its 10 ms prediction (within SPELL: no spell); the third starts IDLE_GAP + 10 ms after the second ends
    for r, start in zip(reqs, [0.0, 0.012, 0.024 + IDLE_GAP + 0.01]):
        s.add_request(r)
        b = s.schedule(start)
        assert b.predicted_time == pytest.approx(0.01 * seen[-1] if seen else 0.01)
        s.on_batch_done(b, start + 0.012, measured_time=0.012)
        seen.append(s.predictor.correction)
    assert seen[0] == pytest.approx(1.0 + 0.05 * 0.2) and seen[1] > seen[0]  # the first, then one right after it
    assert seen[2] == seen[1]  # after the idle gap: not learned from
    assert s.records[-1].measured == 0.012  # still recorded


@pytest.mark.parametrize("policy", ["lars", "slo"])
def test_batch_mode_packs_for_throughput_until_a_tpot_target_is_live(policy):
    """batch_mode: with no live TPOT target the budget is infinite (chunks fill the token cap); a
    request that brings its own target makes every batch respect it again."""
    s = sched({"tokens": 1e-5, "decodes": 1e-3}, policy=policy, batch_mode=True, max_num_batched_tokens=6000)
    shorts = make_requests(4, prompt_len=32, max_tokens=8)
    for r in shorts:
        s.add_request(r)
    sample_all(s, s.schedule(0.0), 0.1)
    (long_,) = make_requests(1, prompt_len=100_000, prefix="L")
    s.add_request(long_)
    b = s.schedule(0.1)
    assert shape(b)[0] == ("L0", 0, 5996)  # the token cap less 4 decodes, filled as FCFS fills it; not the 50 ms budget's 4576
    sample_all(s, b, 0.2)
    (tight,) = make_requests(1, prompt_len=32, max_tokens=8, prefix="T")
    tight.tpot_target = 0.02
    s.add_request(tight)
    b = s.schedule(0.2)
    assert b.predicted_time <= 0.02 + 1e-9
    assert SchedulerConfig(policy=policy).batch_mode is False  # servers keep every decode on t_target


@pytest.mark.parametrize("policy", ["slo", "edf", "lars", "fcfs"])
def test_batch_mode_packs_a_batch_job_whole_whatever_the_derived_deadlines(policy):
    """An offline batch (`LLM`): 16 prompts of 512 tokens, 5.5 s of prefill together, each with a
    derived TTFT deadline of 0.51 s. Every policy packs them into one batch, as FCFS does; slo had
    cut the batch to the 2 prompts that could keep their derived deadlines (672 tokens), so the job
    ran its prefill in many small, slower batches."""
    s = sched({"tokens": 6.7e-4}, policy=policy, batch_mode=True, max_num_batched_tokens=8448)
    for r in make_requests(16, prompt_len=512, max_tokens=64):
        s.add_request(r)
    b = s.schedule(0.0)
    assert (len(b.seqs), b.num_tokens) == (16, 8192)


@pytest.mark.parametrize("policy", ["slo", "edf", "lars", "fcfs"])
def test_batch_mode_fills_the_token_cap_as_fcfs_does(policy):
    """The offline benchmark's job under its 512-token cap (16 prompts of 512, here 8 new tokens):
    every iteration before the prefill's last fills the cap whole, and the job takes as many
    iterations as FCFS's. The time-budget policies rounded the cap's room down to a multiple of
    chunk_granularity (480 tokens beside the decodes where FCFS fills 511) while the token bucket
    ran padded to 512 anyway. (Which prompt gets the room is still each policy's order.)"""
    def trace(p):
        s = sched({"tokens": 6.7e-4, "decodes": 1e-4}, policy=p, batch_mode=True, max_num_batched_tokens=512)
        return [it.seqs for it in replay(s, make_requests(16, prompt_len=512, max_tokens=8)).trace]

    got = trace(policy)
    with_prefill = [it for it in got if any(kv < 512 for _, kv, _ in it)]  # (id, kv before, tokens)
    assert [sum(n for _, _, n in it) for it in with_prefill[:-1]] == [512] * (len(with_prefill) - 1)
    assert len(with_prefill) == 17 and len(got) == len(trace("fcfs"))


def test_batch_mode_still_keeps_a_deadline_the_request_gave():
    s = sched({"tokens": 6.7e-4}, policy="slo", batch_mode=True, max_num_batched_tokens=8448)
    for r in make_requests(16, prompt_len=512, max_tokens=64, ttft_deadline=1.0):
        s.add_request(r)
    b = s.schedule(0.0)
    assert [n for _, _, n in shape(b)] == [512, 512, 320]  # ends by 1.0 s: the two it completes keep it
    assert b.predicted_time <= 1.0


def _chunks_after(policy: str, ratios: list[float], long_deadline: float) -> dict[str, int]:
    """Tokens per request in the first batch of a 100K-token prompt (1 s of work at 1e-5 s a
    token, TTFT deadline `long_deadline`) beside a 64-token short due in 0.3 s, after the device
    ran `ratios` times the predictor's raw estimate in the last iterations."""
    s = sched({"tokens": 1e-5}, policy=policy)
    s.add_request(make_requests(1, prompt_len=100_000, max_tokens=1, prefix="L", ttft_deadline=long_deadline)[0])
    s.add_request(make_requests(1, prompt_len=64, ttft_deadline=0.3)[0])
    comp = Composition.of([(100, 0)])
    for ratio in ratios:
        s.predictor.observe(comp, ratio * s.predictor.predict_raw(comp))
    return {rid: n for rid, _, n in shape(s.schedule(0.0))}


def test_slo_work_with_slack_yields_budget_during_a_slow_spell():
    """Two iterations 3x slower than predicted (a spell: the correction stays put): under slo the
    long prompt, 19 s of slack, fills only a third of the budget so the iteration stays near its
    budget in real time; the short due in 0.3 s keeps its whole chunk. A long prompt with little
    slack, and every request under edf, take the whole budget as before."""
    calm = _chunks_after("slo", [], 20.0)
    assert calm["r0"] == 64 and calm["L0"] == pytest.approx(5000 - 64, abs=32)  # chunks in steps of 32
    spell = _chunks_after("slo", [3.0, 3.0], 20.0)
    assert spell["r0"] == 64
    corr = 1.0 + 0.05 * (SPELL - 1.0)  # the first slow iteration's clipped step
    assert spell["L0"] == pytest.approx(0.05 / (3.0 / corr) / (1e-5 * corr) - 64, abs=32)
    one_slow = _chunks_after("slo", [3.0], 20.0)  # the last ratio alone shows a spell too
    assert one_slow["L0"] < 0.4 * calm["L0"]
    assert _chunks_after("slo", [3.0, 3.0], 1.2)["L0"] > 0.95 * calm["L0"]  # slack 0.2 s: no yield
    assert _chunks_after("edf", [3.0, 3.0], 20.0)["L0"] > 0.95 * calm["L0"]


def test_slo_does_not_yield_on_a_device_that_is_steadily_faster_than_its_profile():
    """A correction well below 1 (the device at 0.7x its profile, steadily) is no spell: the long
    prompt takes its whole budget."""
    calm = _chunks_after("slo", [], 20.0)
    fast = _chunks_after("slo", [0.7] * 400, 20.0)
    assert fast["L0"] == pytest.approx(calm["L0"] / 0.7, rel=0.03)


def _shorts_after(policy: str, ratios: list[float], first_deadline: float) -> tuple[dict[str, int], float, float]:
    """(tokens per request, predicted batch time, the predictor's spell ratio x the policy's
    margin for prediction error) of the first batch
    of three 1,000-token prompts (10 ms each at 1e-5 s a token; the first due at `first_deadline`,
    the others at 0.4 s: too little slack to yield in a spell), after the device ran `ratios`
    times the raw estimate."""
    s = sched({"tokens": 1e-5}, policy=policy)
    for i, d in enumerate([first_deadline, 0.4, 0.4]):
        s.add_request(make_requests(1, prompt_len=1000, ttft_deadline=d, prefix=f"s{i}-")[0])
    comp = Composition.of([(100, 0)])
    for ratio in ratios:
        s.predictor.observe(comp, ratio * s.predictor.predict_raw(comp))
    b = s.schedule(0.0)
    return {rid: n for rid, _, n in shape(b)}, b.predicted_time, s.predictor.spell_ratio * s.policy.inflate


def test_slo_packs_no_work_that_would_make_a_prompt_completing_in_the_batch_late():
    """During a 4x spell the batch that completes s0 (due in 0.05 s) takes more work only as far
    as s0's deadline allows at the spell's speed (with slo's 10% margin); calm, or with s0 already out of reach, the three
    prompts share one batch as before."""
    calm, _, _ = _shorts_after("slo", [], 0.05)
    assert calm == {"s0-0": 1000, "s1-0": 1000, "s2-0": 1000}
    spell, t_pred, ratio = _shorts_after("slo", [4.0, 4.0], 0.05)
    assert ratio > 3.5 * 1.1
    assert spell["s0-0"] == 1000 and 0 < spell["s1-0"] < 1000 and "s2-0" not in spell
    assert 0.05 - 32 * 1e-5 * ratio < t_pred * ratio <= 0.05  # s0 finishes by its deadline, the rest filled
    late, _, _ = _shorts_after("slo", [4.0, 4.0], 0.02)  # 10 ms of work x 4 > 20 ms: nothing to keep
    assert late == calm
