"""gRPC front end: the medha.v1.Medha servicer on grpc.aio, sharing the event loop with HTTP.

  request bytes --decode_generate_request--> GenerateRequest | INVALID_ARGUMENT (a string field
      that is not UTF-8, named by server.proto_text; stock stubs would answer INTERNAL)
  GenerateRequest --spec_from_proto (server.validation)--> GenerationSpec | INVALID_ARGUMENT (names the field)
      --AsyncEngine.add_request--> RequestStream | RESOURCE_EXHAUSTED (queue full) | UNAVAILABLE (draining)
      --each RequestOutput--> GenerateResponse (new tokens, text delta, logprobs; usage+timings last;
        the last one names the stop string or stop token, the model's EOS included)
      | INTERNAL when the iteration running it failed (other requests carry on)
  client cancels / disconnects -> the stream's context exits -> AsyncEngine.abort -> pages freed next step
"""

from __future__ import annotations

import logging

import grpc
from google.protobuf.message import DecodeError

from medha_jax.async_engine import EngineUnavailableError, QueueFullError, RequestFailedError
from medha_jax.outputs import RequestOutput
from proto import medha_pb2, medha_pb2_grpc
from server.proto_text import bad_utf8_field
from server.validation import (
    GenerationSpec, RequestError, build_sampling_params, check_request_id, check_slo, engine_error, resolve_prompt,
)

log = logging.getLogger(__name__)

SERVICE_NAME = medha_pb2.DESCRIPTOR.services_by_name["Medha"].full_name

_FIELD_NAMES = {name: f"sampling.{name}" for name in (
    "max_tokens", "temperature", "top_k", "top_p", "seed", "stop", "stop_token_ids", "ignore_eos", "logprobs",
    "top_logprobs", "prompt_logprobs")}
_FIELD_NAMES.update(ttft_deadline="slo.ttft_deadline_s", tpot_target="slo.tpot_target_s",
                    priority_class="slo.priority_class", prompt="prompt")
_FINISH = {"stop": medha_pb2.FINISH_REASON_STOP, "length": medha_pb2.FINISH_REASON_LENGTH,
           "abort": medha_pb2.FINISH_REASON_ABORT}


def decode_generate_request(data: bytes) -> medha_pb2.GenerateRequest | RequestError:
    """The request, or the RequestError to answer it with (a deserializer cannot pick the status)."""
    try:
        return medha_pb2.GenerateRequest.FromString(data)
    except DecodeError as e:
        field = bad_utf8_field(medha_pb2.GenerateRequest.DESCRIPTOR, data)
        if field is not None:
            return RequestError(field, f"{field} is not valid UTF-8 text")
        return RequestError(None, f"the request is not a valid {SERVICE_NAME}.GenerateRequest: {e}")


async def spec_from_proto(req: medha_pb2.GenerateRequest | RequestError, engine,
                          max_prompt_tokens: int) -> GenerationSpec:
    if isinstance(req, RequestError):
        raise req
    kind = req.WhichOneof("prompt")
    if kind is None:
        raise RequestError("prompt", "prompt: set either text or token_ids")
    if kind == "text":
        prompt, field = req.text, "text"
    else:
        prompt, field = list(req.token_ids.ids), "token_ids.ids"
    s = req.sampling
    values = {
        "max_tokens": s.max_tokens if s.HasField("max_tokens") else None,
        "temperature": s.temperature if s.HasField("temperature") else None,
        "top_p": s.top_p if s.HasField("top_p") else None,
        "top_k": s.top_k,
        "seed": s.seed if s.HasField("seed") else None,
        "stop": list(s.stop),
        "stop_token_ids": list(s.stop_token_ids),
        "ignore_eos": s.ignore_eos,
        "logprobs": s.logprobs,
        "top_logprobs": s.top_logprobs,
        "prompt_logprobs": s.prompt_logprobs if s.HasField("prompt_logprobs") else None,
    }
    sp = build_sampling_params(values, _FIELD_NAMES)
    ttft = req.slo.ttft_deadline_s if req.slo.HasField("ttft_deadline_s") else None
    tpot = req.slo.tpot_target_s if req.slo.HasField("tpot_target_s") else None
    check_slo(ttft, tpot, req.slo.priority_class, _FIELD_NAMES)
    rid = check_request_id(req.request_id)
    ids = await resolve_prompt(engine, prompt, max_prompt_tokens, field)
    return GenerationSpec(ids, sp, rid, ttft, req.slo.priority_class, tpot)


def response_from_output(out: RequestOutput, with_logprobs: bool) -> medha_pb2.GenerateResponse:
    n = len(out.new_token_ids)
    msg = medha_pb2.GenerateResponse(request_id=out.request_id, token_ids=out.new_token_ids, text=out.new_text)
    if out.prompt_logprobs is not None and n and len(out.token_ids) == n:  # the first message with tokens
        msg.prompt_logprobs.extend(out.prompt_logprobs[1:])
        for alts in out.prompt_top_logprobs[1:]:
            msg.prompt_top_logprobs.add(token_ids=[t for t, _ in alts], logprobs=[lp for _, lp in alts])
    if with_logprobs and n:
        msg.logprobs.extend(out.logprobs[-n:])
        for alts in out.new_top_logprobs:
            msg.top_logprobs.add(token_ids=[t for t, _ in alts], logprobs=[lp for _, lp in alts])
    if out.finished:
        msg.finish_reason = _FINISH.get(out.finish_reason, medha_pb2.FINISH_REASON_UNSPECIFIED)
        if isinstance(out.stop_reason, str):
            msg.stop_string = out.stop_reason
        elif isinstance(out.stop_reason, int):
            msg.stop_token_id = out.stop_reason
        elif out.finish_reason == "stop" and out.token_ids:
            msg.stop_token_id = out.token_ids[-1]  # the model's EOS (the engine's stop_reason is None for it)
        msg.usage.prompt_tokens = len(out.prompt_token_ids)
        msg.usage.completion_tokens = len(out.token_ids)
        m = out.metrics
        t = msg.timings
        if m.first_scheduled_time is not None:
            t.queue_s = m.first_scheduled_time - m.arrival_time
        t.ttft_s = m.ttft or 0.0
        t.tpot_s = m.tpot or 0.0
        if m.finish_time is not None:
            t.e2e_s = m.finish_time - m.arrival_time
        t.num_preemptions = m.num_preemptions
    return msg


class MedhaServicer(medha_pb2_grpc.MedhaServicer):
    def __init__(self, async_engine, *, model_name: str, max_prompt_tokens: int, mesh: str, dtype: str, metrics=None):
        self.ae = async_engine
        self.model_name = model_name
        self.max_prompt_tokens = max_prompt_tokens
        self.mesh = mesh
        self.dtype = dtype
        self.metrics = metrics

    def _reject(self, reason: str) -> None:
        if self.metrics is not None:
            self.metrics.reject(reason)

    async def Generate(self, request, context):
        engine = self.ae.engine
        try:
            spec = await spec_from_proto(request, engine, self.max_prompt_tokens)
            stream = await self.ae.add_request(
                spec.prompt_token_ids, spec.sampling_params, request_id=spec.request_id,
                ttft_deadline=spec.ttft_deadline, priority_class=spec.priority_class, tpot_target=spec.tpot_target,
            )
        except RequestError as e:
            self._reject("invalid")
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, e.message)
        except QueueFullError as e:
            self._reject("queue_full")
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, str(e))
        except EngineUnavailableError as e:
            self._reject("unavailable")
            await context.abort(grpc.StatusCode.UNAVAILABLE, str(e))
        except ValueError as e:
            self._reject("invalid")
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, engine_error(e, _FIELD_NAMES).message)
        with_logprobs = spec.sampling_params.logprobs
        async with stream:
            try:
                async for out in stream:
                    yield response_from_output(out, with_logprobs)
            except RequestFailedError as e:
                await context.abort(grpc.StatusCode.INTERNAL, str(e))
            except EngineUnavailableError as e:
                await context.abort(grpc.StatusCode.UNAVAILABLE, str(e))

    async def Health(self, request, context):
        st = self.ae.engine.stats()
        status = {
            "serving": medha_pb2.HealthResponse.SERVING,
            "draining": medha_pb2.HealthResponse.DRAINING,
        }.get(self.ae.state.value, medha_pb2.HealthResponse.NOT_SERVING)
        return medha_pb2.HealthResponse(
            status=status,
            num_waiting=st.num_waiting,
            num_running=st.num_running,
            free_kv_pages=st.free_kv_pages,
            total_kv_pages=st.total_kv_pages,
        )

    async def ModelInfo(self, request, context):
        eng = self.ae.engine
        st = eng.stats()
        mc = eng.model_config
        return medha_pb2.ModelInfoResponse(
            model=self.model_name, vocab_size=mc.vocab_size, max_model_len=eng.max_model_len,
            max_prompt_tokens=self.max_prompt_tokens, page_size=st.page_size,
            total_kv_pages=st.total_kv_pages, mesh=self.mesh, dtype=self.dtype,
            eos_token_ids=sorted(eng.eos_token_ids), num_layers=mc.num_layers, hidden_size=mc.hidden_size,
            num_heads=mc.num_heads, num_kv_heads=mc.num_kv_heads, max_queue=self.ae.max_queue,
        )


def add_to_server(servicer: MedhaServicer, server) -> None:
    """Register `servicer` as medha_pb2_grpc.add_MedhaServicer_to_server does, but with Generate's
    request decoded by decode_generate_request."""
    pb = medha_pb2
    handlers = {
        "Generate": grpc.unary_stream_rpc_method_handler(
            servicer.Generate, request_deserializer=decode_generate_request,
            response_serializer=pb.GenerateResponse.SerializeToString),
        "Health": grpc.unary_unary_rpc_method_handler(
            servicer.Health, request_deserializer=pb.HealthRequest.FromString,
            response_serializer=pb.HealthResponse.SerializeToString),
        "ModelInfo": grpc.unary_unary_rpc_method_handler(
            servicer.ModelInfo, request_deserializer=pb.ModelInfoRequest.FromString,
            response_serializer=pb.ModelInfoResponse.SerializeToString),
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE_NAME, handlers),))
    server.add_registered_method_handlers(SERVICE_NAME, handlers)
