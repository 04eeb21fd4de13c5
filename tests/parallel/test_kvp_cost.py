"""The scheduler's KVP cost: every group runs the batch; the iteration takes the slowest group's time."""

import pytest

from medha_jax.kv_cache_manager import KVCacheManager
from medha_jax.scheduler.kvp_cost import KVPBatchCost, predict_pairs
from medha_jax.scheduler.predictor import RuntimePredictor
from medha_jax.scheduler.records import Composition

COEF = dict(const=1.0, tokens=0.01, chunk_kv=1e-4, chunk_sq=2e-4, decodes=0.5, decode_kv=1e-3)


def test_groups_by_hand():
    p = RuntimePredictor(COEF)
    cost = KVPBatchCost(p, group_tokens=100, kvp=2)
    cost.add(50, 80)  # a chunk over positions 80..129: keys 80..99 on group 0, 100..129 on group 1
    cost.add(1, 150)  # a decode whose 150 cached keys are 100 on group 0 and 50 on group 1
    g0 = 1.0 + 0.01 * 51 + 1e-4 * 50 * 80 + 2e-4 * 50 * 20 + 0.5 + 1e-3 * 100
    g1 = 1.0 + 0.01 * 51 + 1e-4 * 0 + 2e-4 * 50 * 30 + 0.5 + 1e-3 * 50
    assert cost.time() == pytest.approx(max(g0, g1))
    assert cost.time_with(10, 0) == pytest.approx(max(g0 + 0.1 + 2e-4 * 100, g1 + 0.1))


def test_one_group_matches_the_plain_predictor_and_kvp_caps_long_decodes():
    p = RuntimePredictor(COEF)
    pairs = [(1, 5000), (1, 300), (64, 0)]
    one = KVCacheManager(1000, 16, kvp=1)
    assert predict_pairs(p, one, pairs) == pytest.approx(p.predict(Composition.of(pairs)))
    tiled = RuntimePredictor({**COEF, "tile_kv": 1e-5, "mid_tile_kv": 1.2e-5, "small_tile_kv": 1.5e-5,
                              "decode_span": 1e-6, "tokens_maxctx": 1e-7})
    for extra in ([], [(40, 700)], [(16, 0), (1, 9000)]):
        got = KVPBatchCost(tiled, group_tokens=10**9, kvp=1)
        for q, kv in pairs + extra:
            got.add(q, kv)
        assert got.time() == pytest.approx(tiled.predict(Composition.of(pairs + extra)), rel=1e-12)
    four = KVCacheManager(1000, 16, kvp=4, max_tokens_per_kvp_group=1600)
    # The 5000-token decode reads at most 1600 keys on any group: less than on one device.
    assert predict_pairs(p, four, pairs) < predict_pairs(p, one, pairs)
    assert predict_pairs(p, four, [(1, 5000)]) == pytest.approx(1.0 + 0.01 + 0.5 + 1e-3 * 1600)
