from medha_jax.scheduler.chunking import budget_chunk, largest_chunk

KW = dict(granularity=32, min_chunk=32, max_chunk=8192, accept_within=0.0)


def linear(c, a=0.0):
    return lambda n: a + c * n


def test_largest_multiple_that_fits():
    # 1e-5 s/token, 50 ms budget: 5000 tokens fit, the largest multiple of 32 is 4992
    assert largest_chunk(linear(1e-5), 100_000, 0.05, **KW) == (4992, 4992 * 1e-5)


def test_last_chunk_is_exact():
    assert largest_chunk(linear(1e-5), 1000, 0.05, **KW) == (1000, 1000 * 1e-5)
    assert largest_chunk(linear(1e-5), 7, 0.05, **KW) == (7, 1e-5 * 7)  # below min_chunk


def test_max_chunk_caps_and_no_tail_above_it():
    n, _ = largest_chunk(linear(1e-9), 10_000, 0.05, **KW)
    assert n == 8192


def test_limit_is_not_an_exact_tail():
    # a token cap of 100 leaves only multiples of 32 <= 100
    assert largest_chunk(linear(1e-9), 1000, 0.05, limit=100, **KW)[0] == 96
    assert largest_chunk(linear(1e-9), 1000, 0.05, limit=20, **KW) == (0, 0.0)


def test_nothing_fits():
    assert largest_chunk(linear(1e-5, a=0.06), 1000, 0.05, **KW) == (0, 0.0)
    assert largest_chunk(linear(1e-5), 1000, 0.0, **KW) == (0, 0.0)


def test_accept_within_stops_early_inside_the_band():
    calls = []

    def t(n):
        calls.append(n)
        return 1e-5 * n

    n, tn = largest_chunk(t, 100_000, 0.05, **{**KW, "accept_within": 0.1})
    assert 0.045 <= tn <= 0.05 and n % 32 == 0
    exact_calls = []
    largest_chunk(lambda n: exact_calls.append(n) or 1e-5 * n, 100_000, 0.05, **KW)
    assert len(calls) < len(exact_calls)


def tiled(wide, narrow, a=1e-3, per_token=1e-6):
    """Attention in 128-token tiles (wide) and 32-token tiles over the rest (narrow), as the XLA
    backend runs a chunk: a wide tile costs less than four narrow ones."""
    return lambda n: a + per_token * n + wide * (n // 128) + narrow * -(-(n % 128) // 32)


def test_a_wide_tile_is_taken_where_a_narrower_chunk_would_not_fit():
    # 96 tokens: three narrow tiles (31 ms); 128 tokens: one wide tile (24 ms); budget 28 ms
    t = tiled(wide=0.023, narrow=0.01)
    assert t(96) > 0.028 >= t(128)
    assert largest_chunk(t, 100_000, 0.028, period=128, **KW) == (128, t(128))


def test_the_period_search_finds_what_trying_every_candidate_finds():
    import random

    rng = random.Random(0)
    plain_missed = 0
    for _ in range(400):
        wide, narrow = rng.uniform(1e-3, 0.03), rng.uniform(1e-3, 0.02)
        t = tiled(wide, narrow, a=rng.uniform(0, 5e-3))
        kw = dict(granularity=32, min_chunk=rng.choice([32, 64, 160]), max_chunk=rng.choice([512, 2048]),
                  accept_within=0.0)
        remaining = rng.choice([50, 100, 300, 1000, 5000])
        limit = rng.choice([None, 200, 1000])
        budget = rng.uniform(0.0, 0.3)
        cap = remaining if limit is None else min(remaining, limit)
        cands = [n for n in range(kw["min_chunk"], min(kw["max_chunk"], cap) + 1, 32)]
        if cap == remaining and cap <= kw["max_chunk"] and (cap % 32 or cap < kw["min_chunk"]):
            cands.append(cap)
        want = max((n for n in cands if t(n) <= budget), default=0)
        assert largest_chunk(t, remaining, budget, limit=limit, period=128, **kw)[0] == want
        plain_missed += largest_chunk(t, remaining, budget, limit=limit, **kw)[0] != want
    assert plain_missed > 0  # a search that assumes times only grow misses some


def test_a_dear_narrow_tail_is_cut_back_to_the_whole_tiles():
    # 160 tokens = one wide tile + one narrow one; the narrow one walks as many keys as the wide
    # one for a quarter of the tokens: 128 tokens give more tokens per second, 160 is cut back
    t = tiled(wide=0.1, narrow=0.05, a=1e-3)
    assert largest_chunk(t, 100_000, 0.16, period=128, **KW)[0] == 160
    assert 128 / t(128) > 160 / t(160)
    assert budget_chunk(t, 100_000, 0.16, period=128, **KW) == (128, t(128))
    # the prompt's last chunk is exact: never cut (its narrow tile has to run some time)
    assert budget_chunk(t, 160, 0.16, period=128, **KW) == (160, t(160))
    # a fixed cost per iteration (decodes beside the chunk) that outweighs the narrow tile keeps it
    t2 = tiled(wide=0.02, narrow=0.004, a=0.08)
    assert 160 / t2(160) > 128 / t2(128)
    assert budget_chunk(t2, 100_000, t2(160), period=128, **KW) == (160, t2(160))
    # below one tile, or without tiles (period 0), it is largest_chunk
    assert t(64) < t(128)
    assert budget_chunk(t, 100_000, t(64), period=128, **KW) == (64, t(64))
    assert budget_chunk(t, 100_000, 0.16, **KW) == largest_chunk(t, 100_000, 0.16, **KW)


def test_budget_chunk_gives_the_most_tokens_per_second_of_the_two():
    import random

    rng = random.Random(1)
    cut = 0
    for _ in range(300):
        t = tiled(rng.uniform(1e-3, 0.03), rng.uniform(1e-3, 0.02), a=rng.uniform(0, 0.05))
        remaining, budget = rng.choice([300, 1000, 100_000]), rng.uniform(0.0, 0.3)
        n0, t0 = largest_chunk(t, remaining, budget, period=128, **KW)
        n, tn = budget_chunk(t, remaining, budget, period=128, **KW)
        assert tn <= budget or n == 0
        if n != n0:
            cut += 1
            assert n == n0 // 128 * 128 and n0 < remaining and n / tn >= n0 / t0
        elif n0 > 128 and n0 % 128 and n0 < remaining:
            m = n0 // 128 * 128
            assert n0 / t0 > m / t(m)
    assert cut > 0
