"""Tokenizer: same ids as transformers' fast tokenizer, config specials, chat template, and
streaming detokenization that never splits a UTF-8 character."""

from __future__ import annotations

import json

import pytest
import tokenizers

from medha_jax.demo_model import byte_tokenizer
from medha_jax.tokenizer import REPLACEMENT, Tokenizer


@pytest.fixture(scope="module")
def tok(data_dir) -> Tokenizer:
    return Tokenizer.from_dir(data_dir / "tiny-llama3", eos_token_ids=[1])


def test_matches_transformers(tok, golden):
    for probe in golden("tiny-llama3")["tokenizer"]:
        assert tok.encode(probe["text"]) == probe["ids"], probe["text"]
        assert tok.decode(probe["ids"]) == probe["decoded"]


def test_specials_from_tokenizer_config(tok):
    assert tok.bos_token_id == 0 and tok.bos_token == "<|begin_of_text|>"
    assert tok.eos_token_ids == (1, 2)  # config.json's 1 + tokenizer_config's <|eot_id|>
    assert tok.vocab_size <= 512
    text = tok.apply_chat_template([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}])
    assert text == "<|begin_of_text|><|user|>hi<|eot_id|><|assistant|>yo<|eot_id|><|assistant|>"


def test_missing_tokenizer_json(tmp_path):
    with pytest.raises(FileNotFoundError, match="no tokenizer.json in"):
        Tokenizer.from_dir(tmp_path)


def test_no_chat_template(tmp_path, data_dir):
    (tmp_path / "tokenizer.json").write_text((data_dir / "tiny-llama3" / "tokenizer.json").read_text())
    t = Tokenizer.from_dir(tmp_path)
    assert t.chat_template is None and t.eos_token_ids == ()
    with pytest.raises(ValueError, match="no chat_template"):
        t.apply_chat_template([{"role": "user", "content": "x"}])


TEXTS = ["plain ascii words", "héllo wörld — naïve café", "東京タワー 🙂🚀 mixed ascii", "\n\t  spaces  \n"]


@pytest.mark.parametrize("which", ["bpe", "bytes"])
@pytest.mark.parametrize("text", TEXTS)
def test_streaming_deltas_reassemble_the_text(which, text, tok):
    t = tok if which == "bpe" else byte_tokenizer()
    prompt = t.encode("prompt: ")
    ids = t.encode(text, add_special_tokens=False)
    d = t.incremental(prompt_ids=prompt)
    deltas = [d.add(i) for i in ids]
    assert "".join(deltas) + d.flush() == text == d.text
    assert not any(REPLACEMENT in x for x in deltas)
    if which == "bytes" and len(text.encode()) > len(text):  # multi-byte chars held back, then whole
        assert "" in deltas


def sentencepiece_style() -> Tokenizer:
    """A Llama-2-style decoder (▁ for spaces, <0xNN> byte fallback, the string's first space
    stripped), the kind whose output depends on the context a delta is decoded in."""
    from tokenizers import AddedToken, decoders, models

    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    vocab.update({f"<0x{b:02X}>": 3 + b for b in range(256)})
    for piece in ["▁", "▁hello", "▁world", "▁the", "h", "e", "l", "o", "é", "東", "▁▁"]:
        vocab[piece] = len(vocab)
    hf = tokenizers.Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>", byte_fallback=True))
    hf.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                    decoders.Strip(" ", 1, 0)])
    hf.add_special_tokens([AddedToken("<s>", special=True), AddedToken("</s>", special=True)])
    return Tokenizer(hf, bos_token_id=1, eos_token_ids=[2])


@pytest.mark.parametrize("which", ["bpe", "bytes", "sentencepiece"])
@pytest.mark.parametrize("seed", range(4))
def test_decode_stream_gives_the_windowed_decoders_text(which, seed, tok):
    """The Rust DecodeStream path and the windowed-decode path produce the same text, flush
    included, on random id sequences fed one id at a time as the engine does (garbage bytes,
    special tokens, prompts ending mid-character; byte-level and SentencePiece-style decoders).
    On garbage a byte-fallback decoder re-renders earlier bytes once more arrive; DecodeStream
    then raises and the request goes on on the windowed path, which that case exercises."""
    import random

    from medha_jax.tokenizer import DecodeStream, IncrementalDetokenizer

    if DecodeStream is None:
        pytest.skip("tokenizers without DecodeStream: only the windowed path exists")
    t = {"bpe": tok, "bytes": byte_tokenizer(), "sentencepiece": sentencepiece_style()}[which]
    rng = random.Random(seed)
    fell_back = chunked_fell_back = 0
    for _ in range(60):
        prompt = [rng.randrange(t.vocab_size) for _ in range(rng.randint(0, 6))]
        ids = [rng.randrange(t.vocab_size) for _ in range(rng.randint(1, 40))]
        skip = rng.random() < 0.7
        fast = IncrementalDetokenizer(t, prompt, skip)
        slow = IncrementalDetokenizer(t, prompt, skip)
        assert fast._stream is not None
        slow._stream = None
        texts = []
        for d in (fast, slow):
            streamed = "".join(d.add(i) for i in ids) + d.flush()
            assert streamed == d.text
            texts.append(streamed)
        assert texts[0] == texts[1], (prompt, ids, skip)
        fell_back += fast._stream is None
        chunked = IncrementalDetokenizer(t, prompt, skip)  # several ids per call (the stream's other path)
        cuts = sorted(rng.sample(range(1, len(ids)), min(len(ids) - 1, 5))) if len(ids) > 1 else []
        parts = [ids[a:b] for a, b in zip([0, *cuts], [*cuts, len(ids)])]
        streamed = "".join(chunked.add(p) for p in parts) + chunked.flush()
        assert streamed == chunked.text
        chunked_fell_back += chunked._stream is None
        if which != "sentencepiece":  # no fallback: the same text however the ids are grouped
            assert streamed == texts[0]
    if which == "sentencepiece":
        assert fell_back > 0 and chunked_fell_back > 0  # both fallbacks ran


def test_flush_emits_an_incomplete_character(tok):
    t = byte_tokenizer()
    d = t.incremental()
    assert d.add(list("a€".encode())[:-1]) == "a"  # € is 3 bytes; the first 2 are held
    assert d.flush() == REPLACEMENT
    specials = t.incremental()
    assert specials.add([t.bos_token_id, 104, 105]) == "hi"  # skip_special_tokens by default


@pytest.mark.parametrize("which", ["bpe", "bytes"])
@pytest.mark.parametrize("text", TEXTS)
def test_token_bytes_join_to_the_texts_bytes(which, text, tok):
    """Each token's exact bytes, partial UTF-8 characters included (not U+FFFD's bytes)."""
    t = tok if which == "bpe" else byte_tokenizer()
    ids = t.encode(text, add_special_tokens=False)
    assert b"".join(t.token_bytes(i) for i in ids) == text.encode()
    if len(text.encode()) > len(text):  # multi-byte characters: some tokens hold only part of one
        assert any(REPLACEMENT in t.decode([i]) for i in ids)
    assert t.token_bytes(t.bos_token_id) == b""  # a special token adds no text


def test_token_bytes_of_byte_fallback_pieces():
    """SentencePiece-style vocabularies spell a raw byte as <0xNN>."""
    import tokenizers
    from tokenizers import decoders, models

    vocab = {"<unk>": 0, "\u2581a": 1, **{f"<0x{b:02X}>": 2 + b for b in range(256)}}
    hf = tokenizers.Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>", byte_fallback=True))
    hf.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse()])
    t = Tokenizer(hf)
    assert t.token_bytes(2 + 0xE2) == b"\xe2" and t.decode([2 + 0xE2]) == REPLACEMENT
    assert t.token_bytes(1) == b" a"


def test_tokenizer_config_tokens_as_dicts(tmp_path, data_dir):
    (tmp_path / "tokenizer.json").write_text((data_dir / "tiny-llama3" / "tokenizer.json").read_text())
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(
        {"eos_token": {"content": "<|end_of_text|>"}, "bos_token": {"content": "<|begin_of_text|>"},
         "chat_template": [{"name": "default", "template": "{{ messages[0]['content'] }}"}]}))
    t = Tokenizer.from_dir(tmp_path)
    assert t.eos_token_ids == (1,) and t.bos_token_id == 0
    assert t.apply_chat_template([{"role": "user", "content": "x"}]) == "x"
