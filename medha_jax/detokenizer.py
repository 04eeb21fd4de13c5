"""Streaming text for one request: incremental detokenization plus stop strings.

token -> `Tokenizer.detokenizer` (windowed decode that holds back incomplete characters)
      -> text so far -> stop-string search over the newly grown tail -> cut at the first match.
While stop strings are set, the last `max(len(stop)) - 1` characters are held back from
streaming deltas so a client never sees text that a stop string later removes.

A model without a tokenizer (no tokenizer.json) gets `tokenizer=None`: no text, no stop strings.

Storage is O(1) amortized per token: streamed text is kept as a list of pieces that only grows
(never joined until `text` is read) and only the unstreamed tail is searched and cut, so a
4,000-token stream never re-copies its whole text. `so_far()` is an O(1) snapshot of the text.
"""

from __future__ import annotations


class TextSoFar:
    """The text of a request at one moment: the streamed pieces [0, n) plus the held-back tail.

    The pieces list is the `IncrementalText`'s own (it only ever grows), so taking one is O(1);
    `str()` joins them once, on demand."""

    __slots__ = ("_pieces", "_n", "_tail", "_joined")

    def __init__(self, pieces: list[str], n: int, tail: str):
        self._pieces, self._n, self._tail, self._joined = pieces, n, tail, None

    def __str__(self) -> str:
        if self._joined is None:
            self._joined = "".join(self._pieces[: self._n]) + self._tail
        return self._joined


class IncrementalText:
    def __init__(self, tokenizer, stop: list[str] | tuple[str, ...] = (), prompt_ids: list[int] | None = None,
                 skip_special_tokens: bool = True):
        self._detok = (None if tokenizer is None  # None: no text
                       else tokenizer.incremental(prompt_ids or (), skip_special_tokens=skip_special_tokens))
        self._stop = list(stop)
        self._hold = max((len(s) for s in self._stop), default=1) - 1
        self._pieces: list[str] = []  # streamed text, in order; only appended to
        self._emitted = 0  # characters in _pieces
        self._tail = ""  # text not streamed yet (held back, or not asked for)
        self.stopped = False

    @property
    def text(self) -> str:
        """All text so far (cut at a stop string)."""
        return "".join(self._pieces) + self._tail

    def so_far(self) -> TextSoFar:
        return TextSoFar(self._pieces, len(self._pieces), self._tail)

    def append(self, token_id: int, special: bool = False) -> str | None:
        """Add a generated token; returns the stop string it completed, if any. Special tokens add no text."""
        if self.stopped or special or self._detok is None:
            return None
        delta = self._detok.add(token_id)
        if not delta:
            return None  # an incomplete character: wait for the next token
        old_len = self._emitted + len(self._tail)
        self._tail += delta
        return self._check_stop(old_len)

    def _check_stop(self, old_len: int) -> str | None:
        if not self._stop:
            return None
        start = max(0, old_len - self._hold) - self._emitted  # >= 0: streamed text never holds a stop's start
        best = None
        for s in self._stop:
            i = self._tail.find(s, start)
            if i >= 0 and (best is None or i < best[0]):
                best = (i, s)
        if best is None:
            return None
        self._tail = self._tail[: best[0]]
        self.stopped = True
        return best[1]

    def _emit(self, n: int) -> str:
        delta, self._tail = self._tail[:n], self._tail[n:]
        if delta:
            self._pieces.append(delta)
            self._emitted += len(delta)
        return delta

    def take_delta(self) -> str:
        """New text that is safe to stream now."""
        return self._emit(len(self._tail) if self.stopped else max(0, len(self._tail) - self._hold))

    def flush(self) -> str:
        """Everything not yet streamed, incomplete trailing characters included (call at the finish)."""
        if not self.stopped and self._detok is not None:
            old_len = self._emitted + len(self._tail)
            self._tail += self._detok.flush()
            self._check_stop(old_len)
        return self._emit(len(self._tail))
