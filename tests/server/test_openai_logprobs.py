"""Top-N log-probabilities over HTTP with the official `openai` client, against an independent
log-softmax: the demo model's forward run by hand on the prompt plus the tokens generated so far
(a fresh cache per position), its last logits through a float64 log-softmax in numpy."""

from __future__ import annotations

import functools

import jax
import numpy as np
import openai
import pytest

from medha_jax.config import EngineConfig
from medha_jax.demo_model import DEMO_CONFIG, load_demo
from medha_jax.mesh import make_mesh
from medha_jax.model import init_kv_cache, make_forward, make_inputs
from pallas_kernels.reference import paged_attention_xla
from server.chat_template import ChatTemplate

PROMPT = "Alternatives at every step: "
NEW, TOP = 5, 4


@functools.cache
def _demo():
    mesh = make_mesh({"tp": 1}, devices=jax.devices()[:1])
    _, params, _ = load_demo(mesh, seed=EngineConfig().seed)  # the engine seeds the demo's weights
    return mesh, params, jax.jit(make_forward(DEMO_CONFIG, mesh, paged_attention_xla))


def _log_softmax_after(prefix: list[int]) -> np.ndarray:
    return _log_softmax_of(tuple(prefix))


@functools.cache
def _log_softmax_of(prefix: tuple[int, ...]) -> np.ndarray:
    mesh, params, forward = _demo()
    k, v = init_kv_cache(DEMO_CONFIG, mesh, 16, 16, jax.numpy.float32)
    # padded to 256 token slots: one compile for every prefix length
    logits = forward(params, k, v, make_inputs([(list(prefix), 0, list(range(16)))], 16, pad_tokens=256))[0]
    x = np.asarray(logits[0], np.float64)
    return x - x.max() - np.log(np.exp(x - x.max()).sum())


@pytest.fixture(scope="module")
def truth(reference):
    """Per generated position: (sampled id, log-softmax f64[V]) of the greedy continuation."""
    tok = reference.llm.tokenizer
    prompt_ids = tok.encode(PROMPT)
    ids = reference(PROMPT, NEW).token_ids
    return tok, [(t, _log_softmax_after(prompt_ids + ids[:k])) for k, t in enumerate(ids)]


def _check(truth, sampled_lps, tops):
    """The legacy format keys alternatives by their text, so ids that decode alike (specials to "",
    lone UTF-8 bytes to U+FFFD) share one entry: each text holds its most likely id's value."""
    tok, rows = truth
    assert len(sampled_lps) == len(tops) == NEW
    for (t, ls), lp, top in zip(rows, sampled_lps, tops):
        order = np.argsort(-ls)[:TOP]
        assert lp == pytest.approx(ls[t], abs=1e-4)
        want = {}
        for i in order:  # most likely first: a repeated text keeps its first (most likely) value
            want.setdefault(tok.decode([int(i)]), ls[i])
        assert list(top) == list(want)
        np.testing.assert_allclose(list(top.values()), list(want.values()), atol=1e-4)


@pytest.mark.parametrize("stream", [False, True])
def test_completion_logprobs_n(client, truth, stream):
    kw = dict(model="demo", prompt=PROMPT, max_tokens=NEW, temperature=0, logprobs=TOP)
    if stream:
        parts = [c.choices[0].logprobs for c in client.completions.create(stream=True, **kw) if c.choices[0].logprobs]
        lps = [x for p in parts for x in p.token_logprobs]
        tops = [x for p in parts for x in p.top_logprobs]
    else:
        lp = client.completions.create(**kw).choices[0].logprobs
        lps, tops = lp.token_logprobs, lp.top_logprobs
    _check(truth, lps, tops)


@pytest.mark.parametrize("stream", [False, True])
def test_chat_top_logprobs(client, reference, stream):
    """Chat: the alternatives of each content token are {token, logprob, bytes} with the token's
    raw bytes; the values are checked against the log-softmax of the templated prompt."""
    messages = [{"role": "user", "content": "alternatives"}]
    kw = dict(model="demo", messages=messages, max_tokens=3, temperature=0, logprobs=True, top_logprobs=TOP)
    if stream:
        chunks = list(client.chat.completions.create(stream=True, **kw))
        content = [c for ch in chunks if ch.choices and ch.choices[0].logprobs for c in ch.choices[0].logprobs.content]
    else:
        content = client.chat.completions.create(**kw).choices[0].logprobs.content
    template = ChatTemplate(reference.llm.tokenizer)
    ids = template.encode(template.render(messages))
    out = reference(ids, 3).token_ids
    assert len(content) == 3
    for k, c in enumerate(content):
        ls = _log_softmax_after(ids + out[:k])
        order = np.argsort(-ls)[:TOP]
        assert c.logprob == pytest.approx(ls[out[k]], abs=1e-4)
        np.testing.assert_allclose([a.logprob for a in c.top_logprobs], ls[order], atol=1e-4)
        # demo tokens: id b < 256 is the byte b; specials decode to nothing
        assert [bytes(a.bytes) for a in c.top_logprobs] == [bytes([int(i)]) if i < 256 else b"" for i in order]


def test_top_logprobs_limits_name_the_field(client):
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model="demo", prompt="x", max_tokens=1, logprobs=21)
    assert e.value.body["param"] == "logprobs"
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="demo", messages=[{"role": "user", "content": "x"}], max_tokens=1,
                                       top_logprobs=2)
    assert e.value.body["param"] == "top_logprobs" and "logprobs=true" in e.value.body["message"]


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("max_tokens", [0, 3])
def test_echo_with_logprobs_scores_the_prompt(client, reference, stream, max_tokens):
    """lm-evaluation-harness's loglikelihood call (echo, logprobs, max_tokens=0) and echo with a
    completion: the prompt's tokens come first, the first with a null log-probability, each later
    one with its log-probability given the ones before it (checked against the independent
    log-softmax) and its TOP alternatives; then the completion's tokens, if any."""
    tok = reference.llm.tokenizer
    ids = tok.encode(PROMPT)
    kw = dict(model="demo", prompt=PROMPT, max_tokens=max_tokens, temperature=0, echo=True, logprobs=TOP)
    if stream:
        chunks = [c.choices[0] for c in client.completions.create(stream=True, **kw) if c.choices]
        text = "".join(c.text for c in chunks)
        parts = [c.logprobs for c in chunks if c.logprobs]
        lp = dict(tokens=[x for p in parts for x in p.tokens], token_logprobs=[x for p in parts for x in p.token_logprobs],
                  top_logprobs=[x for p in parts for x in p.top_logprobs])
        reason = chunks[-1].finish_reason
    else:
        r = client.completions.create(**kw)
        choice = r.choices[0]
        text, reason = choice.text, choice.finish_reason
        lp = dict(tokens=choice.logprobs.tokens, token_logprobs=choice.logprobs.token_logprobs,
                  top_logprobs=choice.logprobs.top_logprobs)
        assert (r.usage.prompt_tokens, r.usage.completion_tokens) == (len(ids), max_tokens)
    gen = reference(PROMPT, max_tokens).token_ids if max_tokens else []
    assert text == PROMPT + tok.decode(gen) and reason == "length"
    assert len(lp["tokens"]) == len(lp["token_logprobs"]) == len(ids) + len(gen)
    assert lp["tokens"][:len(ids)] == [tok.decode([t]) for t in ids]
    assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None
    for q in range(1, len(ids)):
        ls = _log_softmax_after(ids[:q])
        assert lp["token_logprobs"][q] == pytest.approx(ls[ids[q]], abs=1e-4)
        assert len(lp["top_logprobs"][q]) <= TOP  # keyed by text: ids that decode alike share one
        assert max(lp["top_logprobs"][q].values()) == pytest.approx(ls.max(), abs=1e-4)
    for k, t in enumerate(gen):
        assert lp["token_logprobs"][len(ids) + k] == pytest.approx(_log_softmax_after(ids + gen[:k])[t], abs=1e-4)
