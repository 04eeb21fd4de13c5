"""When a request stops: the one rule shared by the engine, the simulator, the replay and the tests.

  sampled token + request (its SamplingParams, output so far) + engine facts (EOS ids, context)
      -> None (keep going) | (FINISHED_STOPPED, stop_reason) | (FINISHED_LENGTH, None)

Order (first match wins): a stop string the detokenizer found in the new text, a stop token id,
the model's EOS (unless ignore_eos), then length (max_tokens reached or the context full).
Called by `Scheduler.update_from_output` after the token is appended. Pure Python, no JAX.
"""

from __future__ import annotations

from medha_jax.request import Request, RequestStatus


def is_special(token: int, request: Request, eos_token_ids: frozenset[int]) -> bool:
    """A token that ends generation and adds no text (EOS unless ignored, or a stop token id)."""
    sp = request.sampling_params
    return (token in eos_token_ids and not sp.ignore_eos) or token in sp.stop_token_ids


def at_length(request: Request, max_model_len: int | None) -> bool:
    """The request has every token it may have: max_tokens generated (a pending token counts, its
    id does not matter) or the context full."""
    n = len(request.output_token_ids) + request.num_pending_tokens  # once per decode: no property call
    return n >= request.sampling_params.max_tokens or (max_model_len is not None
                                                       and request.num_tokens >= max_model_len)


def stop_status(request: Request, token: int, *, eos_token_ids: frozenset[int], max_model_len: int | None,
                stop_string: str | None = None) -> tuple[RequestStatus, str | int | None] | None:
    """Why `request` ends now that `token` (already appended) was sampled, or None to go on."""
    sp = request.sampling_params
    if stop_string is not None:
        return RequestStatus.FINISHED_STOPPED, stop_string
    if token in sp.stop_token_ids:
        return RequestStatus.FINISHED_STOPPED, token
    if token in eos_token_ids and not sp.ignore_eos:
        return RequestStatus.FINISHED_STOPPED, None
    if at_length(request, max_model_len):
        return RequestStatus.FINISHED_LENGTH, None
    return None
