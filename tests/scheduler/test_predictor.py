import json
import random

import pytest

from medha_jax.scheduler.attention_tiling import Tiling, decode_span, tile_steps, tile_work, top_two
from medha_jax.scheduler.predictor import (SPELL, SPELL_LONGEST, ProfileKey, RuntimePredictor, StaleProfileError, feature_sums,
                                              profile_path)
from medha_jax.scheduler.records import Composition

TRUE = {"const": 2e-3, "tokens": 3e-5, "chunk_kv": 4e-10, "chunk_sq": 1e-9, "decodes": 5e-5, "decode_kv": 2e-8}


def random_compositions(n, seed=0):
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        seqs = [(1, rng.randint(1, 100_000)) for _ in range(rng.randint(0, 64))]
        seqs += [(rng.randint(2, 4096), rng.choice([0, rng.randint(0, 500_000)])) for _ in range(rng.randint(0, 3))]
        out.append(Composition.of(seqs or [(16, 0)]))
    return out


def test_feature_sums_split_decodes_and_chunks():
    comp = Composition.of([(1, 100), (1, 50), (10, 0), (20, 30), (1, 0)])
    # max context: the (1, 100) decode sees 101 keys; the (20, 30) chunk 50
    # tile work: one whole 32-token tile each (none reaches a 128-token tile), over one whole
    # 128-key block (page tables this short are 8 pages wide): (10, 0), (20, 30), (1, 0)
    # decode span: 5 sequences take 8 slots; the longest decode (100 keys) walks alone in one 128-key
    # tile block, the 8 slots walk the next one's 50 keys in one block of 64 (8 x 128 together)
    # tile steps: the three 32-token tiles one step each (no whole group of 8 blocks below them)
    assert feature_sums(comp) == [1.0, 33, 20 * 30, 100 + 400 + 1, 2, 150, 33 * 33, 33 * 101,
                                  0, 8 * 64 + 128, 3 * 32 * 128, 0, 3]
    assert feature_sums(Composition.of([(1, 300)]))[9] == 512  # alone: 2 tile blocks (4 slots x 320 together)
    # 300 tokens after 1000: a 256-token tile ends at 1256 keys (5 blocks of 256), no 128-token one
    # fits the last 44 tokens, 32-token tiles over them end at 1288, 1300 (6 + 6 blocks)
    t = Tiling()
    assert tile_work(t, 300, 1000) == (256 * 5 * 256, 0.0, 32 * (6 + 6) * 256)
    # 200 tokens after 1000: no 256-token tile, one 128-token tile to 1128 (5 blocks), 32-token
    # tiles over the last 72 end at 1160, 1192, 1200 (5 + 5 + 5 blocks)
    assert tile_work(t, 200, 1000) == (0.0, 128 * 5 * 256, 32 * (5 + 5 + 5) * 256)
    # 400 tokens over none: a 256-token tile (one block), a 128-token one to 384 (2 blocks), then
    # one 32-token tile over the last 16, to 400 (2 blocks)
    assert tile_work(t, 400, 0) == (256 * 1 * 256, 128 * 2 * 256, 32 * 2 * 256)


def test_feature_sums_match_a_per_pair_reference_sum():
    """feature_sums sums the decodes with builtins and loops only over the chunks; a plain loop over
    every pair (the definition in the module docstring) must give the same vector, with decodes
    and chunks interleaved and the (1, 0) pair (a one-token prompt: a chunk) among them."""
    from medha_jax.scheduler.attention_tiling import decode_span

    def reference(comp, t):
        f = dict.fromkeys(("tokens", "chunk_kv", "chunk_sq", "decodes", "decode_kv", "max_ctx",
                           "tiles", "mid", "small", "steps"), 0)
        decode_kvs = []
        for q, kv in comp.seqs:
            f["tokens"] += q
            f["max_ctx"] = max(f["max_ctx"], q + kv)
            if q == 1 and kv > 0:
                f["decodes"] += 1
                f["decode_kv"] += kv
                decode_kvs.append(kv)
            else:
                f["chunk_kv"] += q * kv
                f["chunk_sq"] += q * q
                b, m, s = tile_work(t, q, kv)
                f["tiles"] += b
                f["mid"] += m
                f["small"] += s
                f["steps"] += tile_steps(t, q, kv)
        n = f["tokens"]
        return [1.0, n, f["chunk_kv"], f["chunk_sq"], f["decodes"], f["decode_kv"], n * n, n * f["max_ctx"],
                f["tiles"], decode_span(t, len(comp.seqs), tuple((sorted(decode_kvs)[::-1] + [0, 0])[:2])), f["small"],
                f["mid"], f["steps"]]

    rng = random.Random(3)
    comps = random_compositions(200, seed=3) + [Composition.of([(1, 0)]), Composition.of([(1, 0), (1, 5)])]
    for comp in comps:
        seqs = list(comp.seqs)
        rng.shuffle(seqs)
        mixed = Composition.of(seqs)
        for t in (Tiling(), Tiling.for_engine(page_size=64, min_pages=512, min_seqs=16)):
            assert feature_sums(mixed, t) == reference(mixed, t)


def test_the_longest_decode_walks_alone_when_that_is_less_work():
    """One 32,700-key decode beside fifteen of 600 (the convoy's long request decoding): the batched
    loop would walk 16 slots x 32,704 keys; with the longest apart, 16 slots x 640 plus its own
    32,768 in 256-key tile blocks (`pallas_kernels.reference.decode_alone` makes the same choice).
    Sixteen equal decodes stay together; a lone decode in the 4-slot bucket walks alone, its own keys
    in tile blocks being fewer than 4 slots' worth."""
    t = Tiling()
    assert decode_span(t, 16, (32700, 600)) == 16 * 640 + 32768
    assert feature_sums(Composition.of([(1, 600)] * 15 + [(1, 32700)]))[9] == 16 * 640 + 32768
    assert decode_span(t, 16, (600, 600)) == 16 * 640
    assert decode_span(t, 4, (100, 0)) == 128  # 4 slots x 128 keys together; alone, one 128-key tile block
    assert decode_span(t, 1, (300, 0)) == 512  # together: at least 4 slots x 320; alone: 2 tile blocks of 256
    longest = (0, 0)
    for kv in (5, 9, 7, 9, 1):
        longest = top_two(longest, kv)
    assert longest == (9, 9)
    cost = RuntimePredictor({**TRUE, "decode_span": 1e-6}).batch_cost()
    cost.add_decodes(15, 15 * 600, 600, 600)
    cost.add(1, 32700)
    assert cost.longest == (32700, 600)


def test_the_tiling_follows_the_engine_shapes():
    """64-token pages and a 16-sequence smallest bucket (the convoy benchmark's engine): key blocks
    of 16 x 64 for prefill tiles and one 64-key page for decodes, tables never narrower than the smallest
    page bucket; a lone decode walks its own keys in a tile, where the batched loop would walk 16
    slots (one decode over 16K keys took 37 ms that way, sixteen 40 ms)."""
    t = Tiling.for_engine(page_size=64, min_pages=512, min_seqs=16)
    assert (t.prefill_block_keys, t.decode_block_keys, t.min_table_keys, t.min_seq_slots) == (1024, 64, 32768, 16)
    assert tile_work(t, 16, 300) == (0.0, 0.0, 32 * 1024)  # one narrow tile, one whole block
    assert tile_work(t, 128, 3000) == (0.0, 128 * 4 * 1024, 0.0)  # one mid tile up to 3128 keys: 4 blocks
    one, sixteen = (feature_sums(Composition.of([(1, 16384)] * d), t)[9] for d in (1, 16))
    assert (one, sixteen) == (16384, 16 * 16384)  # a lone decode walks alone: its own keys, not 16 slots
    assert feature_sums(Composition.of([(1, 16384)]))[9] == 16384  # the default engine too (4 slots together)


def test_a_wide_tile_can_cost_less_than_narrow_ones():
    """The engine's tick on the CPU over 16,000 keys (`benchmarks/xla_key_splits.py`, demo model): 96
    tokens 73.6 ms (three 32-query tiles, each walking every key), 128 tokens 62.0 ms (one
    128-query tile). A profile that prices each pair alike and each key-loop step apart (the fit's
    tied pair coefficient and tile_steps) says so, recovers the true costs from exact samples, and
    tells the packer where times may drop; the 128-query tile then costs about what the 256-query
    one does per query this far into a context (its steps walk 4 blocks)."""
    t = Tiling.for_engine(page_size=64, min_pages=512, min_seqs=16)
    true = RuntimePredictor({"const": 2e-3, "tokens": 1e-5, "tile_kv": 2e-8, "mid_tile_kv": 2e-8,
                             "small_tile_kv": 2e-8, "tile_steps": 1.2e-3}, tiling=t)
    comps = [Composition.of([(q, kv)]) for q in (16, 32, 64, 128, 256, 384, 512) for kv in (0, 1024, 4096, 16384)]
    fitted = RuntimePredictor.fit([(c, true.predict(c)) for c in comps], tiling=t)
    for f in ("tile_kv", "mid_tile_kv", "small_tile_kv"):
        assert fitted.coefficients[f] == pytest.approx(2e-8, rel=1e-6)
    assert fitted.coefficients["tile_steps"] == pytest.approx(1.2e-3, rel=1e-6)
    assert fitted.fit_info["features"][-3] == ["tile_kv", "mid_tile_kv", "small_tile_kv"]
    assert fitted.chunk_time(128, 16000) < fitted.chunk_time(96, 16000)
    assert fitted.chunk_time(128, 16000) / 128 < 1.1 * fitted.chunk_time(256, 16000) / 256
    assert fitted.chunk_time(32, 16000) / 32 > 1.3 * fitted.chunk_time(256, 16000) / 256
    assert fitted.chunk_period == 128
    assert RuntimePredictor({"tokens": 1e-3, "tile_kv": 1e-8}).chunk_period == 0  # times only grow


def test_predict_is_the_linear_model():
    p = RuntimePredictor({"const": 1.0, "tokens": 2.0, "decodes": 3.0, "decode_kv": 0.5})
    assert p.predict(Composition.of([(1, 10), (4, 0)])) == 1.0 + 2.0 * 5 + 3.0 + 0.5 * 10


def test_fit_recovers_the_true_coefficients():
    true = RuntimePredictor(TRUE)
    samples = [(c, true.predict(c)) for c in random_compositions(300)]
    fitted = RuntimePredictor.fit(samples)
    for f, v in TRUE.items():
        assert fitted.coefficients[f] == pytest.approx(v, rel=1e-6)
    assert fitted.fit_info["num_samples"] == 300 and fitted.fit_info["train_mape"] < 1e-9


def test_fit_with_noise_reports_held_out_error():
    rng = random.Random(1)
    true = RuntimePredictor(TRUE)
    comps = random_compositions(400, seed=2)
    samples = [(c, true.predict(c) * rng.uniform(0.95, 1.05)) for c in comps]
    fitted = RuntimePredictor.fit(samples[:300])
    assert fitted.mape(samples[300:]) < 0.05


def test_fit_never_returns_negative_coefficients():
    # time falls with decode_kv in this made-up data; NNLS clamps that term to zero
    samples = [(Composition.of([(1, kv)] * d + [(64, 0)]), 0.01 + 0.001 * d - 1e-9 * kv * d)
               for d in (1, 2, 4, 8) for kv in (10, 1000, 100_000)]
    fitted = RuntimePredictor.fit(samples)
    assert all(v >= 0.0 for v in fitted.coefficients.values())
    assert fitted.coefficients["decode_kv"] == 0.0


def test_fit_errors():
    with pytest.raises(ValueError, match="at least 10 samples"):
        RuntimePredictor.fit([(Composition.of([(4, 0)]), 1.0)])
    with pytest.raises(ValueError, match="unknown predictor features"):
        RuntimePredictor.fit([], features=("bogus",))
    with pytest.raises(ValueError, match=">= 0"):
        RuntimePredictor({"tokens": -1.0})


def test_batch_cost_matches_predict():
    p = RuntimePredictor({**TRUE, "tokens_sq": 1e-9, "tokens_maxctx": 1e-8, "tile_kv": 3e-10, "decode_span": 2e-9,
                          "small_tile_kv": 5e-10}, tiling=Tiling.for_engine(page_size=64, min_pages=8, min_seqs=16))
    for comp in random_compositions(20, seed=3):
        cost = p.batch_cost()
        for q, kv in comp.seqs[:-1]:
            cost.add(q, kv)
        q, kv = comp.seqs[-1]
        assert cost.time_with(q, kv) == pytest.approx(p.predict(comp), rel=1e-12)
        cost.add(q, kv)
        assert cost.time() == pytest.approx(p.predict(comp), rel=1e-12)
    assert p.chunk_time(100, 5000) == pytest.approx(p.predict(Composition.of([(100, 5000)])), rel=1e-12)
    assert p.chunk_time(1, 5000) == pytest.approx(p.predict(Composition.of([(1, 5000)])), rel=1e-12)
    assert p.chunk_time(16, 5000) == pytest.approx(p.predict(Composition.of([(16, 5000)])), rel=1e-12)
    decodes = p.batch_cost()
    decodes.add_decodes(3, 300 + 200 + 1000, 1000, 300)
    assert decodes.time() == pytest.approx(p.predict(Composition.of([(1, 300), (1, 200), (1, 1000)])), rel=1e-12)


def test_online_correction_averages_noise_slowly():
    p = RuntimePredictor({"tokens": 1e-3}, ema_alpha=0.5)
    comp = Composition.of([(100, 0)])
    p.observe(comp, 0.12)  # ratio 1.2: within SPELL of the correction, averaged in
    assert p.correction == pytest.approx(1.1)
    p.observe(comp, 0.09)  # ratio 0.9
    assert p.correction == pytest.approx(1.0)
    p.observe(comp, 0.12)
    assert p.predict(comp) == pytest.approx(0.11) and p.predict_raw(comp) == pytest.approx(0.1)
    p.reset_correction()
    assert (p.correction, p.last_ratio) == (1.0, 1.0)


def test_one_outlier_moves_the_correction_by_a_clipped_step_only():
    p = RuntimePredictor({"tokens": 1e-3}, ema_alpha=0.5)
    comp = Composition.of([(100, 0)])
    p.observe(comp, 100.0)  # ratio clamped to 5, then clipped to SPELL x the correction for the average
    assert p.last_ratio == 5.0
    assert p.correction == pytest.approx(1.0 + 0.5 * (SPELL - 1.0))


def test_a_spell_leaves_the_correction_where_it_was():
    """Two or more iterations in a row well off the correction, on the same side, are a spell
    (the VM's: 5-20 iterations 2-3.4x slow): the correction stays put, so that the iterations
    after the spell are not sized for a slow device that is gone."""
    p = RuntimePredictor({"tokens": 1e-3})  # the engine's alpha 0.05
    comp = Composition.of([(100, 0)])
    p.observe(comp, 0.3)  # 3x: one iteration may be noise, a clipped step
    c = p.correction
    assert c == pytest.approx(1.0 + 0.05 * (SPELL - 1.0))
    for ratio in (2.5, 3.4, 2.1, 2.8, 2.2):
        p.observe(comp, ratio / 10)
        assert p.correction == c
    p.observe(comp, 0.1)  # over: the ratio 1 is averaged in
    assert p.correction == pytest.approx(c + 0.05 * (1.0 - c))
    c = p.correction
    for ratio in (0.5, 0.6, 0.7):  # faster for a while: left out the same way
        p.observe(comp, ratio / 10)
    assert p.correction == pytest.approx(c + 0.05 * (c / SPELL - c))  # the first of them, clipped
    fresh = RuntimePredictor({"tokens": 1e-3})  # ten iterations 3x slow: one clipped step (the plain average: 1.8)
    for _ in range(10):
        fresh.observe(comp, 0.3)
    assert fresh.correction < 1.02


def test_a_spell_that_lasts_becomes_the_correction():
    p = RuntimePredictor({"tokens": 1e-3})
    comp = Composition.of([(100, 0)])
    for _ in range(SPELL_LONGEST + 1):
        p.observe(comp, 0.2)
    assert p.correction < 1.02
    for _ in range(300):
        p.observe(comp, 0.2)
    assert p.correction == pytest.approx(2.0, rel=0.02)


def test_slowdown_shows_a_slow_spell_at_once_and_never_goes_below_one():
    p = RuntimePredictor({"tokens": 1e-3})  # the engine's slow correction (alpha 0.05)
    comp = Composition.of([(100, 0)])
    assert p.slowdown == 1.0
    p.observe(comp, 0.4)  # one iteration 4x slow: the correction barely moves, the slowdown shows it
    assert p.correction < 1.02
    assert p.slowdown == pytest.approx(4.0)
    p.observe(comp, 0.1)  # the spell ends
    assert p.slowdown == pytest.approx(p.correction) and p.correction > 1.0
    for _ in range(200):  # faster than predicted: no speed-up is assumed
        p.observe(comp, 0.05)
    assert p.slowdown == 1.0
    p.reset_correction()
    assert (p.correction, p.last_ratio) == (1.0, 1.0)


def test_decode_only_and_prefill_iterations_keep_their_own_corrections():
    """The convoy on the 2-core VM: decode-only iterations ran ~0.5x their raw predictions, those
    with a prefill chunk ~1.1x. One shared factor fell to ~0.5 (nine iterations in ten were
    decode-only), chunks were sized to budgets they then overran 2x, and every chunk iteration
    looked like a slow spell. Each kind now keeps its own average, and interleaving them is no
    spell."""
    p = RuntimePredictor({"const": 1e-3, "tokens": 1e-4, "decode_kv": 1e-6})
    decodes = Composition.of([(1, 500)] * 8)
    chunk = Composition.of([(256, 4000)] + [(1, 500)] * 8)
    for i in range(1000):
        if i % 10 == 9:
            p.observe(chunk, 1.1 * p.predict_raw(chunk))
        else:
            p.observe(decodes, 0.5 * p.predict_raw(decodes))
        if i >= 500:  # settled: each kind within SPELL of its own average, so no spell
            assert p._spell == 0 and p.spell_ratio < SPELL
    assert p.decode_correction == pytest.approx(0.5, rel=0.02)
    assert p.correction == pytest.approx(1.1, rel=0.02)
    assert p.predict(chunk) == pytest.approx(1.1 * p.predict_raw(chunk), rel=0.02)
    assert p.slowdown == pytest.approx(p.correction, rel=0.02)  # prefill work runs at its own kind's speed
    cost = p.batch_cost()  # the packer: decodes alone at theirs, a chunk added at the prefill kind's
    cost.add_decodes(8, 8 * 500, 500, 500)
    assert cost.time() == pytest.approx(p.predict(decodes), rel=1e-12)
    assert cost.prefill_time() == pytest.approx(p.correction * p.predict_raw(decodes), rel=1e-12)
    assert cost.time_with(256, 4000) == pytest.approx(p.predict(chunk), rel=1e-12)
    cost.add(256, 4000)
    assert cost.time() == pytest.approx(p.predict(chunk), rel=1e-12)
    shared = RuntimePredictor({"const": 1e-3, "tokens": 1e-4, "decode_kv": 1e-6})
    shared.observe_raw(shared.predict_raw(chunk), 3.0 * shared.predict_raw(chunk), prefill=False)
    shared.observe_raw(shared.predict_raw(chunk), 3.0 * shared.predict_raw(chunk), prefill=True)
    assert shared._spell == 1  # a slow spell spans both kinds: the device, not the batch, is slow
    assert shared.slowdown == pytest.approx(3.0, rel=0.01)


def test_save_load_roundtrip_and_key_check(tmp_path):
    key = ProfileKey(model="llama3-8b", mesh="tp=8,spp=1,kvp=1", dtype="bfloat16", device="NVIDIA H100 80GB")
    samples = [(c, RuntimePredictor({**TRUE, "tile_kv": 1e-9}).predict(c)) for c in random_compositions(50)]
    p = RuntimePredictor.fit(samples, key=key)
    path = profile_path(str(tmp_path), key)
    assert path.endswith("llama3-8b__tp=8,spp=1,kvp=1__bfloat16__NVIDIA-H100-80GB.json")
    p.save(path, samples)
    q = RuntimePredictor.load(path, expect=key)
    assert q.coefficients == p.coefficients and q.key == key and q.fingerprint() == p.fingerprint()
    assert RuntimePredictor.load_samples(path)[0][0] == samples[0][0]
    other = ProfileKey("llama3-8b", "tp=8,spp=1,kvp=1", "bfloat16", "TPU v5e")
    with pytest.raises(ValueError, match="was measured for"):
        RuntimePredictor.load(path, expect=other)
    assert RuntimePredictor.load(path, tiling=Tiling()).tiling == Tiling()
    wider = Tiling.for_engine(page_size=64, min_pages=8, min_seqs=4)
    with pytest.raises(StaleProfileError, match="attention loops"):  # get_predictor measures it again
        RuntimePredictor.load(path, tiling=wider)
    untiled = tmp_path / "untiled.json"  # a hand-made profile without tiled terms suits any engine
    RuntimePredictor(TRUE).save(str(untiled))
    assert RuntimePredictor.load(str(untiled), tiling=wider).tiling == wider
    p2 = RuntimePredictor.fit(samples, key=key, tiling=wider)
    p2.save(path, samples)
    assert RuntimePredictor.load(path, tiling=wider).tiling == wider and p2.fingerprint() != p.fingerprint()
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"format": "something else"}))
    with pytest.raises(ValueError, match="is not a medha-jax-runtime-profile"):
        RuntimePredictor.load(str(bad))


def test_cross_validated_error_sees_every_sample_once_and_grows_with_noise():
    from medha_jax.runtime_profiler import fit_with_holdout

    true = RuntimePredictor({**TRUE, "tile_kv": 1e-9, "mid_tile_kv": 1e-9, "small_tile_kv": 1e-9, "tile_steps": 1e-4,
                             "decode_span": 5e-9})
    comps = random_compositions(60, seed=4)
    exact = [(c, true.predict(c)) for c in comps]
    fitted, held_out = fit_with_holdout(exact)
    assert held_out < 1e-6 and fitted.fit_info["num_samples"] == 60
    rng = random.Random(5)
    noisy = [(c, t * rng.uniform(0.8, 1.2)) for c, t in exact]
    assert 0.02 < fit_with_holdout(noisy)[1] < 0.3


def test_the_profile_grid_fits_a_kv_pool_smaller_than_the_largest_chunk():
    """max_model_len 1536 and 224 pages with the default 8448-token cap: start-up profiling chose a
    kv for a chunk longer than the pool and raised IndexError (found by benchmarks/prefix_reuse.py)."""
    from medha_jax.runtime_profiler import composition_grid

    for quick in (False, True):
        comps = composition_grid(16384, 256, 1536, quick=quick)
        assert comps and all(q + kv <= 1536 or q == 1 for c in comps for q, kv in c.seqs)


@pytest.mark.parametrize("max_tokens", [8, 16, 64, 2048, 8192])
@pytest.mark.parametrize("max_kv", [8, 17, 1024, 4096])
def test_profile_grid_fits_any_engine_shape(max_tokens, max_kv):
    """The start-up profile's grid for any token budget, sequence cap and context: every
    composition has at most max_seqs sequences and stays inside the context (a budget larger
    than max_model_len crashed the start-up once)."""
    from medha_jax.runtime_profiler import composition_grid

    for max_seqs in (1, 16, 256):
        for quick in (False, True):
            comps = composition_grid(max_tokens, max_seqs, max_kv, quick=quick)
            assert comps
            for c in comps:
                assert len(c.seqs) <= max(max_seqs, 1)
                assert all(q + kv <= max_kv for q, kv in c.seqs), c


def test_tile_steps_count_the_key_loops_steps():
    """The convoy engine's tiling (blocks of 1,024 keys, tables of at least 32,768): a tile walks
    one block per step, except that the 256-query tile walks its whole unmasked blocks 2 at a time
    as one, and the 128- and 32-query tiles walk theirs 4 and 8 side by side, where at least one
    whole group lies below their first row (`pallas_kernels.reference`'s loop;
    tests/kernels/test_xla_backend.py checks the split counts)."""
    t = Tiling.for_engine(page_size=64, min_pages=512, min_seqs=16)
    assert (t.mid_key_splits, t.small_key_splits) == (4, 8)
    # 256 over 30,000: 30 blocks, the 29 whole ones 2 at a time as one (14 + 1), then the diagonal: 16;
    # 128: 29 whole blocks = 7 groups of 4 + 1, then the diagonal: 9
    assert tile_steps(t, 256, 30000) == 16 and tile_steps(t, 128, 30000) == 9
    # 256 over 1,500: one whole block below its first row, no pair: one a step, 2 in all
    assert tile_steps(t, 256, 1500) == 2
    # 160 over 30,000: the mid tile's 9, then a 32-query tile over 30,128..30,160: 29 whole = 3 groups + 5, + 1
    assert tile_steps(t, 160, 30000) == 9 + 9
    # 128 over 2,000: 1 whole block, no group of 4: one a step, 3 in all (to 2,128 keys)
    assert tile_steps(t, 128, 2000) == 3
    # one a step everywhere: the steps are the blocks tile_work counts, whatever the tile
    flat = Tiling.for_engine(page_size=64, min_pages=512, min_seqs=16)
    flat = Tiling(**{**{f: getattr(flat, f) for f in flat.__dataclass_fields__},
                     "mid_key_splits": 1, "small_key_splits": 1, "prefill_big_blocks": 1})
    for q, kv in ((128, 30000), (32, 16000), (400, 5000), (16, 300)):
        b, m, s = tile_work(flat, q, kv)
        block = flat.prefill_block_keys
        assert tile_steps(flat, q, kv) == b / block / 256 + m / block / 128 + s / block / 32


def test_the_steps_price_a_mid_tile_by_its_context():
    """A profile with a cost per step and one per pair: the 128-query tile costs about what the 256-query
    one does per token far into a context (its steps walk 4 blocks side by side, the wide tile's 2 as
    one) and more near its start (no whole group: as many steps as blocks, for half the queries), which
    one coefficient per pair could not say."""
    t = Tiling.for_engine(page_size=64, min_pages=512, min_seqs=16)
    p = RuntimePredictor({"tile_kv": 2e-8, "mid_tile_kv": 2e-8, "tile_steps": 5e-4}, tiling=t)
    far = (p.chunk_time(128, 30000) / 128) / (p.chunk_time(256, 30000) / 256)
    near = (p.chunk_time(128, 2000) / 128) / (p.chunk_time(256, 2000) / 256)
    assert abs(far - 1.0) < 0.01 and near > far + 0.05


def test_a_jittery_decode_only_iteration_is_no_slow_spell():
    """On the convoy's CPU engine a decode-only iteration takes ~5 ms, and a few ms of host jitter
    made one in five read 1.3-2.3x its prediction; the packer's spell signals (`spell_ratio`,
    `slowdown`: how far off the last iteration with prefill work ran) ignore them, and a slow
    prefill iteration still shows at once."""
    p = RuntimePredictor({"const": 1e-3, "tokens": 1e-4, "decode_kv": 1e-6})
    decodes = Composition.of([(1, 500)] * 8)
    chunk = Composition.of([(256, 4000)] + [(1, 500)] * 8)
    p.observe(chunk, p.predict_raw(chunk))
    p.observe(decodes, 2.3 * p.predict_raw(decodes))
    assert p.spell_ratio == 1.0 and p.slowdown == pytest.approx(p.correction)
    p.observe(chunk, 2.0 * p.predict_raw(chunk))
    assert p.spell_ratio == pytest.approx(2.0 / p.correction) and p.slowdown == pytest.approx(2.0)
