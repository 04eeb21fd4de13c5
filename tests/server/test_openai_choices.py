"""`n`, `best_of` and `echo` over HTTP with the official `openai` client, against the Python API:
choice j of a seeded request is the Python API's sample with seed + j; best_of returns the
samples with the highest total log-probability; echo puts the prompt's text first."""

from __future__ import annotations

import openai
import pytest

from medha_jax.sampling_params import SamplingParams

PROMPT = "Several ways to go on: "
SEED = 1234


@pytest.fixture(scope="module")
def samples(reference):
    """The Python API's seeded samples of PROMPT: seed SEED + j for j < 4."""
    sps = [SamplingParams(max_tokens=8, temperature=1.0, seed=SEED + j) for j in range(4)]
    return [reference.llm.generate([PROMPT], sp)[0] for sp in sps]


@pytest.mark.parametrize("stream", [False, True])
def test_n_choices_are_the_seeded_samples(client, samples, stream):
    kw = dict(model="demo", prompt=PROMPT, max_tokens=8, temperature=1.0, seed=SEED, n=3)
    if stream:
        texts = [""] * 3
        for ch in client.completions.create(stream=True, **kw):
            texts[ch.choices[0].index] += ch.choices[0].text
    else:
        r = client.completions.create(**kw)
        assert [c.index for c in r.choices] == [0, 1, 2]
        texts = [c.text for c in r.choices]
        assert r.usage.prompt_tokens == len(samples[0].prompt_token_ids)  # the prompt once, not n times
        assert r.usage.completion_tokens == sum(len(s.token_ids) for s in samples[:3])
    assert texts == [s.text for s in samples[:3]]
    assert len(set(texts)) > 1  # the choices are different samples


def test_best_of_returns_the_most_likely_samples(client, samples):
    r = client.completions.create(model="demo", prompt=PROMPT, max_tokens=8, temperature=1.0, seed=SEED, n=2, best_of=4)
    ranked = sorted(samples, key=lambda s: -sum(s.logprobs))
    assert [c.text for c in r.choices] == [s.text for s in ranked[:2]]
    assert r.choices[0].logprobs is None  # ranked by log-probability, but not asked to return it
    assert r.usage.completion_tokens == sum(len(s.token_ids) for s in samples)  # all four were generated


@pytest.mark.parametrize("stream", [False, True])
def test_chat_n_choices(client, reference, stream):
    messages = [{"role": "user", "content": "pick one"}]
    kw = dict(model="demo", messages=messages, max_tokens=6, temperature=1.0, seed=SEED, n=2)
    if stream:
        texts = [""] * 2
        for ch in client.chat.completions.create(stream=True, **kw):
            if ch.choices:
                texts[ch.choices[0].index] += ch.choices[0].delta.content or ""
    else:
        texts = [c.message.content for c in client.chat.completions.create(**kw).choices]
    alone = [client.chat.completions.create(**{**kw, "n": 1, "seed": SEED + j, "stream": False}).choices[0].message.content
             for j in range(2)]
    assert texts == alone


@pytest.mark.parametrize("stream", [False, True])
def test_echo_puts_the_prompt_first(client, reference, stream):
    want = reference(PROMPT, 6).text
    kw = dict(model="demo", prompt=PROMPT, max_tokens=6, temperature=0, echo=True)
    if stream:
        text = "".join(ch.choices[0].text for ch in client.completions.create(stream=True, **kw))
    else:
        text = client.completions.create(**kw).choices[0].text
    assert text == PROMPT + want
    ids = reference.llm.tokenizer.encode(PROMPT)
    r = client.completions.create(model="demo", prompt=ids, max_tokens=6, temperature=0, echo=True)
    assert r.choices[0].text == reference.llm.tokenizer.decode(ids) + reference(ids, 6).text


@pytest.mark.parametrize("kw, param", [
    (dict(n=17), "n"),
    (dict(n=3, best_of=2), "best_of"),
    (dict(n=1, best_of=2, stream=True), "best_of"),
    (dict(echo=True, max_tokens=0, n=2), "max_tokens"),
    (dict(n="2"), "n"),
])
def test_choice_limits_name_the_field(client, kw, param):
    with pytest.raises(openai.BadRequestError) as e:
        r = client.completions.create(model="demo", prompt="x", **{"max_tokens": 1, **kw})
        if kw.get("stream"):
            list(r)
    assert e.value.body["param"] == param
