from medha_jax.scheduler.chunking import largest_chunk

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
