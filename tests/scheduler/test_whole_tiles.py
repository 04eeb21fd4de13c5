"""Whole attention tiles: the time-budget packer spends the decodes' banked TPOT time to run a
prefill chunk in whole 128-query tiles instead of a partial tile that costs more per token, and
never makes a decode's mean TPOT late for it (`tpot_bank`, `time_budget._whole_tiles`)."""

import pytest

from medha_jax.scheduler import RuntimePredictor
from medha_jax.scheduler.attention_tiling import Tiling
from medha_jax.scheduler.records import Composition
from medha_jax.scheduler.tpot_bank import decode_slack
from tests.scheduler.factories import make_requests, make_scheduler, sample_all, shape

COEFS = {"const": 2e-3, "tokens": 1e-4, "decodes": 1e-3, "tile_kv": 4e-6, "mid_tile_kv": 4e-6, "small_tile_kv": 6e-6}
PRED = RuntimePredictor(COEFS, tiling=Tiling())


def batch_time(chunk: int, n_decodes: int = 2) -> float:
    return PRED.predict(Composition.of([(chunk, 0)] + [(1, 16)] * n_decodes))


T = batch_time(64) * 1.01  # a 64-token chunk beside the two decodes fits, 96 does not


def decoding(bank_cap: float = 1.5, fast_steps: int = 0, coefs: dict = COEFS, t_target: float | None = None):
    """Two short requests past their first token, then `fast_steps` decode-only iterations (4.2 ms
    each: every one puts them T - 4.2 ms further ahead of their mean-TPOT schedule), then a long
    prompt queued; every iteration takes its predicted time (`coefs`; `t_target` default T).
    Returns (scheduler, long request, now)."""
    s = make_scheduler("edf", num_pages=4096, predictor=RuntimePredictor(coefs, tiling=Tiling()),
                       t_target=t_target or T, bank_cap=bank_cap, accept_within=0.0, min_chunk=32,
                       chunk_granularity=32)
    for r in make_requests(2, prompt_len=16, max_tokens=50, ttft_deadline=1.0):
        s.add_request(r)
    now = 0.0
    for _ in range(1 + fast_steps):
        b = s.schedule(now)
        now += b.predicted_time
        sample_all(s, b, now)
    (long_,) = make_requests(1, prompt_len=8192, max_tokens=1, prefix="L", ttft_deadline=100.0)
    s.add_request(long_)
    return s, long_, now


def long_chunk(batch) -> int:
    return sum(n for rid, _, n in shape(batch) if rid.startswith("L"))


def test_the_setting_makes_a_partial_tile_the_largest_chunk_and_a_dear_one():
    assert batch_time(96) > T >= batch_time(64) and batch_time(128) <= 1.5 * T
    per_token = lambda n: PRED.chunk_time(n, 0) / n  # noqa: E731
    assert per_token(64) > 1.1 * per_token(128)


def test_with_the_hard_budget_the_chunk_is_the_partial_tile():
    s, _, now = decoding(bank_cap=1.0, fast_steps=5)
    b = s.schedule(now)
    assert long_chunk(b) == 64 and b.predicted_time <= T


def test_decodes_ahead_of_their_mean_tpot_pay_for_the_whole_tile():
    s, _, now = decoding(fast_steps=5)
    b = s.schedule(now)
    assert long_chunk(b) == 128 and T < b.predicted_time <= 1.5 * T
    # every decode's next token still keeps its mean time per output token within T
    for seq in b.seqs:
        r = seq.request
        if seq.num_tokens == 1:
            assert now + b.predicted_time <= r.first_token_time + r.num_output_tokens * T


def test_a_chunk_of_one_mid_tile_grows_to_one_widest_tile():
    """Where the budget fits 128 tokens and not 256 and the 256-token tile costs less per token
    (the convoy's long prompt between 17K and 22K cached keys: there the 128-query tile's walk
    costs ~1.15x more per token, and 0.09 of a 0.15 s budget was used), decodes ahead of
    schedule pay for the 256-token tile. Here the iteration's fixed time makes the difference."""
    coefs = {"const": 2e-2, "tokens": 1e-4, "decodes": 1e-3, "tile_kv": 4e-8, "mid_tile_kv": 4.6e-8,
             "small_tile_kv": 6e-8}
    pred = RuntimePredictor(coefs, tiling=Tiling())
    t = pred.predict(Composition.of([(128, 0)] + [(1, 16)] * 2)) * 1.01
    assert pred.predict(Composition.of([(256, 0)] + [(1, 16)] * 2)) > t
    assert pred.chunk_time(128, 0) / 128 > 1.1 * pred.chunk_time(256, 0) / 256
    s, _, now = decoding(bank_cap=1.0, fast_steps=5, coefs=coefs, t_target=t)
    assert long_chunk(s.schedule(now)) == 128  # the hard budget: one mid tile
    s, _, now = decoding(fast_steps=5, coefs=coefs, t_target=t)
    b = s.schedule(now)
    assert long_chunk(b) == 256 and t < b.predicted_time <= 1.5 * t
    for seq in b.seqs:  # every decode's mean time per output token still within the target
        if seq.num_tokens == 1:
            r = seq.request
            assert now + b.predicted_time <= r.first_token_time + r.num_output_tokens * t


def test_on_schedule_the_chunk_waits_one_iteration_then_runs_whole():
    s, long_, now = decoding(fast_steps=0)
    b1 = s.schedule(now)  # slack T: 128 does not fit now, but does after a decode-only iteration
    assert long_chunk(b1) == 0 and len(b1.seqs) == 2 and long_ in s.passed_over
    sample_all(s, b1, now + b1.predicted_time)
    now += b1.predicted_time
    b2 = s.schedule(now)
    assert long_chunk(b2) == 128 and b2.predicted_time <= 1.5 * T


def test_never_passed_over_twice_in_a_row():
    s, long_, now = decoding(fast_steps=0)
    b1 = s.schedule(now)
    assert long_chunk(b1) == 0
    sample_all(s, b1, now + T)  # the decode-only iteration ran as long as a full one: nothing banked
    now += T
    b2 = s.schedule(max(now, s.busy_until))
    assert long_chunk(b2) == 64 and long_ not in s.passed_over


def test_bank_cap_is_validated():
    with pytest.raises(ValueError, match="bank_cap must be in"):
        make_scheduler("edf", predictor=PRED, bank_cap=0.5)


def test_decode_slack():
    s, _, now = decoding(fast_steps=3)
    b = s.schedule(now)
    reqs = [seq.request for seq in b.seqs if seq.num_tokens == 1]
    want = min(r.first_token_time + r.num_output_tokens * T - now for r in reqs)
    assert decode_slack(b, now, T) == pytest.approx(want)
    assert decode_slack(b, now + 1.0, T) == pytest.approx(want - 1.0)
    reqs[0].first_token_time = None  # first token still on the device: it arrives when this batch starts
    first = (reqs[0].num_output_tokens + reqs[0].num_pending_tokens) * T
    rest = min(r.first_token_time + r.num_output_tokens * T - now for r in reqs[1:])
    assert decode_slack(b, now, T) == pytest.approx(min(first, rest))
