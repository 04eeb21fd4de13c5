"""Request validation shared by both front ends: fields in, a checked GenerationSpec out.

  gRPC GenerateRequest / OpenAI JSON --(front end picks the fields)--> build_sampling_params(...)
      -> SamplingParams (its own checks + limits that protect the server)   | RequestError(field)
  prompt --resolve_prompt--> token ids (tokenized off the event loop when long), length limit
      -> GenerationSpec --AsyncEngine.add_request--> engine

Every failure is a RequestError naming the offending field in the front end's own spelling
(`field_names` maps internal names, e.g. "max_tokens" -> "sampling.max_tokens" for gRPC), so a
client learns exactly what to fix; nothing here touches running requests.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from medha_jax.sampling_params import SamplingParams

MAX_STOP_STRINGS = 32
MAX_STOP_STRING_CHARS = 256
MAX_STOP_TOKEN_IDS = 1024
MAX_REQUEST_ID_CHARS = 128
SLO_SECONDS = (1e-3, 86400.0)
"""Range of the SLO hints (ttft_deadline, tpot_target): a millisecond to a day."""
_TOKENIZE_IN_THREAD_CHARS = 8192
_SAMPLING_FIELDS = ("max_tokens", "temperature", "top_k", "top_p", "seed", "stop", "stop_token_ids",
                    "ignore_eos", "skip_special_tokens", "logprobs", "top_logprobs", "prompt_logprobs")


class RequestError(ValueError):
    """A bad request; `field` names the offending field (None when no single field is at fault)."""

    def __init__(self, field: str | None, message: str):
        super().__init__(message)
        self.field = field
        self.message = message


@dataclass(slots=True)
class GenerationSpec:
    """A validated request, ready for AsyncEngine.add_request."""

    prompt_token_ids: list[int]
    sampling_params: SamplingParams
    request_id: str | None = None
    ttft_deadline: float | None = None
    priority_class: int = 0
    tpot_target: float | None = None


def _name(field_names: Mapping[str, str], internal: str) -> str:
    return field_names.get(internal, internal)


def field_of_message(message: str, candidates: Sequence[str]) -> str | None:
    """The field a ValueError message from SamplingParams or the engine is about, if it says."""
    first = re.split(r"[\s:=]", message.strip(), maxsplit=1)[0]
    if first in candidates:
        return first
    if message.startswith("request needs KV"):
        return "max_tokens"
    return None


def build_sampling_params(values: Mapping[str, object], field_names: Mapping[str, str] = {}) -> SamplingParams:
    """SamplingParams from the fields given (missing ones keep their defaults), with server limits.

    SamplingParams checks each value's type and range (finite numbers within stated bounds);
    here are only the limits that protect the server (how many stop strings and ids)."""
    stop = values.get("stop")
    if stop is not None:
        stop_list = [stop] if isinstance(stop, str) else stop
        if not isinstance(stop_list, list) or len(stop_list) > MAX_STOP_STRINGS or any(
            not isinstance(s, str) or len(s) > MAX_STOP_STRING_CHARS for s in stop_list
        ):
            raise RequestError(
                _name(field_names, "stop"),
                f"{_name(field_names, 'stop')} must be a string or a list of at most {MAX_STOP_STRINGS} strings "
                f"of at most {MAX_STOP_STRING_CHARS} characters",
            )
    ids = values.get("stop_token_ids")
    if ids is not None and (not isinstance(ids, list) or len(ids) > MAX_STOP_TOKEN_IDS):
        raise RequestError(_name(field_names, "stop_token_ids"),
                           f"{_name(field_names, 'stop_token_ids')} must be a list of at most {MAX_STOP_TOKEN_IDS} token ids")
    kwargs = {k: v for k, v in values.items() if k in _SAMPLING_FIELDS and v is not None}
    try:
        return SamplingParams(**kwargs)
    except (ValueError, TypeError) as e:
        internal = field_of_message(str(e), _SAMPLING_FIELDS)
        shown = _name(field_names, internal) if internal else None
        message = str(e) if internal is None else shown + str(e)[len(internal):]
        raise RequestError(shown, message) from None


def check_slo(ttft_deadline, tpot_target, priority_class, field_names: Mapping[str, str] = {}) -> None:
    lo, hi = SLO_SECONDS
    for name, v in (("ttft_deadline", ttft_deadline), ("tpot_target", tpot_target)):
        if v is not None and (not isinstance(v, (int, float)) or isinstance(v, bool) or not lo <= v <= hi):
            raise RequestError(_name(field_names, name),
                               f"{_name(field_names, name)} must be a number of seconds in [{lo:g}, {hi:g}], got {v!r}")
    if not isinstance(priority_class, int) or isinstance(priority_class, bool) or not -(2**31) <= priority_class < 2**31:
        raise RequestError(_name(field_names, "priority_class"),
                           f"{_name(field_names, 'priority_class')} must be a 32-bit integer, got {priority_class!r}")


def check_request_id(request_id, field_name: str = "request_id") -> str | None:
    if request_id in (None, ""):
        return None
    if not isinstance(request_id, str) or len(request_id) > MAX_REQUEST_ID_CHARS or not request_id.isprintable():
        raise RequestError(field_name, f"{field_name} must be a printable string of at most {MAX_REQUEST_ID_CHARS} characters")
    return request_id


async def resolve_prompt(engine, prompt: str | Sequence[int], max_prompt_tokens: int, field_name: str = "prompt") -> list[int]:
    """Token ids of a prompt given as text or ids, checked against the vocabulary and the length limit."""
    try:
        if len(prompt) > _TOKENIZE_IN_THREAD_CHARS:  # long texts / id lists are checked off the event loop
            ids = await asyncio.to_thread(engine.validate_prompt, prompt)
        else:
            ids = engine.validate_prompt(prompt)
    except RequestError:
        raise
    except (ValueError, TypeError) as e:
        msg = str(e)
        raise RequestError(field_name, msg.replace("prompt", field_name, 1) if msg.startswith("prompt") else f"{field_name}: {msg}") from None
    if len(ids) > max_prompt_tokens:
        raise RequestError(field_name, f"{field_name} has {len(ids)} tokens; this server accepts at most {max_prompt_tokens}")
    return ids


def engine_error(e: ValueError, field_names: Mapping[str, str] = {}) -> RequestError:
    """A ValueError from Engine.add_request as a RequestError naming the field it concerns."""
    msg = str(e)
    internal = field_of_message(msg, ("request_id", "ttft_deadline", "prompt", "max_tokens", "priority_class"))
    if msg.startswith("request_id"):
        internal = "request_id"
    return RequestError(_name(field_names, internal) if internal else None, msg)
