"""Workload generators (fitted to published moments) and trace files."""

import numpy as np
import pytest

from medha_jax.sim.workload import (LONG_OUTPUT_PARAMS, SHAREGPT4_OUTPUT, SHAREGPT4_PROMPT, RequestSpec, WorkloadSpec,
                                    arrival_times, generate, read_trace, sample_long, sample_short, write_trace)


def test_short_requests_match_sharegpt4_moments():
    p, o = sample_short(np.random.default_rng(0), 200_000)
    assert p.max() <= 8192 and p.min() >= 1
    assert np.mean(p) == pytest.approx(SHAREGPT4_PROMPT["mean"], rel=0.05)
    assert np.median(p) == pytest.approx(SHAREGPT4_PROMPT["median"], rel=0.02)
    assert np.percentile(p, 90) == pytest.approx(SHAREGPT4_PROMPT["p90"], rel=0.05)
    assert np.mean(o) == pytest.approx(SHAREGPT4_OUTPUT["mean"], rel=0.02)
    assert np.median(o) == pytest.approx(SHAREGPT4_OUTPUT["median"], rel=0.02)


def test_long_requests_are_uniform_with_swe_like_outputs():
    p, o = sample_long(np.random.default_rng(1), 50_000, 131072, 1048576)
    assert p.min() >= 131072 and p.max() <= 1048576
    assert np.mean(p) == pytest.approx((131072 + 1048576) / 2, rel=0.01)
    assert np.median(o) == pytest.approx(518, rel=0.03)
    assert np.percentile(o, 90) == pytest.approx(808, rel=0.05)
    assert LONG_OUTPUT_PARAMS[1] > 0


@pytest.mark.parametrize("process, cv", [("poisson", 1.0), ("gamma", 2.0), ("gamma", 0.5)])
def test_arrival_rate_and_burstiness(process, cv):
    t = arrival_times(np.random.default_rng(2), qps=2.0, duration=20_000, process=process, cv=cv)
    assert len(t) / 20_000 == pytest.approx(2.0, rel=0.03)
    gaps = np.diff(t)
    assert np.std(gaps) / np.mean(gaps) == pytest.approx(cv, rel=0.05)


def test_generate_is_deterministic_and_mixes_long_requests():
    w = WorkloadSpec(qps=1.0, duration=4000, long_fraction=0.05, seed=7)
    a, b = generate(w), generate(w)
    assert a == b
    assert generate(WorkloadSpec(qps=1.0, duration=4000, seed=8)) != a
    frac = sum(s.prompt_tokens >= 131072 for s in a) / len(a)
    assert frac == pytest.approx(0.05, abs=0.015)
    assert all(x.arrival <= y.arrival for x, y in zip(a, a[1:]))
    assert not any(s.prompt_tokens > 8192 for s in generate(WorkloadSpec(qps=1.0, duration=500, long_fraction=0.0)))


def test_trace_round_trip(tmp_path):
    specs = [RequestSpec(0.0, 100, 5, 2.0), RequestSpec(1.5, 7, 1)]
    path = tmp_path / "t.csv"
    write_trace(str(path), specs)
    back = read_trace(str(path))
    assert [(s.arrival, s.prompt_tokens, s.output_tokens, s.ttft_deadline) for s in back] == [
        (0.0, 100, 5, 2.0), (1.5, 7, 1, None)]


@pytest.mark.parametrize("text, match", [
    ("arrival_s,prompt_tokens\n0,5\n", "missing output_tokens"),
    ("arrival_s,prompt_tokens,output_tokens\n0,abc,1\n", ":2:"),
    ("arrival_s,prompt_tokens,output_tokens\n0,0,1\n", ">= 1"),
    ("arrival_s,prompt_tokens,output_tokens\n-1,5,1\n", "arrival"),
    ("arrival_s,prompt_tokens,output_tokens\n0,5.5,1\n", "integer"),
    ("arrival_s,prompt_tokens,output_tokens,ttft_deadline_s\n0,5,1,0\n", "ttft_deadline"),
    ("arrival_s,prompt_tokens,output_tokens\n", "no requests"),
])
def test_bad_traces_are_refused_with_the_line(tmp_path, text, match):
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(ValueError, match=match):
        read_trace(str(path))


def test_bad_workload_parameters():
    with pytest.raises(ValueError, match="long_fraction"):
        WorkloadSpec(long_fraction=1.5)
    with pytest.raises(ValueError, match="arrival process"):
        arrival_times(np.random.default_rng(0), 1.0, 10.0, "uniform")
