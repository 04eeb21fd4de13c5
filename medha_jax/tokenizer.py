"""Tokenizer: a thin wrapper over HF `tokenizers` plus streaming detokenization.

Data flow: model dir -> tokenizer.json (required) + tokenizer_config.json (optional: chat
template, bos/eos tokens) -> `Tokenizer` (encode / decode / eos ids / chat template)
-> per request an `IncrementalDetokenizer` that turns a growing list of generated ids into text
deltas, holding back bytes of a multi-byte UTF-8 character until it is complete (one call into
the Rust `tokenizers.decoders.DecodeStream` per token where the installed `tokenizers` has it,
else two windowed `decode` calls per token).
`token_bytes(id)` gives the raw bytes one token stands for (a partial UTF-8 character stays
partial), from the byte-level (GPT-2 / Llama 3) or byte-fallback (<0xNN>) piece. No JAX.
"""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path
from typing import Any, Iterable, Sequence

import tokenizers

try:
    from tokenizers.decoders import DecodeStream
except ImportError:  # an older tokenizers
    DecodeStream = None

REPLACEMENT = "\ufffd"  # what byte-level decoders emit for an incomplete UTF-8 sequence
_BYTE_FALLBACK = re.compile(r"<0x([0-9A-Fa-f]{2})>")  # SentencePiece's piece for one raw byte


@cache
def byte_level_alphabet() -> dict[int, str]:
    """GPT-2's printable stand-in character for every byte (the ByteLevel pre-tokenizer's alphabet)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


@cache
def _alphabet_bytes() -> dict[str, int]:
    return {ch: b for b, ch in byte_level_alphabet().items()}


def _piece_bytes(piece: str) -> bytes | None:
    """The raw bytes of a vocabulary piece, if it is a byte-level or a byte-fallback piece."""
    if m := _BYTE_FALLBACK.fullmatch(piece):
        return bytes([int(m[1], 16)])
    table = _alphabet_bytes()
    if all(ch in table for ch in piece):
        return bytes(table[ch] for ch in piece)
    return None


class Tokenizer:
    """encode/decode with the model's special tokens and (optionally) its chat template."""

    def __init__(self, tok: tokenizers.Tokenizer, *, bos_token_id: int | None = None,
                 eos_token_ids: Iterable[int] = (), chat_template: str | None = None,
                 bos_token: str | None = None, eos_token: str | None = None):
        self.tok = tok
        self.bos_token_id = bos_token_id
        self.eos_token_ids = tuple(dict.fromkeys(int(i) for i in eos_token_ids))
        self.chat_template = chat_template
        self.bos_token = bos_token
        self.eos_token = eos_token

    @classmethod
    def from_dir(cls, model_dir: str | Path, eos_token_ids: Iterable[int] = (),
                 bos_token_id: int | None = None) -> "Tokenizer":
        """Load `<model_dir>/tokenizer.json` (+ tokenizer_config.json when present).

        eos ids are the union of `eos_token_ids` (e.g. from config.json) and the
        tokenizer_config's eos_token; bos likewise, the argument taking precedence.
        """
        d = Path(model_dir)
        path = d / "tokenizer.json"
        if not path.is_file():
            raise FileNotFoundError(
                f"no tokenizer.json in {str(d)!r}; medha-jax needs an HF fast tokenizer file "
                "(convert a SentencePiece tokenizer.model with transformers first)")
        tok = tokenizers.Tokenizer.from_file(str(path))
        conf: dict[str, Any] = {}
        conf_path = d / "tokenizer_config.json"
        if conf_path.is_file():
            conf = json.loads(conf_path.read_text())
        bos, eos = _token_text(conf.get("bos_token")), _token_text(conf.get("eos_token"))
        eos_ids = list(eos_token_ids)
        if eos is not None and tok.token_to_id(eos) is not None:
            eos_ids.append(tok.token_to_id(eos))
        if bos_token_id is None and bos is not None:
            bos_token_id = tok.token_to_id(bos)
        template = conf.get("chat_template")
        if isinstance(template, list):  # [{"name": "default", "template": ...}, ...]
            named = {t.get("name"): t.get("template") for t in template}
            template = named.get("default") or next(iter(named.values()), None)
        return cls(tok, bos_token_id=bos_token_id, eos_token_ids=eos_ids, chat_template=template,
                   bos_token=bos, eos_token=eos)

    @property
    def vocab_size(self) -> int:
        """Size of the tokenizer's vocabulary including added tokens."""
        return self.tok.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """Token ids of text (the tokenizer's post-processor adds bos when add_special_tokens)."""
        if not isinstance(text, str):
            raise TypeError(f"Tokenizer.encode expects str, got {type(text).__name__}")
        return self.tok.encode(text, add_special_tokens=add_special_tokens).ids

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        return self.tok.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def token_to_id(self, token: str) -> int | None:
        return self.tok.token_to_id(token)

    def token_bytes(self, token_id: int) -> bytes:
        """The bytes `token_id` adds to decoded text, exactly: a token holding part of a UTF-8
        character gives those bytes, not U+FFFD's (joined over a sequence they make the bytes the
        sequence decodes from); a skipped special token gives b"". A piece that is neither
        byte-level nor byte-fallback gives the UTF-8 of its decoded text."""
        text = self.decode([token_id])
        if REPLACEMENT not in text:
            return text.encode("utf-8")
        piece = self.tok.id_to_token(token_id)
        raw = _piece_bytes(piece) if piece is not None else None
        if raw is not None and raw.decode("utf-8", "replace") == text:  # the piece is what the decoder read
            return raw
        return text.encode("utf-8")

    def apply_chat_template(self, messages: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
        """Render messages with the tokenizer_config.json chat template (jinja2, sandboxed)."""
        if not self.chat_template:
            raise ValueError("this tokenizer has no chat_template (tokenizer_config.json lacks one)")
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)

        def raise_exception(msg):
            raise ValueError(f"chat template error: {msg}")

        env.globals["raise_exception"] = raise_exception
        return env.from_string(self.chat_template).render(
            messages=messages, add_generation_prompt=add_generation_prompt,
            bos_token=self.bos_token or "", eos_token=self.eos_token or "")

    def incremental(self, prompt_ids: Sequence[int] = (), skip_special_tokens: bool = True) -> "IncrementalDetokenizer":
        """A streaming detokenizer for one request (prompt ids give the decoding context)."""
        return IncrementalDetokenizer(self, prompt_ids, skip_special_tokens)


def _token_text(t: Any) -> str | None:
    """tokenizer_config tokens are strings or {"content": ...} dicts (older AddedToken form)."""
    if isinstance(t, dict):
        return t.get("content")
    return t if isinstance(t, str) else None


# How many earlier tokens to re-decode as context: enough for decoders that treat the first
# token of a string specially (leading-space stripping in SentencePiece-style decoders).
_CONTEXT_TOKENS = 5


def _context(tok: Tokenizer, prompt_ids: Sequence[int], skip: bool) -> list[int]:
    """The prompt's last few ids, less any that end it inside a character: decoded together with
    the first generated ids, those would merge with them into one character of the prompt and
    the generated bytes would never show in the output text."""
    ids = list(prompt_ids)[-_CONTEXT_TOKENS:]
    while ids and tok.decode(ids, skip).endswith(REPLACEMENT):
        ids.pop()
    return ids


def _decode_stream(context: Sequence[int], skip: bool):
    """A Rust incremental decoder primed with `context` ids, or None where the installed
    `tokenizers` has none that takes them (older releases)."""
    if DecodeStream is None:
        return None
    try:
        return DecodeStream(ids=list(context), skip_special_tokens=skip)
    except TypeError:
        return None


class IncrementalDetokenizer:
    """Feed generated ids, get text deltas; `flush()` at the end emits anything held back.

    With `DecodeStream` (recent tokenizers; 0.23 here) each id costs one call into Rust (~0.6 us; the
    windowed decode below ~2 us, two `decode` calls): it returns the text an id completes, or
    None while a character is incomplete, and re-decodes the same kind of window in Rust. A token
    that ends a character and starts another is then emitted with the next one, where the
    windowed path emits the complete character at once; the text is the same."""

    def __init__(self, tok: Tokenizer, prompt_ids: Sequence[int] = (), skip_special_tokens: bool = True):
        self.tok = tok
        self.skip = skip_special_tokens
        self.ids: list[int] = _context(tok, prompt_ids, skip_special_tokens)
        self.prefix_offset = 0
        self.read_offset = len(self.ids)
        self._held = 0  # characters of ids[read_offset:] already emitted while a character is incomplete
        self._deltas: list[str] = []  # joined only when `text` is read: += on a growing str copies it every token
        self._stream = _decode_stream(self.ids, skip_special_tokens)

    def add(self, new_ids: int | Sequence[int]) -> str:
        """Append generated id(s); return the text they complete (possibly "").

        The ids since `read_offset` are decoded in the context of ids[prefix_offset:read_offset]
        (decoders that treat a string's first token specially need that context). While they end
        in an incomplete UTF-8 character (the decoder yields U+FFFD) the complete characters before
        it are emitted and the offsets stay, so the held character comes out whole later.
        """
        stream = self._stream
        if stream is not None and type(new_ids) is int:  # the engine's case: one id per iteration
            try:
                piece = stream.step(self.tok.tok, new_ids)
            except Exception:  # the stream gave up (see _add_streamed)
                self._stream = None
                return self._add_windowed([new_ids])
            self.ids.append(new_ids)
            if piece is None:
                return ""
            self.prefix_offset, self.read_offset = self.read_offset, len(self.ids)
            if piece:
                self._deltas.append(piece)
            return piece
        new_ids = [new_ids] if isinstance(new_ids, int) else list(new_ids)
        if stream is not None:
            return self._add_streamed(new_ids)
        return self._add_windowed(new_ids)

    def _add_windowed(self, new_ids: list[int]) -> str:
        self.ids.extend(new_ids)
        prefix_text = self.tok.decode(self.ids[self.prefix_offset:self.read_offset], self.skip)
        new_text = self.tok.decode(self.ids[self.prefix_offset:], self.skip)
        if len(new_text) <= len(prefix_text):
            return ""
        tail = new_text[len(prefix_text):]
        if tail.endswith(REPLACEMENT):
            safe = tail.rstrip(REPLACEMENT)
            delta, self._held = safe[self._held:], max(self._held, len(safe))
        else:
            delta, self._held = tail[self._held:], 0
            self.prefix_offset, self.read_offset = self.read_offset, len(self.ids)
        self._deltas.append(delta)
        return delta

    def _add_streamed(self, new_ids: list[int]) -> str:
        """`add` through the DecodeStream; the offsets follow its emissions, as on the windowed
        path, so that `flush` and a fall back to that path pick up where it stopped. It falls back
        for good when the stream gives up: its decoded prefix changed under a later id (garbage
        bytes that a byte-fallback decoder renders differently once more arrive)."""
        step, tok, ids, out = self._stream.step, self.tok.tok, self.ids, []
        for j, i in enumerate(new_ids):
            try:
                piece = step(tok, i)
            except Exception:  # tokenizers raises a bare Exception ("Invalid prefix encountered")
                self._stream = None
                if out:
                    self._deltas.append("".join(out))
                return "".join(out) + self._add_windowed(new_ids[j:])
            ids.append(i)
            if piece is not None:
                out.append(piece)
                self.prefix_offset, self.read_offset = self.read_offset, len(ids)
        delta = out[0] if len(out) == 1 else "".join(out)
        if delta:
            self._deltas.append(delta)
        return delta

    def flush(self) -> str:
        """Text of ids still held back (an incomplete character decodes to U+FFFD)."""
        prefix_text = self.tok.decode(self.ids[self.prefix_offset:self.read_offset], self.skip)
        new_text = self.tok.decode(self.ids[self.prefix_offset:], self.skip)
        delta = new_text[len(prefix_text) + self._held:] if len(new_text) > len(prefix_text) else ""
        self.prefix_offset = self.read_offset = len(self.ids)
        self._held = 0
        if self._stream is not None:  # later ids decode without context, as on the windowed path
            self._stream = _decode_stream((), self.skip)
        self._deltas.append(delta)
        return delta

    @property
    def text(self) -> str:
        """Everything emitted so far."""
        return "".join(self._deltas)
