"""Top-N log-probabilities over HTTP with the official `openai` client, against an independent
log-softmax: the demo model's forward run by hand on the prompt plus the tokens generated so far
(a fresh cache per position), its last logits through a float64 log-softmax in numpy."""

from __future__ import annotations

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


def _log_softmax_after(prefix: list[int]) -> np.ndarray:
    mesh = make_mesh({"tp": 1}, devices=jax.devices()[:1])
    _, params, _ = load_demo(mesh, seed=EngineConfig().seed)  # the engine seeds the demo's weights
    k, v = init_kv_cache(DEMO_CONFIG, mesh, 16, 16, jax.numpy.float32)
    logits = make_forward(DEMO_CONFIG, mesh, paged_attention_xla)(params, k, v, make_inputs([(prefix, 0, list(range(16)))], 16))[0]
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
