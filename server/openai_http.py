"""OpenAI-compatible HTTP front end (aiohttp), sharing the event loop with gRPC.

  POST /v1/completions, /v1/chat/completions
      body --parse (server.openai_protocol)--> OpenAIRequest --chat template / resolve_prompt-->
      token ids --AsyncEngine.add_request (best_of per prompt: choice j of a seeded request uses
      seed + j)--> RequestStreams
      --> one JSON response, or SSE chunks ("data: {...}" ... "data: [DONE]") as tokens arrive
  GET /v1/models, /health, /metrics

Errors use OpenAI's JSON shape {"error": {message, type, param, code}}: 400 naming the field,
401 bad token, 404 unknown model/route, 408 body not in within body_timeout (the connection is
closed), 413 body too large, 429 queue full, 503 draining, 500 when the iteration running the
request failed (in a stream: an error event). A client that disconnects cancels its handler
(handler_cancellation), which leaves the streams' contexts and aborts the requests, freeing
their KV pages at the engine's next step.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import time
import uuid

from aiohttp import web

from medha_jax.async_engine import EngineUnavailableError, QueueFullError, RequestFailedError
from server import openai_protocol as P
from server.http_deadlines import BodyTimeout, read_body
from server.validation import RequestError, build_sampling_params, check_slo, engine_error, resolve_prompt

log = logging.getLogger(__name__)


def error_response(status: int, message: str, err_type: str, param: str | None = None, code: str | None = None):
    return web.json_response(P.error_body(message, err_type, param, code), status=status)


def _dumps(obj) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


class ModelNotFound(Exception):
    pass


def _error_for(e: BaseException) -> tuple[int, str, str, str | None, str | None]:
    """(status, message, type, param, code) for an exception raised while serving a request."""
    if isinstance(e, RequestError):
        return 400, e.message, "invalid_request_error", e.field, None
    if isinstance(e, ModelNotFound):
        return 404, str(e), "invalid_request_error", "model", "model_not_found"
    if isinstance(e, BodyTimeout):
        return 408, str(e), "invalid_request_error", None, "request_timeout"
    if isinstance(e, QueueFullError):
        return 429, str(e), "rate_limit_error", None, "queue_full"
    if isinstance(e, EngineUnavailableError):
        return 503, str(e), "service_unavailable", None, None
    if isinstance(e, RequestFailedError):
        return 500, str(e), "internal_error", None, None
    if isinstance(e, ValueError):
        re_ = engine_error(e)
        return 400, re_.message, "invalid_request_error", re_.field, None
    return 500, f"internal error: {type(e).__name__}", "internal_error", None, None


_REJECT_REASON = {400: "invalid", 404: "invalid", 408: "timeout", 429: "queue_full", 503: "unavailable"}


@web.middleware
async def error_middleware(request: web.Request, handler):
    """Every error, including aiohttp's own (404 route, 405, 413), in OpenAI's JSON shape."""
    try:
        return await handler(request)
    except web.HTTPException as e:
        if e.status < 400:
            raise
        kind = "invalid_request_error" if e.status < 500 else "internal_error"
        return error_response(e.status, f"{e.reason}: {request.method} {request.path}", kind)
    except asyncio.CancelledError:
        raise
    except Exception:  # noqa: BLE001 - a bug in one handler must not reach other requests
        log.exception("unhandled error in %s %s", request.method, request.path)
        return error_response(500, "internal error", "internal_error")


class OpenAIServer:
    def __init__(self, async_engine, *, model_name: str, max_prompt_tokens: int, max_prompts: int,
                 chat_template, body_timeout: float, metrics=None):
        self.ae = async_engine
        self.body_timeout = body_timeout
        self.model_name = model_name
        self.max_prompt_tokens = max_prompt_tokens
        self.max_prompts = max_prompts
        self.chat_template = chat_template
        self.metrics = metrics
        self.created = int(time.time())

    def add_routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/completions", self.completions)
        app.router.add_post("/v1/chat/completions", self.chat_completions)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/v1/models/{model}", self.model)
        app.router.add_get("/health", self.health)
        app.router.add_get("/metrics", self.metrics_text)

    # ---- admission -------------------------------------------------------------------------
    def _fail(self, e: BaseException) -> web.Response:
        status, message, err_type, param, code = _error_for(e)
        if self.metrics is not None and status in _REJECT_REASON:
            self.metrics.reject(_REJECT_REASON[status])
        resp = error_response(status, message, err_type, param, code)
        if status == 408:
            resp.force_close()  # the rest of the body may still be trickling in
        return resp

    async def _body(self, request: web.Request):
        raw = await read_body(request, self.body_timeout)  # aiohttp raises 413 past client_max_size
        try:
            body = json.loads(raw)
        except (ValueError, RecursionError) as e:
            raise RequestError(None, f"the request body is not valid JSON: {e}"[:300]) from None
        P.check_strings(raw, body)
        return body

    def _check_model(self, body: dict) -> None:
        model = body.get("model")
        if model is not None and model != self.model_name:
            raise ModelNotFound(f"the model {model!r} does not exist; this server serves {self.model_name!r}")

    def _default_max_tokens(self, prompt_len: int) -> int:
        eng = self.ae.engine
        room = min(eng.max_model_len, eng.stats().max_tokens_per_request) - prompt_len
        return max(1, room)

    async def _admit(self, parsed: P.OpenAIRequest, prompts_ids: list[list[int]]):
        """Admit best_of sequences per prompt (prompt-major), or none: a failure aborts the ones
        already admitted. best_of > n ranks choices by log-probability, so it computes them."""
        check_slo(parsed.ttft_deadline, parsed.tpot_target, parsed.priority,
                  {"ttft_deadline": "ttft_deadline", "tpot_target": "tpot_target", "priority_class": "priority"})
        streams = []
        try:
            for ids in prompts_ids:
                values = dict(parsed.sampling, logprobs=parsed.logprobs or parsed.best_of > parsed.n,
                              top_logprobs=parsed.top_logprobs)
                if values["max_tokens"] is None and parsed.messages is not None:
                    values["max_tokens"] = self._default_max_tokens(len(ids))
                sp = build_sampling_params(values)
                for j in range(parsed.best_of):
                    if j and sp.seed is not None:
                        sp = dataclasses.replace(sp, seed=sp.seed + 1)
                    # not streamed: the handler reads only the final output, the only one asked for
                    streams.append(await self.ae.add_request(ids, sp, ttft_deadline=parsed.ttft_deadline,
                                                             priority_class=parsed.priority,
                                                             tpot_target=parsed.tpot_target, stream=parsed.stream))
        except BaseException:
            for s in streams:
                s.abort()
            raise
        return streams

    async def _prepare(self, request: web.Request, chat: bool):
        body = await self._body(request)
        parsed = P.parse_chat(body) if chat else P.parse_completion(body, self.max_prompts)
        self._check_model(body)
        if chat:
            text = self.chat_template.render(parsed.messages)
            ids = self.chat_template.encode(text)
            prompts_ids = [await resolve_prompt(self.ae.engine, ids, self.max_prompt_tokens, "messages")]
        else:
            field = "prompt"
            prompts_ids = [await resolve_prompt(self.ae.engine, p, self.max_prompt_tokens,
                                                field if len(parsed.prompts) == 1 else f"{field}[{i}]")
                           for i, p in enumerate(parsed.prompts)]
        return parsed, prompts_ids, await self._admit(parsed, prompts_ids)

    # ---- endpoints -------------------------------------------------------------------------
    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, chat=False)

    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, chat=True)

    async def _serve(self, request: web.Request, chat: bool) -> web.StreamResponse:
        try:
            parsed, prompts_ids, streams = await self._prepare(request, chat)
        except (RequestError, ModelNotFound, BodyTimeout, QueueFullError, EngineUnavailableError, ValueError) as e:
            return self._fail(e)
        rid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        echo = self._echo_texts(parsed, prompts_ids) if parsed.echo else None
        if parsed.stream:
            return await self._stream(request, rid, parsed, streams, chat, echo, sum(map(len, prompts_ids)))
        try:
            finals = await _collect_finals(streams)
        except RequestFailedError as e:
            return self._fail(e)
        tok = self.ae.engine.tokenizer
        choices = P.best_choices(finals, parsed.n, parsed.best_of)
        generated = 0 if parsed.score_only else sum(len(o.token_ids) for o in finals)
        u = P.usage(sum(map(len, prompts_ids)), generated)  # each prompt once
        if chat:
            return web.json_response(P.chat_response(rid, self.model_name, choices, tok, parsed.logprobs, u),
                                     dumps=_dumps)
        return web.json_response(P.completion_response(rid, self.model_name, choices, tok, parsed.logprobs, u, echo,
                                                       top_n=parsed.top_logprobs, score_only=parsed.score_only),
                                 dumps=_dumps)

    def _echo_texts(self, parsed: P.OpenAIRequest, prompts_ids: list[list[int]]) -> list[str]:
        """Each choice's prompt text (a text prompt as sent; token ids decoded)."""
        tok = self.ae.engine.tokenizer
        texts = [p if isinstance(p, str) else (tok.decode(ids) if tok is not None else "")
                 for p, ids in zip(parsed.prompts, prompts_ids)]
        return [t for t in texts for _ in range(parsed.n)]

    async def _stream(self, request, rid, parsed: P.OpenAIRequest, streams, chat: bool,
                      echo: list[str] | None, prompt_tokens: int) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache",
                                           "X-Accel-Buffering": "no"})
        try:
            await resp.prepare(request)
        except BaseException:
            for s in streams:
                s.abort()
            raise
        tok = self.ae.engine.tokenizer
        created = int(time.time())
        obj = "chat.completion.chunk" if chat else "text_completion"
        emitted = [len(e) for e in echo] if echo else [0] * len(streams)  # characters streamed per choice (text_offset)
        completion_tokens = 0
        # echo with logprobs: the prompt's chunk waits for its scores (they come with the first token)
        echo_later = [bool(echo) and parsed.logprobs] * len(streams)

        async def send(obj_):
            await resp.write(f"data: {_dumps(obj_)}\n\n".encode())

        try:
            for i in range(len(streams)):
                if chat:
                    await send(P.chat_chunk(rid, self.model_name, created, {"role": "assistant", "content": ""}, None,
                                            index=i))
                elif echo and not echo_later[i]:
                    await send(P.completion_chunk(rid, self.model_name, created, i, echo[i], None))
            async with contextlib.aclosing(_merged(streams)) as merged:
                async for i, out in merged:
                    if echo_later[i]:
                        echo_later[i] = False
                        lp = P.echo_logprobs(tok, out, parsed.top_logprobs, with_completion=False)
                        await send(P.completion_chunk(rid, self.model_name, created, i, echo[i], None, lp))
                    if parsed.score_only:  # the prompt only: the token the prefill sampled is not shown
                        if out.finished:
                            await send(P.completion_chunk(rid, self.model_name, created, i, "", "length"))
                        continue
                    n = len(out.new_token_ids)
                    lp = None
                    if parsed.logprobs and n:
                        ids, lps, tops = out.new_token_ids, out.logprobs[-n:], out.new_top_logprobs
                        lp = (P.chat_logprobs(tok, ids, lps, tops) if chat
                              else P.completion_logprobs(tok, ids, lps, emitted[i], tops))
                    if out.new_text or lp is not None or out.finished:
                        reason = P.finish_reason(out)
                        if chat:
                            delta = {"content": out.new_text} if out.new_text else {}
                            await send(P.chat_chunk(rid, self.model_name, created, delta, reason, lp, index=i))
                        else:
                            await send(P.completion_chunk(rid, self.model_name, created, i, out.new_text, reason, lp))
                    emitted[i] += len(out.new_text)
                    if out.finished:
                        completion_tokens += len(out.token_ids)
            if parsed.include_usage:
                await send(P.usage_chunk(rid, self.model_name, created, obj, P.usage(prompt_tokens, completion_tokens)))
        except (RequestFailedError, EngineUnavailableError) as e:
            status, message, err_type, param, code = _error_for(e)
            await send(P.error_body(message, err_type, param, code))
        except (ConnectionError, asyncio.CancelledError):
            raise  # the client left: the streams' contexts have aborted the requests
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [self._model_card()]})

    async def model(self, request: web.Request) -> web.Response:
        if request.match_info["model"] != self.model_name:
            return self._fail(ModelNotFound(f"the model {request.match_info['model']!r} does not exist"))
        return web.json_response(self._model_card())

    def _model_card(self) -> dict:
        return {"id": self.model_name, "object": "model", "created": self.created, "owned_by": "medha-jax",
                "max_model_len": self.ae.engine.max_model_len}

    async def health(self, request: web.Request) -> web.Response:
        st = self.ae.engine.stats()
        body = {"status": self.ae.state.value, "num_waiting": st.num_waiting, "num_running": st.num_running,
                "inflight": self.ae.num_inflight, "free_kv_pages": st.free_kv_pages,
                "total_kv_pages": st.total_kv_pages}
        return web.json_response(body, status=200 if self.ae.accepting else 503)

    async def metrics_text(self, request: web.Request) -> web.Response:
        if self.metrics is None:
            return error_response(404, "metrics are disabled", "invalid_request_error")
        return web.Response(body=self.metrics.render(), headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"})


async def _collect_finals(streams) -> list:
    """The final output of each stream; the first failure cancels (and so aborts) the rest."""

    async def final(stream):
        async with stream:
            last = None
            async for out in stream:
                last = out
            return last

    try:
        async with asyncio.TaskGroup() as tg:
            tasks = [tg.create_task(final(s)) for s in streams]
    except* RequestFailedError as eg:
        raise eg.exceptions[0] from None
    except* EngineUnavailableError as eg:
        raise RequestFailedError(str(eg.exceptions[0])) from None
    return [t.result() for t in tasks]


async def _merged(streams):
    """(index, output) pairs from several streams as they arrive; closing early aborts them all.

    Use under contextlib.aclosing so that leaving the loop (error, disconnect) aborts at once.
    """
    if len(streams) == 1:
        async with streams[0] as s:
            async for out in s:
                yield 0, out
        return
    queue: asyncio.Queue = asyncio.Queue()

    async def pump(i, stream):
        try:
            async with stream:
                async for out in stream:
                    queue.put_nowait((i, out, None))
        except Exception as e:  # noqa: BLE001 - handed to the consumer below
            queue.put_nowait((i, None, e))

    tasks = [asyncio.ensure_future(pump(i, s)) for i, s in enumerate(streams)]
    try:
        remaining = len(streams)
        while remaining:
            i, out, err = await queue.get()
            if err is not None:
                raise err
            if out.finished:
                remaining -= 1
            yield i, out
    finally:
        for t in tasks:
            t.cancel()
        for s in streams:
            s.abort()
