"""Shape buckets: XLA compiles one program per shape, so every batch is padded up to a bucket.

Three ladders of powers of two: flattened tokens T, sequences S and page-table width P. A batch
maps to the smallest (T, S, P) that holds it; warm-up compiles every reachable combination
(S <= T), so a running engine never compiles.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass


def next_pow2(n: int) -> int:
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


def pow2_ladder(lo: int, hi: int) -> list[int]:
    """Powers of two from next_pow2(lo) up to the first one >= hi."""
    out, v = [], next_pow2(max(lo, 1))
    while True:
        out.append(v)
        if v >= hi:
            return out
        v *= 2


@dataclass(frozen=True, slots=True)
class Bucket:
    tokens: int
    seqs: int
    pages: int


@dataclass(frozen=True)
class BucketLadders:
    """The shapes the executor compiles."""

    tokens: tuple[int, ...]
    seqs: tuple[int, ...]
    pages: tuple[int, ...]

    @classmethod
    def build(cls, *, max_tokens: int, max_seqs: int, max_pages: int,
              min_tokens: int = 16, min_seqs: int = 4, min_pages: int = 8) -> "BucketLadders":
        min_tokens = max(min_tokens, min_seqs)  # every bucket has S <= T
        return cls(
            tokens=tuple(pow2_ladder(min(min_tokens, max_tokens), max_tokens)),
            seqs=tuple(pow2_ladder(min(min_seqs, max_seqs), max_seqs)),
            pages=tuple(pow2_ladder(min(min_pages, max_pages), max_pages)),
        )

    def all_buckets(self) -> list[Bucket]:
        return [Bucket(t, s, p) for t, s, p in itertools.product(self.tokens, self.seqs, self.pages) if s <= t]

    def pick(self, num_tokens: int, num_seqs: int, num_pages: int) -> Bucket:
        """Smallest bucket that holds the batch; an error names the dimension that overflows."""
        t = _first_at_least(self.tokens, num_tokens, "tokens")
        s = _first_at_least(self.seqs, num_seqs, "sequences")
        p = _first_at_least(self.pages, num_pages, "pages per sequence")
        return Bucket(max(t, s), s, p)  # max: the tokens ladder starts at or above the seqs ladder


def _first_at_least(ladder: tuple[int, ...], n: int, what: str) -> int:
    for v in ladder:
        if v >= n:
            return v
    raise ValueError(f"batch has {n} {what}, more than the largest compiled bucket ({ladder[-1]})")
