"""Synthetic token ids for simulated prompts: runs of segments, so equal leading segments are a
shared prefix the real prefix cache can find, and a 512K-token prompt costs a few bytes.

  RequestSpec.segments ((segment, length), ...) --SegmentTokens--> Request.prompt_token_ids
      token i of segment s = s * SEGMENT_STRIDE + i, the same in every prompt holding s
      prompt[a:b] --> a list built from ranges (what the KV manager hashes page by page)

Segment ids in use: documents 0, 1, ... (shared by every conversation over the document), the
questions and answers of conversations from CONVERSATION_SEGMENTS on, and one segment per plain
request from OWN_SEGMENTS + its index (a prompt of its own, never a cache hit). Pure Python.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

SEGMENT_STRIDE = 1 << 24
"""Token ids per segment: no segment is longer (16.7M tokens)."""
CONVERSATION_SEGMENTS = 1 << 20
OWN_SEGMENTS = 1 << 30


class SegmentTokens(Sequence):
    """The token ids of a prompt made of segments, computed on demand (read-only)."""

    __slots__ = ("_segments", "_starts", "_len")

    def __init__(self, segments: Sequence[tuple[int, int]]):
        starts, n = [], 0
        for seg, length in segments:
            if not 0 < length <= SEGMENT_STRIDE or seg < 0:
                raise ValueError(f"segment ({seg}, {length}): need a segment id >= 0 and 1 <= length "
                                 f"<= {SEGMENT_STRIDE}")
            starts.append(n)
            n += length
        self._segments = tuple(segments)
        self._starts = starts
        self._len = n

    def __len__(self) -> int:
        return self._len

    def __getitem__(self, index):
        if isinstance(index, slice):
            start, stop, step = index.indices(self._len)
            if step != 1:
                raise ValueError("SegmentTokens slices take step 1 only")
            return self._slice(start, stop)
        i = index + self._len if index < 0 else index
        if not 0 <= i < self._len:
            raise IndexError(f"token index {index} out of range for {self._len} tokens")
        k = bisect.bisect_right(self._starts, i) - 1
        return self._segments[k][0] * SEGMENT_STRIDE + i - self._starts[k]

    def _slice(self, start: int, stop: int) -> list[int]:
        out: list[int] = []
        if start >= stop:
            return out
        k = bisect.bisect_right(self._starts, start) - 1
        while k < len(self._segments) and self._starts[k] < stop:
            seg, length = self._segments[k]
            base = self._starts[k]
            lo, hi = max(start, base) - base, min(stop, base + length) - base
            out.extend(range(seg * SEGMENT_STRIDE + lo, seg * SEGMENT_STRIDE + hi))
            k += 1
        return out
