"""Request parsing and chat templating, without a server: exact fields, messages and defaults."""

from __future__ import annotations

import pytest

from medha_jax.demo_model import byte_tokenizer
from server.chat_template import DEFAULT_CHAT_TEMPLATE, ChatTemplate, validate_messages
from server.openai_protocol import parse_chat, parse_completion
from server.validation import RequestError, build_sampling_params, field_of_message


def test_completion_request_maps_fields_and_extensions():
    r = parse_completion({"model": "demo", "prompt": ["a", [1, 2]], "max_tokens": 5, "temperature": 0, "top_p": 0.5,
                          "stop": "x", "seed": 3, "top_k": -1, "stop_token_ids": [7], "ignore_eos": True,
                          "skip_special_tokens": False, "priority": 2, "ttft_deadline": 1.5, "stream": True,
                          "stream_options": {"include_usage": True}, "logprobs": 0, "n": 1}, max_prompts=4)
    assert r.prompts == ["a", [1, 2]] and r.stream and r.include_usage and r.logprobs
    assert r.sampling == {"max_tokens": 5, "temperature": 0, "top_p": 0.5, "top_k": 0, "seed": 3, "stop": "x",
                          "stop_token_ids": [7], "ignore_eos": True, "skip_special_tokens": False}
    assert (r.priority, r.ttft_deadline) == (2, 1.5)
    sp = build_sampling_params(dict(r.sampling, logprobs=True))
    assert (sp.max_tokens, sp.temperature, sp.stop, sp.top_k, sp.skip_special_tokens) == (5, 0, ["x"], 0, False)


def test_echo_with_logprobs_scores_the_prompt_and_max_tokens_0_only_scores():
    r = parse_completion({"prompt": "x", "echo": True, "logprobs": 2, "max_tokens": 0}, max_prompts=4)
    assert r.score_only and r.sampling["max_tokens"] == 1 and r.sampling["prompt_logprobs"] == 2
    r = parse_completion({"prompt": "x", "echo": True, "logprobs": 0, "max_tokens": 3}, max_prompts=4)
    assert not r.score_only and r.sampling["max_tokens"] == 3 and r.sampling["prompt_logprobs"] == 0
    r = parse_completion({"prompt": "x", "logprobs": 1, "max_tokens": 3}, max_prompts=4)
    assert "prompt_logprobs" not in r.sampling  # the prompt is scored only when it is echoed
    with pytest.raises(RequestError):  # without echo, max_tokens=0 is still refused when built
        build_sampling_params(parse_completion({"prompt": "x", "max_tokens": 0}, max_prompts=4).sampling)


@pytest.mark.parametrize("body, field, words", [
    ([1, 2], None, "JSON object"),
    ({"prompt": "x", "max_tokens": True}, "max_tokens", "an integer"),
    ({"prompt": "x", "best_of": 17}, "best_of", "best_of must be in [n, 16]"),
    ({"prompt": "x", "n": 2, "best_of": 1}, "best_of", "best_of must be in [n, 16]"),
    ({"prompt": "x", "best_of": 2, "stream": True}, "best_of", "cannot be streamed"),
    ({"prompt": "x", "echo": True, "max_tokens": 0, "n": 2}, "max_tokens", "one choice"),
    ({"prompt": "x", "echo": 1}, "echo", "a boolean"),
    ({"prompt": "x", "presence_penalty": 0.5}, "presence_penalty", "not implemented"),
    ({"prompt": []}, "prompt", "prompt must be"),
    ({"prompt": ["a"] * 5}, "prompt", "more than the 4"),
    ({"prompt": ["a"] * 2, "n": 3}, "prompt", "2 prompts x best_of 3"),
    ({"prompt": "x", "stream_options": {"foo": 1}, "stream": True}, "stream_options", "include_usage"),
])
def test_completion_errors(body, field, words):
    with pytest.raises(RequestError) as e:
        parse_completion(body, max_prompts=4)
    assert e.value.field == field and words in e.value.message


@pytest.mark.parametrize("values, field", [
    ({"max_tokens": 0}, "max_tokens"), ({"temperature": float("inf")}, "temperature"), ({"top_k": -3}, "top_k"),
    ({"top_p": 0}, "top_p"), ({"stop": ["a", 3]}, "stop"), ({"stop": ["x" * 300]}, "stop"),
    ({"stop_token_ids": [-1]}, "stop_token_ids"), ({"seed": 1.5}, "seed"),
])
def test_sampling_errors_name_the_field_in_the_front_ends_spelling(values, field):
    with pytest.raises(RequestError) as e:
        build_sampling_params(values, {field: f"sampling.{field}"})
    assert e.value.field == f"sampling.{field}" and e.value.message.startswith(f"sampling.{field}")


def test_field_of_engine_messages():
    assert field_of_message("request needs KV for 900 tokens", ["prompt"]) == "max_tokens"
    assert field_of_message("prompt is empty", ["prompt"]) == "prompt"
    assert field_of_message("something else", ["prompt"]) is None


def test_chat_request_and_messages():
    r = parse_chat({"model": "demo", "messages": [{"role": "user", "content": [{"type": "text", "text": "a"},
                                                                              {"type": "text", "text": "b"}]}],
                    "max_completion_tokens": 4, "logprobs": True, "top_logprobs": 0})
    assert r.messages == [{"role": "user", "content": "ab"}] and r.sampling["max_tokens"] == 4 and r.logprobs
    with pytest.raises(RequestError) as e:
        validate_messages([{"role": "user", "content": "x"}, {"role": "user", "content": [{"type": "image_url"}]}])
    assert e.value.field == "messages[1].content[0]"
    with pytest.raises(RequestError) as e:
        validate_messages([{"role": "user", "content": "x", "tool_calls": []}])
    assert e.value.field == "messages[0].tool_calls"


class _NoTemplate:
    """A tokenizer without a chat template (the demo tokenizer's encode, BOS '<|begin_of_text|>')."""

    def __init__(self):
        self._t = byte_tokenizer()
        self.bos_token = self._t.bos_token

    def encode(self, text, add_special_tokens=True):
        return self._t.encode(text, add_special_tokens=add_special_tokens)


def test_default_template_layout_and_single_bos():
    t = ChatTemplate(_NoTemplate())
    assert t.source == DEFAULT_CHAT_TEMPLATE
    text = t.render([{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi"}])
    assert text == "<|begin_of_text|>system: You are terse.\nuser: Hi\nassistant:"
    ids = t.encode(text)
    assert ids[0] == 256 and ids.count(256) == 1 and ids[1:] == list("system: You are terse.\nuser: Hi\nassistant:".encode())


def test_tokenizer_template_is_used_and_its_exceptions_name_messages():
    t = ChatTemplate(byte_tokenizer())
    text = t.render([{"role": "user", "content": "Hi"}])
    assert text == ("<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
                    "<|start_header_id|>assistant<|end_header_id|>\n\n")
    strict = ChatTemplate(byte_tokenizer(), "{% if messages[0]['role'] != 'user' %}{{ raise_exception('first must be user') }}{% endif %}ok")
    with pytest.raises(RequestError) as e:
        strict.render([{"role": "assistant", "content": "x"}])
    assert e.value.field == "messages" and "first must be user" in e.value.message


def test_chat_on_a_model_without_tokenizer_is_a_request_error():
    from server.validation import RequestError

    t = ChatTemplate(None)  # the default template renders; encoding needs the tokenizer
    text = t.render([{"role": "user", "content": "hi"}])
    with pytest.raises(RequestError, match="no tokenizer"):
        t.encode(text)


def test_logprobs_of_a_model_without_tokenizer_name_tokens_by_id():
    """No tokenizer: tokens show as "token_id:<id>" (vLLM's spelling), text offsets stay put (the
    text is empty) and chat's raw bytes are unknown (null), instead of an AttributeError."""
    from server.openai_protocol import chat_logprobs, completion_logprobs

    lp = completion_logprobs(None, [5, 9], [-0.5, -1.0], 0, [[(5, -0.5), (7, -2.0)], [(9, -1.0), (5, -1.5)]])
    assert lp == {"tokens": ["token_id:5", "token_id:9"], "token_logprobs": [-0.5, -1.0], "text_offset": [0, 0],
                  "top_logprobs": [{"token_id:5": -0.5, "token_id:7": -2.0}, {"token_id:9": -1.0, "token_id:5": -1.5}]}
    content = chat_logprobs(None, [5], [-0.5], [[(5, -0.5), (7, -2.0)]])["content"]
    assert content == [{"token": "token_id:5", "logprob": -0.5, "bytes": None,
                        "top_logprobs": [{"token": "token_id:5", "logprob": -0.5, "bytes": None},
                                         {"token": "token_id:7", "logprob": -2.0, "bytes": None}]}]
