"""OpenAI-compatible HTTP front end, driven by the official `openai` client and raw httpx."""

from __future__ import annotations

import re
import time

import httpx
import openai
import pytest

PROMPTS = ["Hello world", "The quick brown fox"]


@pytest.fixture(scope="module")
def http(served):
    with httpx.Client(base_url=served.http_url, timeout=30) as c:
        yield c


@pytest.mark.parametrize("prompt", PROMPTS)
def test_completion_equals_python_api(client, reference, prompt):
    ref = reference(prompt, 8)
    r = client.completions.create(model="demo", prompt=prompt, max_tokens=8, temperature=0)
    assert r.choices[0].text == ref.text
    assert r.choices[0].finish_reason == ref.finish_reason
    assert r.usage.prompt_tokens == len(ref.prompt_token_ids) and r.usage.completion_tokens == len(ref.token_ids)


@pytest.mark.parametrize("prompt", PROMPTS)
def test_streamed_completion_equals_python_api(client, reference, prompt):
    ref = reference(prompt, 8)
    chunks = list(client.completions.create(model="demo", prompt=prompt, max_tokens=8, temperature=0, stream=True,
                                            stream_options={"include_usage": True}))
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert text == ref.text
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == ref.finish_reason
    assert chunks[-1].usage.completion_tokens == len(ref.token_ids)


def test_token_id_prompt_logprobs_and_extensions(client, reference):
    prompt = [256, 72, 105, 33]
    ref = reference(prompt, 6, logprobs=True)
    r = client.completions.create(model="demo", prompt=prompt, max_tokens=6, temperature=0, logprobs=0,
                                  extra_body={"top_k": 0, "priority": 1, "ttft_deadline": 5.0})
    assert r.choices[0].text == ref.text
    assert r.choices[0].logprobs.token_logprobs == pytest.approx(ref.logprobs, abs=1e-4)


def test_batch_of_prompts_streams_every_choice(client, reference):
    chunks = list(client.completions.create(model="demo", prompt=PROMPTS, max_tokens=8, temperature=0, stream=True))
    for i, p in enumerate(PROMPTS):
        assert "".join(c.choices[0].text for c in chunks if c.choices[0].index == i) == reference(p, 8).text
    r = client.completions.create(model="demo", prompt=PROMPTS, max_tokens=8, temperature=0)
    assert [c.text for c in r.choices] == [reference(p, 8).text for p in PROMPTS]


def _chat_prompt_ids(llm, messages):
    from server.chat_template import ChatTemplate

    t = ChatTemplate(llm.tokenizer)
    return t.encode(t.render(messages))


@pytest.mark.parametrize("stream", [False, True])
def test_chat_equals_python_api_on_the_templated_prompt(client, reference, stream):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"}]
    ids = _chat_prompt_ids(reference.llm, messages)
    assert ids[0] == 256 and ids.count(256) == 1  # the template's BOS, not a second one
    ref = reference(ids, 8)
    if stream:
        chunks = list(client.chat.completions.create(model="demo", messages=messages, max_tokens=8, temperature=0, stream=True))
        assert chunks[0].choices[0].delta.role == "assistant"
        text = "".join(c.choices[0].delta.content or "" for c in chunks)
        reason = chunks[-1].choices[0].finish_reason
    else:
        r = client.chat.completions.create(model="demo", messages=messages, max_tokens=8, temperature=0)
        text, reason = r.choices[0].message.content, r.choices[0].finish_reason
        assert r.usage.prompt_tokens == len(ids)
    assert text == ref.text and reason == ref.finish_reason


def test_models_health_metrics(client, http, served):
    assert [m.id for m in client.models.list().data] == ["demo"]
    h = http.get("/health")
    assert h.status_code == 200 and h.json()["status"] == "serving"
    assert h.json()["total_kv_pages"] == served.engine.kv_manager.num_total_pages
    client.completions.create(model="demo", prompt="metrics", max_tokens=3, temperature=0)
    m = http.get("/metrics").text
    for name in ("medha_queue_depth", "medha_running_requests", "medha_kv_free_pages", "medha_iteration_seconds_bucket",
                 "medha_ttft_seconds_bucket", "medha_tpot_seconds_bucket", "medha_recompilations_total",
                 "medha_padded_iterations_total", "medha_compile_waits_total"):
        assert name in m, name
    assert 'medha_requests_finished_total{finish_reason="length"}' in m
    assert "medha_recompilations_total 0.0" in m
    hits = lambda text: float(re.search(r"^medha_prefix_cache_hit_tokens_total (\S+)$", text, re.M).group(1))  # noqa: E731
    before = hits(m)
    for _ in range(2):  # the second reuses the first's full KV pages
        client.completions.create(model="demo", prompt="the same long prompt, twice " * 4, max_tokens=1, temperature=0)
    assert hits(http.get("/metrics").text) > before


@pytest.mark.parametrize("body, param", [
    ({"model": "demo"}, "prompt"),
    ({"model": "demo", "prompt": "x", "max_tokens": 0}, "max_tokens"),
    ({"model": "demo", "prompt": "x", "max_tokens": "5"}, "max_tokens"),
    ({"model": "demo", "prompt": "x", "temperature": -0.5}, "temperature"),
    ({"model": "demo", "prompt": "x", "top_p": 1.5}, "top_p"),
    ({"model": "demo", "prompt": "x", "n": 17}, "n"),
    ({"model": "demo", "prompt": "x", "logprobs": 21}, "logprobs"),
    ({"model": "demo", "prompt": "x", "frobnicate": 1}, "frobnicate"),
    ({"model": "demo", "prompt": [1, 2, 100000]}, "prompt"),
    ({"model": "demo", "prompt": "x" * 400}, "prompt"),
    ({"model": "demo", "prompt": "x" * 9000}, "prompt"),  # tokenized off the event loop
    ({"model": "demo", "prompt": ["ok", [1] * 9000]}, "prompt[1]"),
    ({"model": "demo", "prompt": "x", "stream_options": {"include_usage": True}}, "stream_options"),
    ({"model": "demo", "prompt": "x", "temperature": 1e308}, "temperature"),  # inf once packed as float32
    ({"model": "demo", "prompt": "x", "temperature": 1e-30}, "temperature"),
    ({"model": "demo", "prompt": "x", "top_k": 2**40}, "top_k"),  # int32 when packed
    ({"model": "demo", "prompt": "x", "presence_penalty": 1e308}, "presence_penalty"),
    ({"model": "demo", "prompt": "x", "ttft_deadline": 1e308}, "ttft_deadline"),
    ({"model": "demo", "prompt": "x", "tpot_target": 1e-9}, "tpot_target"),
])
def test_completion_errors_name_the_field(http, served, body, param):
    r = http.post("/v1/completions", json=body)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["type"] == "invalid_request_error" and err["param"] == param and err["message"]
    served.wait_idle()


@pytest.mark.parametrize("body, param", [
    ({"model": "demo"}, "messages"),
    ({"model": "demo", "messages": []}, "messages"),
    ({"model": "demo", "messages": [{"role": "wizard", "content": "x"}]}, "messages[0].role"),
    ({"model": "demo", "messages": [{"role": "user", "content": 5}]}, "messages[0].content"),
    ({"model": "demo", "messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]}, "tools"),
])
def test_chat_errors_name_the_field(http, body, param):
    r = http.post("/v1/chat/completions", json=body)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param


@pytest.mark.parametrize("field, literal", [
    ("temperature", "Infinity"), ("top_p", "-Infinity"), ("top_p", "NaN"), ("frequency_penalty", "NaN"),
    ("presence_penalty", "Infinity"), ("ttft_deadline", "Infinity"), ("tpot_target", "NaN"),
])
def test_non_finite_numbers_are_400_naming_the_field(http, field, literal):
    body = f'{{"prompt": "x", "max_tokens": 1, "{field}": {literal}}}'.encode()  # Python's json reads these
    r = http.post("/v1/completions", content=body, headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and r.json()["error"]["param"] == field, r.text


@pytest.mark.parametrize("path, body, param", [
    ("/v1/completions", b'{"prompt": "a\\ud800b", "max_tokens": 1}', "prompt"),
    ("/v1/completions", b'{"prompt": ["ok", "\\udfff"], "max_tokens": 1}', "prompt[1]"),
    ("/v1/completions", b'{"prompt": "x", "stop": ["ok", "\\ud83d"], "max_tokens": 1}', "stop[1]"),
    ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "\\udc00"}], "max_tokens": 1}',
     "messages[0].content"),
    ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": [{"type": "text", "text": "\\ud800"}]}]}',
     "messages[0].content[0].text"),
])
def test_lone_surrogates_are_400_naming_the_field(http, path, body, param):
    r = http.post(path, content=body, headers={"Content-Type": "application/json"})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == param and "lone UTF-16 surrogate" in err["message"]
    r = http.post("/v1/completions", content=b'{"prompt": "\\ud83d\\ude00", "max_tokens": 1}',  # a pair is fine
                  headers={"Content-Type": "application/json"})
    assert r.status_code == 200, r.text


@pytest.mark.parametrize("prompt, first", [
    ([256, 97, 240], "continuation"),  # ends inside a character; the reply's byte continues it
    ("Hello world", "special"),  # a reserved special token: decoded (skip_special_tokens) it is ""
])
def test_one_token_reply_carries_the_decode_of_its_token(client, reference, prompt, first):
    ids = reference(prompt, 1).token_ids
    assert len(ids) == 1 and (0x80 <= ids[0] < 0xC0 if first == "continuation" else 259 <= ids[0] < 512)
    want = reference.llm.tokenizer.decode(ids)
    r = client.completions.create(model="demo", prompt=prompt, max_tokens=1, temperature=0)
    assert r.choices[0].text == want and r.usage.completion_tokens == 1
    chunks = list(client.completions.create(model="demo", prompt=prompt, max_tokens=1, temperature=0, stream=True))
    assert "".join(c.choices[0].text for c in chunks) == want
    if first == "continuation":
        assert want == "\ufffd"


@pytest.mark.parametrize("stream", [False, True])
def test_chat_logprob_bytes_are_the_tokens_raw_bytes(client, reference, stream):
    messages = [{"role": "user", "content": "say 0"}]
    ids = reference(_chat_prompt_ids(reference.llm, messages), 8).token_ids
    assert any(0x80 <= t < 0xC0 for t in ids) and any(t >= 256 for t in ids)  # a lone UTF-8 continuation, a special
    kw = dict(model="demo", messages=messages, max_tokens=8, temperature=0, logprobs=True)
    if stream:
        chunks = list(client.chat.completions.create(stream=True, **kw))
        content = [c for ch in chunks if ch.choices and ch.choices[0].logprobs for c in ch.choices[0].logprobs.content]
        text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    else:
        r = client.chat.completions.create(**kw)
        content, text = r.choices[0].logprobs.content, r.choices[0].message.content
    # Demo tokens: id b < 256 is the byte b; specials decode to nothing.
    assert [bytes(c.bytes) for c in content] == [bytes([t]) if t < 256 else b"" for t in ids]
    assert b"".join(bytes(c.bytes) for c in content).decode("utf-8", "replace") == text


def test_other_errors_use_the_openai_shape(client, http):
    with pytest.raises(openai.NotFoundError) as e:
        client.completions.create(model="gpt-4", prompt="x", max_tokens=1)
    assert e.value.body["param"] == "model" and e.value.body["code"] == "model_not_found"
    r = http.post("/v1/completions", content=b"{not json", headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and "JSON" in r.json()["error"]["message"]
    r = http.get("/v1/nothing-here")
    assert r.status_code == 404 and r.json()["error"]["type"] == "invalid_request_error"
    r = http.post("/v1/completions", content=b'{"prompt": "x", "temperature": NaN}',
                  headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "temperature"


def test_disconnect_mid_stream_aborts_and_frees_pages(served):
    body = {"model": "demo", "prompt": "disconnect " * 8, "max_tokens": 200, "temperature": 0, "stream": True,
            "ignore_eos": True}
    kv = served.engine.kv_manager
    aborts = served.count_finished("abort")
    with httpx.Client(base_url=served.http_url, timeout=30) as c:
        with c.stream("POST", "/v1/completions", json=body) as r:
            assert r.status_code == 200
            lines = r.iter_lines()
            for line in lines:
                if line.startswith("data: {"):
                    break
            assert kv.num_free_pages < kv.num_total_pages
    t0 = time.monotonic()
    served.wait_idle(timeout=10)
    assert time.monotonic() - t0 < 5
    assert served.count_finished("abort") == aborts + 1


def test_disconnect_while_waiting_for_a_non_streamed_reply(served):
    body = {"model": "demo", "prompt": "gone " * 8, "max_tokens": 240, "temperature": 0, "ignore_eos": True}
    aborts = served.count_finished("abort")
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(served.http_url + "/v1/completions", json=body, timeout=0.3)
    served.wait_idle(timeout=10)
    assert served.count_finished("abort") == aborts + 1
