import pytest

from medha_jax.executor.buckets import BucketLadders, pow2_ladder


def test_ladders_are_powers_of_two_covering_the_maximum():
    assert pow2_ladder(16, 512) == [16, 32, 64, 128, 256, 512]
    assert pow2_ladder(16, 300) == [16, 32, 64, 128, 256, 512]
    lad = BucketLadders.build(max_tokens=256, max_seqs=32, max_pages=100, min_tokens=16, min_seqs=4, min_pages=8)
    assert lad.pages == (8, 16, 32, 64, 128)


def test_pick_is_the_smallest_bucket_and_every_pick_is_warmed():
    lad = BucketLadders.build(max_tokens=256, max_seqs=32, max_pages=64)
    warmed = set(lad.all_buckets())
    for t, s, p in [(1, 1, 1), (17, 3, 9), (256, 32, 64), (33, 32, 2)]:
        b = lad.pick(t, s, p)
        assert b in warmed and b.tokens >= t and b.seqs >= s and b.pages >= p
    assert lad.pick(17, 3, 9).tokens == 32 and lad.pick(17, 3, 9).pages == 16


def test_overflow_names_the_dimension():
    lad = BucketLadders.build(max_tokens=64, max_seqs=8, max_pages=16)
    with pytest.raises(ValueError, match="pages per sequence"):
        lad.pick(10, 2, 17)
    with pytest.raises(ValueError, match="tokens"):
        lad.pick(65, 2, 1)
