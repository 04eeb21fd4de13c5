"""Streaming text for one request: incremental detokenization plus stop strings.

token -> `Tokenizer.detokenizer` (windowed decode that holds back incomplete characters)
      -> text so far -> stop-string search over the newly grown tail -> cut at the first match.
While stop strings are set, the last `max(len(stop)) - 1` characters are held back from
streaming deltas so a client never sees text that a stop string later removes.
"""

from __future__ import annotations


class IncrementalText:
    def __init__(self, tokenizer, stop: list[str] | tuple[str, ...] = (), prompt_ids: list[int] | None = None):
        self._detok = tokenizer.incremental(prompt_ids or ())
        self._stop = list(stop)
        self._hold = max((len(s) for s in self._stop), default=1) - 1
        self.text = ""
        self._emitted = 0
        self.stopped = False

    def append(self, token_id: int, special: bool = False) -> str | None:
        """Add a generated token; returns the stop string it completed, if any. Special tokens add no text."""
        if self.stopped or special:
            return None
        delta = self._detok.add(token_id)
        if not delta:
            return None  # an incomplete character: wait for the next token
        old_len = len(self.text)
        self.text += delta
        return self._check_stop(old_len)

    def _check_stop(self, old_len: int) -> str | None:
        if not self._stop:
            return None
        start = max(0, old_len - self._hold)
        best = None
        for s in self._stop:
            i = self.text.find(s, start)
            if i >= 0 and (best is None or i < best[0]):
                best = (i, s)
        if best is None:
            return None
        self.text = self.text[: best[0]]
        self.stopped = True
        return best[1]

    def take_delta(self) -> str:
        """New text that is safe to stream now."""
        upto = len(self.text) if self.stopped else max(self._emitted, len(self.text) - self._hold)
        delta = self.text[self._emitted : upto]
        self._emitted = upto
        return delta

    def flush(self) -> str:
        """Everything not yet streamed, incomplete trailing characters included (call at the finish)."""
        if not self.stopped:
            old_len = len(self.text)
            self.text += self._detok.flush()
            self._check_stop(old_len)
        delta = self.text[self._emitted :]
        self._emitted = len(self.text)
        return delta
