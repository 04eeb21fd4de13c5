"""Medha section 4.1's illustrative scenario, replayed on a linear fake device (1e-4 s/token).

A long request (100K tokens = 10 s of work, TTFT deadline 16 s) arrives at t=0; short ones at
t=5 with 1 s deadlines. The paper's shorts have 0.5 s of work each: two of them due within 1 s
leave zero slack on any device whose batch time adds up over tokens (they must run back to back
from the instant they arrive), which LARS by design does not do (at arrival their relative
slack exceeds the long request's). Here each short has 0.25 s of work, the same story with slack.
"""

from medha_jax.scheduler import RuntimePredictor
from medha_jax.scheduler.replay import replay
from tests.scheduler.factories import make_requests, make_scheduler

C = 1e-4  # seconds per token


def scenario(policy, short_arrivals=(5.0, 5.0)):
    s = make_scheduler(policy, num_pages=16384, predictor=RuntimePredictor({"tokens": C}), long_threshold=1024)
    (long_,) = make_requests(1, prompt_len=100_000, max_tokens=1, ttft_deadline=16.0, prefix="L")
    shorts = make_requests(len(short_arrivals), prompt_len=2500, max_tokens=1, arrival=list(short_arrivals),
                           ttft_deadline=1.0, prefix="S")
    res = replay(s, [long_] + shorts)
    return res, long_, shorts


def test_lars_meets_every_deadline_without_starving_the_long_request():
    res, long_, shorts = scenario("lars")
    assert res.ttft(long_) <= 16.0
    assert all(res.ttft(r) <= 1.0 for r in shorts)
    assert res.tokens_between("L0", 5.0, 6.0) > 0  # the long request kept moving meanwhile


def test_nonpreemptive_fcfs_makes_the_short_requests_miss():
    res, long_, shorts = scenario("fcfs_nonchunked")
    assert res.ttft(long_) == 10.0
    assert all(res.ttft(r) > 1.0 for r in shorts)  # they wait for the 10 s prefill: a convoy
    assert [round(res.ttft(r), 6) for r in shorts] == [5.25, 5.5]


def test_edf_under_a_stream_of_short_requests_starves_then_convoys():
    stream = [5.0 + 0.3 * k for k in range(70)]  # 0.25 s of work every 0.3 s
    res, long_, shorts = scenario("edf", stream)
    # starvation: while shorts have earlier deadlines the long request gets the leftovers only
    assert res.tokens_between("L0", 5.0, 15.0) * C < 0.25 * 10.0
    assert res.ttft(long_) > 16.0
    # convoy: once its deadline is the earliest it runs to the end, and every short arriving
    # meanwhile misses, while those that arrived before it all met theirs
    done = long_.first_token_time
    before = [r for r in shorts if r.arrival_time < 14.9]
    during = [r for r in shorts if 15.2 <= r.arrival_time <= done - 1.0]
    assert before and all(res.ttft(r) <= 1.0 for r in before)
    assert during and all(res.ttft(r) > 1.0 for r in during)
    convoy = [it for it in res.trace if 15.2 < it.start and it.end < done]
    assert convoy and all(rid == "L0" for it in convoy for rid, _, _ in it.seqs)
