"""The two merges of `combine.finish` agree: each token's own slots gathered and merged
(`merge_tokens`) equals the slot merge then the gather (`merge_slots` + `gather_tokens`), on real
work lists with KV splits, empty splits (lse -inf) and NaN garbage in the slots no row wrote."""

import jax.numpy as jnp
import numpy as np
import pytest

from pallas_kernels import combine
from pallas_kernels.config import KernelConfig
from test_worklist import build, random_meta

KVH, G = 2, 4
SPLITTING = KernelConfig(prefill_rows=32, block_kv=16, num_sms=128, programs_per_sm=2, max_prefill_splits=4,
                         max_decode_splits=4)  # waves large enough that items split


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_token_merge_equals_slot_merge(seed):
    rng = np.random.default_rng(seed)
    meta, T = random_meta(rng)
    pre, dec, tiles = build(meta, T, kv_heads=KVH, G=G, config=SPLITTING)
    assert max(int(np.asarray(w.item_splits).max()) for w in (pre, dec)) > 1  # some item is split
    for work, rows in ((pre, tiles.M), (dec, tiles.MD)):
        R = work.rows.shape[0]
        o = rng.standard_normal((R, rows, 16)).astype(np.float32)
        lse = rng.standard_normal((R, rows)).astype(np.float32)
        lse[rng.random(R) < 0.2] = -np.inf  # splits that saw no key
        unwritten = np.asarray(work.row_item) >= work.num_items
        o[unwritten], lse[unwritten] = np.nan, np.nan
        o, lse = jnp.asarray(o), jnp.asarray(lse)
        want = combine.gather_tokens(*combine.merge_slots(o, lse, work.row_item, work.num_items), work.tok_item,
                                     work.tok_row, kv_heads=KVH, groups=G)
        got = combine.merge_tokens(work, o, lse, kv_heads=KVH, groups=G)
        mine = np.asarray(work.tok_item) >= 0
        assert mine.any()
        for g, w in zip(got, want):
            g, w = np.asarray(g)[mine], np.asarray(w)[mine]
            assert not np.isnan(g).any()
            np.testing.assert_array_equal(np.isneginf(g), np.isneginf(w))
            np.testing.assert_allclose(g[np.isfinite(w)], w[np.isfinite(w)], rtol=1e-5, atol=1e-6)
