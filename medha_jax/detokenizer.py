"""Incremental detokenization with stop strings, for one request.

token -> text: decoding a growing id list from scratch every step is quadratic, and decoding
one token alone breaks multi-byte characters and word-boundary spaces. As in vLLM we decode a
short window `ids[prefix:]` and keep only what extends `ids[prefix:read]`, holding back output
while it ends in an incomplete character (U+FFFD). Stop strings are searched in the text as it
grows; the text is cut where one starts. While stop strings are set, the last
`max(len(stop)) - 1` characters are held back from streaming deltas so a client never sees
text that a stop string later removes.
"""

from __future__ import annotations

_CONTEXT_TOKENS = 5


class IncrementalText:
    def __init__(self, tokenizer, stop: list[str] | tuple[str, ...] = (), prompt_ids: list[int] | None = None):
        self._tok = tokenizer
        self._stop = list(stop)
        self._hold = max((len(s) for s in self._stop), default=1) - 1
        ctx = list(prompt_ids[-_CONTEXT_TOKENS:]) if prompt_ids else []
        self._ids: list[int] = ctx
        self._prefix = 0
        self._read = len(ctx)
        self.text = ""
        self._emitted = 0
        self.stopped = False

    def append(self, token_id: int, special: bool = False) -> str | None:
        """Add a generated token; returns the stop string it completed, if any. Special tokens add no text."""
        if self.stopped or special:
            return None
        self._ids.append(token_id)
        prefix_text = self._tok.decode(self._ids[self._prefix : self._read])
        new_text = self._tok.decode(self._ids[self._prefix :])
        if len(new_text) <= len(prefix_text) or new_text.endswith("\ufffd"):
            return None  # an incomplete character: wait for the next token
        old_len = len(self.text)
        self.text += new_text[len(prefix_text) :]
        self._prefix, self._read = self._read, len(self._ids)
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
        """Everything not yet streamed (call when the request finishes)."""
        delta = self.text[self._emitted :]
        self._emitted = len(self.text)
        return delta
