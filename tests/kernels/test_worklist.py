"""Work-list invariants (pure jnp, no kernel): coverage, split ranges, POD limits, launch order."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pallas_kernels import worklist
from pallas_kernels.config import KernelConfig, next_pow2
from pallas_kernels.worklist import DECODE, KIND, KV_HI, KV_LO, NOOP, NTOK, PREFILL, SEQ, SLOT, TOK0

CFG = KernelConfig(prefill_rows=32, block_kv=16, num_sms=8, programs_per_sm=2, max_prefill_splits=4,
                   max_decode_splits=4)


def random_meta(rng, S=12, T=200):
    q_lens = rng.choice([0, 1, 1, 2, 7, 16, 33, 50], size=S)
    q_lens = np.where(np.cumsum(q_lens) > T - 4, 0, q_lens)
    ctx = rng.choice([0, 3, 16, 40, 300], size=S)
    kv = ctx + q_lens
    kv = np.where(rng.random(S) < 0.15, rng.integers(0, 20, size=S), kv)  # some KVP shards
    cu = np.concatenate([[0], np.cumsum(q_lens)])
    return (jnp.asarray(cu, jnp.int32), jnp.asarray(ctx, jnp.int32), jnp.asarray(kv, jnp.int32)), T


@functools.partial(jax.jit, static_argnums=(1, 2, 3, 4))
def _build(meta, T, kv_heads, tiles, config):
    kw = dict(num_tokens=T, kv_heads=kv_heads, tiles=tiles, config=config)
    return worklist.prefill_work(*meta, **kw), worklist.decode_work(*meta, **kw)


def build(meta, T, kv_heads=2, G=4, config=CFG):
    tiles = config.tiles(G, page_size=8)
    return (*_build(meta, T, kv_heads, tiles, config), tiles)


def check_kind(work, kind, meta, tiles, kv_heads, T):
    cu, ctx, kv = (np.asarray(x) for x in meta)
    q_len = np.diff(cu)
    rows = np.asarray(work.rows)
    live = rows[rows[:, KIND] == kind]
    assert (rows[len(live):, KIND] == NOOP).all(), "live rows come first in slot order"
    np.testing.assert_array_equal(live[:, SLOT], np.arange(len(live)))
    item = np.asarray(work.row_item)[: len(live)]
    for it in np.unique(item):
        r = live[item == it]
        s = r[0, SEQ]
        assert (r[:, SEQ] == s).all() and (r[:, TOK0] == r[0, TOK0]).all()
        lo = np.sort(r[:, KV_LO])
        assert lo[0] == 0 and (lo % tiles.BK == 0).all()
        assert (r[:, KV_HI] >= r[:, KV_LO]).all() and (r[:, KV_HI] <= max(kv[s], 0) + r[:, KV_LO]).all()
        # the splits tile [0, frontier) without gap or overlap
        frontier = min(ctx[s] + (r[0, TOK0] - cu[s]) + r[0, NTOK], kv[s])
        covered = np.zeros(max(frontier, 1), bool)
        for a, b in zip(r[:, KV_LO], r[:, KV_HI]):
            seg = covered[a:min(b, frontier)]
            assert not seg.any(), "splits overlap"
            covered[a:min(b, frontier)] = True
        assert covered[:frontier].all(), "splits leave a gap"
    # every real token of this kind maps to exactly one tile row that holds it
    tok_item = np.asarray(work.tok_item)
    for t in range(T):
        s = np.searchsorted(cu, t, side="right") - 1
        real = t < cu[-1]
        mine = real and (q_len[s] == 1 if kind == DECODE else q_len[s] >= 2)
        assert (tok_item[t] >= 0) == mine
        if mine:
            r = live[item // kv_heads == tok_item[t]][0]
            k = np.asarray(work.tok_row)[t] // tiles.G
            assert r[SEQ] == s and r[TOK0] + k == t and k < r[NTOK]
    return len(live), len(np.unique(item))


@pytest.mark.parametrize("seed", range(6))
def test_rows_cover_every_token_and_key_once(seed):
    meta, T = random_meta(np.random.default_rng(seed))
    pre, dec, tiles = build(meta, T)
    n_pre, items_pre = check_kind(pre, PREFILL, meta, tiles, 2, T)
    n_dec, items_dec = check_kind(dec, DECODE, meta, tiles, 2, T)
    # POD 4.2.4: prefill programs fill at most `prefill_waves` waves once they are split
    assert n_pre <= max(items_pre, CFG.prefill_waves * CFG.wave)
    assert n_dec <= max(items_dec, CFG.decode_waves * CFG.wave)


def test_few_tiles_are_split_many_are_not():
    cu, ctx, kv = jnp.array([0, 40], jnp.int32), jnp.array([600], jnp.int32), jnp.array([640], jnp.int32)
    pre, _, _ = build((cu, ctx, kv), 48)
    live = int((pre.rows[:, KIND] == PREFILL).sum())
    assert live > 5 * 2, "5 tiles (BQ = 8) x 2 kv heads of ~40 blocks each should be KV-split"
    assert int(jnp.max(pre.rows[:, KV_LO])) > 0
    small_wave = KernelConfig(prefill_rows=32, block_kv=16, num_sms=1, programs_per_sm=1)
    pre, _, _ = build((cu, ctx, kv), 48, config=small_wave)
    assert int((pre.rows[:, KIND] == PREFILL).sum()) == 10, "enough tiles for the waves: no split"


def test_interleave_mixes_kinds_and_pads_to_power_of_two():
    meta, T = random_meta(np.random.default_rng(7), S=16, T=256)
    pre, dec, _ = build(meta, T)
    rows = np.asarray(worklist.interleave(pre, dec))
    assert rows.shape[0] == next_pow2(pre.rows.shape[0] + dec.rows.shape[0])
    kinds = rows[:, KIND]
    n_live = int((kinds != NOOP).sum())
    assert (kinds[n_live:] == NOOP).all()
    for kind, w in ((PREFILL, pre), (DECODE, dec)):
        slots = np.sort(rows[kinds == kind, SLOT])
        np.testing.assert_array_equal(slots, np.arange(int((np.asarray(w.rows)[:, KIND] == kind).sum())))
    n_pre = int((kinds == PREFILL).sum())
    half = kinds[: n_live // 2]
    assert abs(int((half == PREFILL).sum()) - n_pre // 2) <= 1, "kinds mixed in proportion"


def test_shapes_are_static_under_jit():
    traces = []

    @jax.jit
    def launch(cu, ctx, kv):
        traces.append(1)
        pre, dec, _ = build((cu, ctx, kv), 64)
        return worklist.interleave(pre, dec)

    rng = np.random.default_rng(3)
    shapes = set()
    for _ in range(3):
        q = rng.integers(0, 9, size=6)
        cu = jnp.asarray(np.concatenate([[0], np.cumsum(q)]), jnp.int32)
        ctx = jnp.asarray(rng.integers(0, 100, size=6), jnp.int32)
        shapes.add(launch(cu, ctx, ctx + jnp.asarray(q, jnp.int32)).shape)
    assert len(traces) == 1 and len(shapes) == 1
