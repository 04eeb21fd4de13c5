"""Streaming text and stop strings over the demo byte-level tokenizer (real `tokenizers` object)."""

from medha_jax.demo_model import byte_tokenizer
from medha_jax.detokenizer import IncrementalText

TOK = byte_tokenizer()


def _stream(text, stop=()):
    ids = TOK.encode(text)
    inc = IncrementalText(TOK, stop=stop)
    deltas, hit = [], None
    for t in ids:
        hit = inc.append(t)
        if hit is not None:
            break
        deltas.append(inc.take_delta())
    deltas.append(inc.flush())
    return "".join(deltas), inc.text, hit


def test_multibyte_characters_stream_whole():
    text = "naïve café — 東京 🚀 done"
    streamed, full, hit = _stream(text)
    assert streamed == full == text and hit is None


def test_stop_string_cuts_text_and_is_never_streamed():
    streamed, full, hit = _stream("alpha beta STOP gamma", stop=["STOP", "zzz"])
    assert hit == "STOP" and full == "alpha beta " and streamed == "alpha beta "


def test_earliest_stop_string_wins_and_spans_tokens():
    streamed, full, hit = _stream("one two three", stop=["three", "o t"])
    assert hit == "o t" and full == "one tw" and streamed == "one tw"


def test_generated_bytes_never_merge_into_the_prompts_last_character():
    """A prompt (given as ids) may end inside a character; the reply's bytes belong to the reply."""
    check = "✓".encode()  # e2 9c 93
    prompt = TOK.encode("ok ") + [check[0]]
    out = [check[1], check[2], ord("!")]
    inc = IncrementalText(TOK, prompt_ids=prompt)
    streamed = []
    for t in out:
        inc.append(t)
        streamed.append(inc.take_delta())
    streamed.append(inc.flush())
    assert "".join(streamed) == inc.text == TOK.decode(out) == "\ufffd\ufffd!"



def test_special_tokens_are_left_out_of_the_text_unless_asked_for():
    """skip_special_tokens (SamplingParams, default True): a special token in the middle of the
    output (not one that ends it) renders only when it is False."""
    special = next(t for t in range(TOK.vocab_size) if TOK.decode([t], skip_special_tokens=False)
                   and not TOK.decode([t]))
    ids = TOK.encode("ab", add_special_tokens=False) + [special] + TOK.encode("cd", add_special_tokens=False)
    for skip, want in ((True, "abcd"), (False, "ab" + TOK.decode([special], skip_special_tokens=False) + "cd")):
        inc = IncrementalText(TOK, skip_special_tokens=skip)
        for t in ids:
            inc.append(t)
        assert inc.text == want
