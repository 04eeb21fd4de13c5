"""Unit checks of the analytic performance model: counts by hand, invariants, bad input."""

import math

import pytest
from hypothesis import given, settings, strategies as st

from medha_jax.hardware import (A100_80GB, H100_80GB, LLAMA3_8B, LLAMA3_70B, AnalyticPerfModel, Efficiency,
                                ModelShape, adaptive_chunks, decode_time, pairs_in_shard, static_chunks,
                                streamed_prefill_time)


def brute_pairs(kv, q, a, b):
    return sum(max(0, min(p + 1, b) - a) for p in range(kv, kv + q))


@settings(max_examples=300, deadline=None)
@given(kv=st.integers(0, 300), q=st.integers(1, 200), a=st.integers(0, 400), w=st.integers(0, 300))
def test_pairs_in_shard_matches_brute_force(kv, q, a, w):
    assert pairs_in_shard(kv, q, a, a + w) == brute_pairs(kv, q, a, a + w)


def test_llama3_8b_counts_by_hand():
    m = LLAMA3_8B
    # q, o: 4096x4096; k, v: 4096x1024; gate, up, down: 4096x14336
    assert m.layer_params == 2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336
    assert abs(m.params / 1e9 - 8.03) < 0.01
    assert m.attn_flops_per_pair == 4 * 128 * 32
    assert m.kv_bytes_per_token == 32 * 2 * 8 * 128 * 2  # 128 KiB per token
    n = 1000
    assert m.prefill_flops(n) == 2 * n * 32 * m.layer_params + 32 * m.attn_flops_per_pair * n * (n + 1) / 2


def test_single_device_decode_is_weight_read_bound_by_hand():
    eff = Efficiency(gemm=0.5, attention=0.5, memory=0.8, link=0.8, iteration_overhead=0.0,
                     layer_overhead=0.0, elementwise_passes=0)
    p = AnalyticPerfModel(LLAMA3_8B, A100_80GB, efficiency=eff)
    m, bw = LLAMA3_8B, A100_80GB.hbm_bandwidth * 0.8
    weights = m.num_layers * m.layer_params * 2 / bw
    kv = m.num_layers * m.kv_bytes_per_token_layer * 101 / bw  # 100 cached + its own
    head = m.hidden_size * m.vocab_size * 2 / bw
    assert math.isclose(p.iteration_time([(1, 100)]), weights + kv + head, rel_tol=1e-12)


def test_long_chunk_is_attention_compute_bound_by_hand():
    eff = Efficiency(gemm=0.5, attention=0.5, memory=0.8, link=0.8, iteration_overhead=0.0,
                     layer_overhead=0.0, elementwise_passes=0)
    p = AnalyticPerfModel(LLAMA3_8B, H100_80GB, efficiency=eff)
    q, kv = 4096, 10**6
    m = LLAMA3_8B
    rate = H100_80GB.peak_flops * 0.5
    attn = m.num_layers * m.attn_flops_per_pair * (q * kv + q * (q + 1) // 2) / rate
    lin = m.num_layers * 2 * q * m.layer_params / rate
    head = max(2 * m.hidden_size * m.vocab_size / rate, m.hidden_size * m.vocab_size * 2 / (H100_80GB.hbm_bandwidth * 0.8))
    assert math.isclose(p.iteration_time([(q, kv)]), attn + lin + head, rel_tol=1e-12)


def test_time_grows_with_work():
    p = AnalyticPerfModel(LLAMA3_8B, A100_80GB, tp=8, spp=2)
    base = [(1, 3000)] * 10
    t0 = p.iteration_time(base)
    assert p.iteration_time(base + [(512, 0)]) > t0
    assert p.iteration_time(base + [(512, 100_000)]) > p.iteration_time(base + [(512, 0)])
    assert p.iteration_time(base + [(1, 3000)]) > t0
    tick, lat = p.tick_and_latency(base)
    assert tick < lat and math.isclose(lat, p.iteration_time(base))


def test_kvp_with_everything_on_group_zero_matches_kvp1_except_nothing():
    p1 = AnalyticPerfModel(LLAMA3_8B, H100_80GB, tp=8, spp=4)
    p2 = AnalyticPerfModel(LLAMA3_8B, H100_80GB, tp=8, spp=4, kvp=2, max_tokens_per_kvp_group=10**6)
    seqs = [(1, 5000), (256, 20_000), (1, 900_000)]
    assert math.isclose(p1.iteration_time(seqs), p2.iteration_time(seqs), rel_tol=1e-12)
    # spanning two groups: the KV reads halve, a merge is paid, the time drops
    long = [(1, 1_999_999)]
    assert p2.iteration_time(long) < p1.iteration_time(long)


def test_spp_streams_prefill_near_linearly():
    n = 10**6
    t1 = streamed_prefill_time(AnalyticPerfModel(LLAMA3_8B, H100_80GB, tp=8), static_chunks(n, 4096))
    t4 = streamed_prefill_time(AnalyticPerfModel(LLAMA3_8B, H100_80GB, tp=8, spp=4), static_chunks(n, 4096))
    assert 3.5 < t1 / t4 < 4.0


def test_adaptive_chunks_shrink_as_kv_grows_and_respect_budget():
    p = AnalyticPerfModel(LLAMA3_8B, A100_80GB, tp=8, spp=2)
    chunks = adaptive_chunks(p, 300_000, 0.05)
    assert sum(q for q, _ in chunks) == 300_000
    sizes = [q for q, _ in chunks[:-1]]
    assert sizes == sorted(sizes, reverse=True) and sizes[0] > sizes[-1]
    assert all(p.iteration_time([c]) <= 0.05 for c in chunks if c[0] > 32)


def test_kv_capacity_and_decode_time():
    p = AnalyticPerfModel(LLAMA3_8B, A100_80GB, tp=8, spp=2)
    cap = p.kv_capacity_tokens()
    assert 5e6 < cap < 1e7  # ~70 GB free per GPU / 8 KiB per token per GPU
    assert decode_time(p, 10**6) > decode_time(p, 1000)


@pytest.mark.parametrize("kwargs, match", [
    (dict(tp=16), "NVLink"), (dict(tp=3), "divide"), (dict(spp=100), "layers"), (dict(kvp=2), "max_tokens_per_kvp_group"),
    (dict(tp=0), ">= 1"),
])
def test_bad_mesh_is_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        AnalyticPerfModel(LLAMA3_70B, H100_80GB, **kwargs)


def test_bad_shapes_and_efficiencies_are_refused():
    with pytest.raises(ValueError, match="num_kv_heads"):
        ModelShape("x", 2, 64, 128, 6, 4, 16, 100)
    with pytest.raises(ValueError, match="gemm"):
        Efficiency(gemm=1.5)
    with pytest.raises(ValueError):
        static_chunks(0, 10)
