import pytest

from medha_jax.scheduler import PrefillTimeCache, RuntimePredictor, SchedulerConfig


def make_cache(coefs, tmp=None, **cfg):
    cfg.setdefault("accept_within", 0.0)
    return PrefillTimeCache(RuntimePredictor(coefs), SchedulerConfig(policy="lars", **cfg),
                            cache_dir=None if tmp is None else str(tmp), initial_len=8192)


def test_linear_device_prefill_time_is_tokens_times_cost():
    c = make_cache({"tokens": 1e-4})
    assert c.total_time(100_000) == pytest.approx(10.0, rel=1e-12)
    assert c.remaining_time(100_000, 50_000) == pytest.approx(5.0, rel=1e-12)
    assert c.remaining_time(10, 10) == 0.0 and c.total_time(0) == 0.0


def test_per_chunk_overhead_counts_once_per_adaptive_chunk():
    # const 9 ms + 10 us/token under 50 ms: chunks of 4096 tokens (49.96 ms; 4128 would overrun)
    c = make_cache({"const": 0.009, "tokens": 1e-5})
    assert c.total_time(4096) == pytest.approx(0.04996)
    assert c.total_time(8192) == pytest.approx(0.09992)
    assert c.total_time(1000) == pytest.approx(0.019)  # one exact chunk
    assert c.total_time(5000) == pytest.approx(0.068)  # 4096, then 904 (interpolated on the grid)
    assert c.remaining_time(8192, 4096) == pytest.approx(0.04996)


def test_grows_lazily_and_chunks_shrink_with_kv():
    c = make_cache({"tokens": 1e-5, "chunk_kv": 1e-9})
    assert c.max_len >= 8192
    c.build(100_000)
    assert c.max_len >= 100_000
    t = c.total_time(300_000)
    assert c.max_len >= 300_000
    starts = c._starts
    sizes = [b - a for a, b in zip(starts, starts[1:])]
    assert sizes[0] == 4992 and all(x >= y for x, y in zip(sizes, sizes[1:]))
    # every chunk fits t_target, so the total is at most the number of chunks times t_target
    assert t <= 0.05 * (sum(1 for s in starts if s < 300_000))


def test_persisted_and_keyed_by_setup(tmp_path):
    a = make_cache({"tokens": 1e-5, "chunk_kv": 1e-9}, tmp_path)
    a.total_time(50_000)
    assert a.num_simulated_chunks > 0
    b = make_cache({"tokens": 1e-5, "chunk_kv": 1e-9}, tmp_path)
    assert b.num_simulated_chunks == 0 and b.total_time(50_000) == a.total_time(50_000)
    other = make_cache({"tokens": 1e-5, "chunk_kv": 1e-9}, tmp_path, t_target=0.02)
    assert other.key() != a.key() and other.num_simulated_chunks > 0
    assert len(list(tmp_path.glob("prefill_time_*.json"))) == 2
