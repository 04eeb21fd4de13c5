"""OpenAI wire format: request bodies -> OpenAIRequest, engine outputs -> response/chunk dicts.

  JSON body --check_strings--> RequestError naming the first string that is not Unicode text
      (a lone UTF-16 surrogate such as "\ud800": JSON allows it, UTF-8 and the tokenizer do not)
  JSON body --parse_completion / parse_chat--> OpenAIRequest (prompts, sampling fields, stream
      options, SLO hints) | RequestError naming the field (unknown fields are refused, as OpenAI does)
  RequestOutput(s) --completion_response / chat_response / *_chunk--> dicts the handlers serialize

Supported beyond OpenAI's fields (send with `extra_body` in the openai client): top_k,
stop_token_ids, ignore_eos, skip_special_tokens (vLLM's; false renders special tokens in the
text), priority (lower first), ttft_deadline and tpot_target (seconds).
Log-probabilities: completions `logprobs=N` and chat `logprobs=true, top_logprobs=N` (N <= 20)
give each sampled token's log-probability and its N most likely alternatives (computed on the
device with the sample). `n` choices per prompt (up to MAX_CHOICES; a seeded request's choice j
uses seed + j), completions `best_of` (that many generated, the n with the highest total
log-probability returned; not with stream) and `echo` (the prompt's text before the completion;
with `logprobs=N` also the prompt tokens' log-probabilities, computed in the prefill
(`SamplingParams.prompt_logprobs`), the first token's null as OpenAI has it; `max_tokens=0` with
echo scores the prompt and generates nothing, as lm-evaluation-harness asks for loglikelihoods).
Not supported (400 naming the field): suffix, non-zero penalties, logit_bias, tools, non-text
response_format.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

from medha_jax.outputs import RequestOutput
from medha_jax.sampling_params import MAX_TOP_LOGPROBS

MAX_CHOICES = 16  # n and best_of: sequences one prompt may start
from server.chat_template import validate_messages
from server.validation import RequestError

EXTENSIONS = {"top_k", "stop_token_ids", "ignore_eos", "skip_special_tokens", "priority", "ttft_deadline",
              "tpot_target"}
COMMON = {"model", "max_tokens", "temperature", "top_p", "n", "stream", "stream_options", "stop", "seed",
          "presence_penalty", "frequency_penalty", "logit_bias", "user", "logprobs"} | EXTENSIONS
COMPLETION_FIELDS = COMMON | {"prompt", "echo", "suffix", "best_of"}
CHAT_FIELDS = COMMON | {"messages", "max_completion_tokens", "top_logprobs", "response_format", "tools",
                        "tool_choice", "parallel_tool_calls"}


@dataclass
class OpenAIRequest:
    prompts: list  # completions: str or token-id lists; chat: [] (messages rendered by the handler)
    messages: list[dict] | None
    sampling: dict  # SamplingParams fields by internal name
    stream: bool
    include_usage: bool
    logprobs: bool
    ttft_deadline: float | None = None
    tpot_target: float | None = None
    priority: int = 0
    top_logprobs: int = 0  # alternatives per sampled token (with logprobs)
    n: int = 1  # choices returned per prompt
    best_of: int = 1  # choices generated per prompt (>= n; the best n by total logprob are returned)
    echo: bool = False  # completions: the prompt's text before each choice's
    score_only: bool = False  # completions: echo with max_tokens=0: the prompt scored, nothing generated


_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def _is_text(s: str) -> bool:
    try:
        s.encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False


def check_strings(raw: bytes, body) -> None:
    """RequestError naming (as prompt, stop[1], messages[0].content) the first string of the parsed
    body that holds a lone surrogate. Only a body with a surrogate escape can, so others are not walked."""
    if not _SURROGATE_ESCAPE.search(raw):
        return
    stack = [("", body)]  # iterative: the body may nest as deep as the JSON parser allowed
    while stack:
        path, v = stack.pop()
        bad = False
        if isinstance(v, str):
            bad = not _is_text(v)
        elif isinstance(v, dict):
            bad = not all(_is_text(k) for k in v)  # a key: the object holding it is named
            stack.extend((f"{path}.{k}" if path else k, x) for k, x in reversed(v.items()))
        elif isinstance(v, list):
            stack.extend((f"{path}[{i}]", x) for i, x in reversed(list(enumerate(v))))
        if bad:
            raise RequestError(path or None, f"{path or 'the request body'} is not valid Unicode text: it holds a "
                                             r"lone UTF-16 surrogate (a \ud800-\udfff escape without its pair)")


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _typed(body: dict, name: str, check, expected: str):
    v = body.get(name)
    if v is not None and not check(v):
        raise RequestError(name, f"{name} must be {expected}, got {type(v).__name__} {v!r}"[:300])
    return v


def _unsupported(body: dict, name: str, ok, why: str) -> None:
    v = body.get(name)
    if v is not None and not ok(v):
        raise RequestError(name, f"{name}={v!r} is not supported: {why}"[:300])


def _common(body, allowed: set[str]) -> dict:
    if not isinstance(body, dict):
        raise RequestError(None, "the request body must be a JSON object")
    unknown = sorted(set(body) - allowed)
    if unknown:
        raise RequestError(unknown[0], f"unrecognized request argument(s): {', '.join(map(str, unknown))}"[:300])
    _typed(body, "model", lambda v: isinstance(v, str), "a string")
    _typed(body, "user", lambda v: isinstance(v, str), "a string")
    _typed(body, "stream", lambda v: isinstance(v, bool), "a boolean")
    n = _typed(body, "n", _is_int, "an integer")
    _unsupported(body, "n", lambda v: 1 <= v <= MAX_CHOICES, f"n must be in [1, {MAX_CHOICES}]")
    for name in ("presence_penalty", "frequency_penalty"):
        _unsupported(body, name, lambda v: v == 0, "penalties are not implemented; use 0")
    _unsupported(body, "logit_bias", lambda v: v == {}, "logit_bias is not implemented")
    sampling = {
        "max_tokens": _typed(body, "max_tokens", _is_int, "an integer"),
        "temperature": _typed(body, "temperature", _is_num, "a number"),
        "top_p": _typed(body, "top_p", _is_num, "a number"),
        "top_k": _typed(body, "top_k", _is_int, "an integer"),
        "seed": _typed(body, "seed", _is_int, "an integer"),
        "stop": _typed(body, "stop", lambda v: isinstance(v, (str, list)), "a string or a list of strings"),
        "stop_token_ids": _typed(body, "stop_token_ids", lambda v: isinstance(v, list), "a list of token ids"),
        "ignore_eos": _typed(body, "ignore_eos", lambda v: isinstance(v, bool), "a boolean"),
        "skip_special_tokens": _typed(body, "skip_special_tokens", lambda v: isinstance(v, bool), "a boolean"),
    }
    if sampling["top_k"] == -1:
        sampling["top_k"] = 0  # vLLM spelling of "disabled"
    opts = _typed(body, "stream_options", lambda v: isinstance(v, dict), "an object") or {}
    if set(opts) - {"include_usage", "continuous_usage_stats"}:
        raise RequestError("stream_options", f"stream_options supports include_usage only, got {sorted(opts)}")
    include_usage = opts.get("include_usage", False)
    if not isinstance(include_usage, bool):
        raise RequestError("stream_options.include_usage", "stream_options.include_usage must be a boolean")
    if opts and not body.get("stream"):
        raise RequestError("stream_options", "stream_options is only allowed with stream=true")
    return {
        "sampling": sampling,
        "stream": bool(body.get("stream", False)),
        "include_usage": include_usage,
        "ttft_deadline": _typed(body, "ttft_deadline", _is_num, "a number of seconds"),
        "tpot_target": _typed(body, "tpot_target", _is_num, "a number of seconds"),
        "priority": _typed(body, "priority", _is_int, "an integer") or 0,
        "n": n or 1,
    }


def _is_token_list(v) -> bool:
    return isinstance(v, list) and bool(v) and all(_is_int(t) for t in v)


def parse_completion(body, max_prompts: int) -> OpenAIRequest:
    c = _common(body, COMPLETION_FIELDS)
    best_of = _typed(body, "best_of", _is_int, "an integer")
    if best_of is None:
        best_of = c["n"]
    if not c["n"] <= best_of <= MAX_CHOICES:
        raise RequestError("best_of", f"best_of must be in [n, {MAX_CHOICES}] (n={c['n']}), got {best_of}")
    if best_of > c["n"] and c["stream"]:
        raise RequestError("best_of", "best_of > n cannot be streamed (the best choices are known only at the end)")
    echo = _typed(body, "echo", lambda v: isinstance(v, bool), "a boolean") or False
    _unsupported(body, "suffix", lambda v: v == "", "suffix (insertion) is not implemented")
    logprobs = _typed(body, "logprobs", _is_int, "an integer")
    _unsupported(body, "logprobs", lambda v: 0 <= v <= MAX_TOP_LOGPROBS,
                 f"logprobs must be in [0, {MAX_TOP_LOGPROBS}] (alternatives per token)")
    score_only = echo and body.get("max_tokens") == 0 and not isinstance(body.get("max_tokens"), bool)
    if score_only:
        if c["n"] > 1 or best_of > 1:
            raise RequestError("max_tokens", "max_tokens=0 (score the prompt) gives one choice: n and best_of must be 1")
        c["sampling"]["max_tokens"] = 1  # the prefill samples one token anyway; the response drops it
    if echo and logprobs is not None:
        c["sampling"]["prompt_logprobs"] = logprobs
    if "prompt" not in body:
        raise RequestError("prompt", "prompt is required")
    p = body["prompt"]
    if isinstance(p, str) or _is_token_list(p):
        prompts = [p]
    elif isinstance(p, list) and p and all(isinstance(x, str) or _is_token_list(x) for x in p):
        prompts = list(p)
    else:
        raise RequestError("prompt", "prompt must be a string, a list of token ids, or a non-empty list of those")
    if len(prompts) * best_of > max_prompts:
        raise RequestError("prompt", f"{len(prompts)} prompts x best_of {best_of} is more than the {max_prompts} "
                                     "sequences one request may start")
    return OpenAIRequest(prompts, None, c["sampling"], c["stream"], c["include_usage"], logprobs is not None,
                         c["ttft_deadline"], c["tpot_target"], c["priority"], logprobs or 0, c["n"], best_of, echo,
                         score_only)


def parse_chat(body) -> OpenAIRequest:
    c = _common(body, CHAT_FIELDS)
    mct = _typed(body, "max_completion_tokens", _is_int, "an integer")
    if mct is not None:
        c["sampling"]["max_tokens"] = mct
    logprobs = _typed(body, "logprobs", lambda v: isinstance(v, bool), "a boolean")
    top = _typed(body, "top_logprobs", _is_int, "an integer")
    _unsupported(body, "top_logprobs", lambda v: 0 <= v <= MAX_TOP_LOGPROBS,
                 f"top_logprobs must be in [0, {MAX_TOP_LOGPROBS}]")
    if top and not logprobs:
        raise RequestError("top_logprobs", "top_logprobs needs logprobs=true")
    _unsupported(body, "tools", lambda v: v == [], "tool calling is not implemented")
    _unsupported(body, "tool_choice", lambda v: v == "none", "tool calling is not implemented")
    _unsupported(body, "parallel_tool_calls", lambda v: isinstance(v, bool), "tool calling is not implemented")
    _unsupported(body, "response_format", lambda v: v == {"type": "text"}, "only {'type': 'text'} is supported")
    if "messages" not in body:
        raise RequestError("messages", "messages is required")
    messages = validate_messages(body["messages"])
    return OpenAIRequest([], messages, c["sampling"], c["stream"], c["include_usage"], bool(logprobs),
                         c["ttft_deadline"], c["tpot_target"], c["priority"], top or 0, c["n"], c["n"])


# ---- responses ---------------------------------------------------------------------------------
def usage(prompt_tokens: int, completion_tokens: int) -> dict:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


def finish_reason(out: RequestOutput) -> str | None:
    return out.finish_reason if out.finished else None


def token_text(tokenizer, t: int) -> str:
    """A token as logprobs show it: its text, or "token_id:<id>" for a model without a tokenizer
    (vLLM's spelling of tokens as ids)."""
    return tokenizer.decode([t]) if tokenizer is not None else f"token_id:{t}"


def completion_logprobs(tokenizer, ids: list[int], logprobs: list[float], offset: int, tops=()) -> dict:
    """The legacy format; `tops` (per token: (id, logprob) pairs, most likely first) become one
    {token text: logprob} dict per token (None when no alternatives were asked for): ids that
    decode alike (specials to "", lone UTF-8 bytes to U+FFFD) share a key, which keeps the most
    likely one's value. Without a tokenizer the text is empty, so text offsets stay at `offset`."""
    tokens = [token_text(tokenizer, t) for t in ids]
    offsets, pos = [], offset
    for t in tokens:
        offsets.append(pos)
        pos += len(t) if tokenizer is not None else 0
    top = None
    if tops:
        top = []
        for alts in tops:  # None: a prompt's first token (no context, no alternatives)
            d = None if alts is None else {}
            for t, lp in alts or ():  # most likely first: the first of a shared text stays
                d.setdefault(token_text(tokenizer, t), lp)
            top.append(d)
    return {"tokens": tokens, "token_logprobs": list(logprobs), "top_logprobs": top, "text_offset": offsets}


def echo_logprobs(tokenizer, out: RequestOutput, top_n: int, with_completion: bool) -> dict:
    """The legacy format over the prompt (scored: `RequestOutput.prompt_logprobs`, its first
    token's value null) and, unless the request only scores, the completion after it."""
    ids, lps = list(out.prompt_token_ids), list(out.prompt_logprobs or [None] * len(out.prompt_token_ids))
    tops = list(out.prompt_top_logprobs or [None] * len(ids)) if top_n else []
    if with_completion:
        ids += out.token_ids
        lps += out.logprobs
        tops += out.top_logprobs if top_n else []
    return completion_logprobs(tokenizer, ids, lps, 0, tops)


def _chat_token(tokenizer, t: int, lp: float) -> dict:
    raw = list(tokenizer.token_bytes(t)) if tokenizer is not None else None  # unknown without a tokenizer
    return {"token": token_text(tokenizer, t), "logprob": lp, "bytes": raw}


def chat_logprobs(tokenizer, ids: list[int], logprobs: list[float], tops=()) -> dict:
    """`tops`: per token its alternatives as (id, logprob), most likely first (may be empty)."""
    content = []
    for k, (t, lp) in enumerate(zip(ids, logprobs)):
        alts = [_chat_token(tokenizer, a, alp) for a, alp in tops[k]] if tops else []
        content.append({**_chat_token(tokenizer, t, lp), "top_logprobs": alts})
    return {"content": content}


def best_choices(finals: list[RequestOutput], n: int, best_of: int) -> list[RequestOutput]:
    """Per prompt (best_of consecutive outputs), the n with the highest total log-probability,
    best first (best_of == n: all of them, in order)."""
    if best_of == n:
        return finals
    out = []
    for p in range(0, len(finals), best_of):
        group = finals[p:p + best_of]
        out += sorted(group, key=lambda o: -sum(o.logprobs))[:n]
    return out


def completion_response(rid: str, model: str, choices_out: list[RequestOutput], tokenizer, want_logprobs: bool,
                        usage_: dict, echo: list[str] | None = None, *, top_n: int = 0,
                        score_only: bool = False) -> dict:
    """choices_out: the returned choices in index order; echo: each one's prompt text, or None;
    score_only: echo with max_tokens=0 (the prompt and its log-probabilities, no completion)."""
    choices = []
    for i, out in enumerate(choices_out):
        lp = None
        if want_logprobs:
            lp = (echo_logprobs(tokenizer, out, top_n, not score_only) if echo else
                  completion_logprobs(tokenizer, out.token_ids, out.logprobs, 0, out.top_logprobs))
        text = (echo[i] if echo else "") + ("" if score_only else out.text)
        choices.append({"index": i, "text": text, "logprobs": lp,
                        "finish_reason": "length" if score_only else out.finish_reason})
    return {
        "id": rid, "object": "text_completion", "created": int(time.time()), "model": model, "choices": choices,
        "usage": usage_, "system_fingerprint": None,
    }


def completion_chunk(rid: str, model: str, created: int, index: int, text: str, reason: str | None,
                     logprobs: dict | None = None) -> dict:
    return {"id": rid, "object": "text_completion", "created": created, "model": model,
            "choices": [{"index": index, "text": text, "logprobs": logprobs, "finish_reason": reason}]}


def chat_response(rid: str, model: str, outs: list[RequestOutput], tokenizer, want_logprobs: bool,
                  usage_: dict) -> dict:
    choices = []
    for i, out in enumerate(outs):
        lp = chat_logprobs(tokenizer, out.token_ids, out.logprobs, out.top_logprobs) if want_logprobs else None
        choices.append({"index": i, "message": {"role": "assistant", "content": out.text}, "logprobs": lp,
                        "finish_reason": out.finish_reason})
    return {
        "id": rid, "object": "chat.completion", "created": int(time.time()), "model": model, "choices": choices,
        "usage": usage_, "system_fingerprint": None,
    }


def chat_chunk(rid: str, model: str, created: int, delta: dict, reason: str | None, logprobs: dict | None = None,
               index: int = 0) -> dict:
    return {"id": rid, "object": "chat.completion.chunk", "created": created, "model": model,
            "choices": [{"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": reason}]}


def usage_chunk(rid: str, model: str, created: int, obj: str, u: dict) -> dict:
    return {"id": rid, "object": obj, "created": created, "model": model, "choices": [], "usage": u}


def error_body(message: str, err_type: str, param: str | None = None, code: str | None = None) -> dict:
    return {"error": {"message": message, "type": err_type, "param": param, "code": code}}
