"""gRPC front end against a real server: greedy results equal LLM.generate, streaming, errors, cancellation."""

from __future__ import annotations

import time

import grpc
import pytest
from google.protobuf.descriptor_pool import DescriptorPool
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase

from proto import medha_pb2, medha_pb2_grpc

PROMPTS = ["Hello world", "The quick brown fox", "ünïcödé ✓ text"]


@pytest.fixture(scope="module")
def stub(served):
    channel = grpc.insecure_channel(served.grpc_target)
    yield medha_pb2_grpc.MedhaStub(channel)
    channel.close()


def generate(stub, timeout=30, **fields) -> list[medha_pb2.GenerateResponse]:
    return list(stub.Generate(medha_pb2.GenerateRequest(**fields), timeout=timeout))


def joined(msgs):
    ids = [t for m in msgs for t in m.token_ids]
    text = "".join(m.text for m in msgs)
    return ids, text


@pytest.mark.parametrize("prompt", PROMPTS)
def test_greedy_text_prompt_equals_python_api(stub, served, reference, prompt):
    msgs = generate(stub, text=prompt, sampling=medha_pb2.SamplingParameters(max_tokens=8, temperature=0.0, logprobs=True))
    ref = reference(prompt, 8)
    ids, text = joined(msgs)
    assert ids == ref.token_ids
    assert text == ref.text
    assert [round(x, 4) for m in msgs for x in m.logprobs] == [round(x, 4) for x in ref.logprobs]
    last = msgs[-1]
    assert last.finish_reason == {"length": medha_pb2.FINISH_REASON_LENGTH, "stop": medha_pb2.FINISH_REASON_STOP}[ref.finish_reason]
    assert all(m.finish_reason == medha_pb2.FINISH_REASON_UNSPECIFIED for m in msgs[:-1])
    assert last.usage.prompt_tokens == len(ref.prompt_token_ids)
    assert last.usage.completion_tokens == len(ref.token_ids)
    assert last.timings.ttft_s > 0 and last.timings.e2e_s >= last.timings.ttft_s
    served.wait_idle()


def test_top_logprobs_equal_the_python_apis(stub, reference):
    """Per generated token its alternatives, most likely first, as the Python API gives them (which
    tests/server/test_openai_logprobs.py checks against an independent log-softmax)."""
    prompt = "alternatives over gRPC"
    ref = reference(prompt, 5, top_logprobs=3)
    msgs = generate(stub, text=prompt, sampling=medha_pb2.SamplingParameters(
        max_tokens=5, temperature=0.0, logprobs=True, top_logprobs=3))
    got = [list(zip(a.token_ids, a.logprobs)) for m in msgs for a in m.top_logprobs]
    assert len(got) == 5 and all(len(alts) == 3 for alts in got)
    assert [[(t, round(lp, 4)) for t, lp in alts] for alts in got] == \
        [[(t, round(lp, 4)) for t, lp in alts] for alts in ref.top_logprobs]
    assert [alts[0][0] for alts in got] == ref.token_ids  # greedy: the most likely is the one sampled
    with pytest.raises(grpc.RpcError) as e:
        generate(stub, text=prompt, sampling=medha_pb2.SamplingParameters(max_tokens=1, logprobs=True, top_logprobs=21))
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "sampling.top_logprobs" in e.value.details()


def test_prompt_logprobs_equal_the_python_apis(stub, reference):
    """sampling.prompt_logprobs: the first message with tokens carries the prompt's scores (from
    its second token on) as the Python API gives them (which tests/engine/test_prompt_logprobs.py
    checks against transformers); later messages carry none."""
    prompt = "score this prompt"
    ref = reference(prompt, 3, prompt_logprobs=2)
    msgs = generate(stub, text=prompt, sampling=medha_pb2.SamplingParameters(
        max_tokens=3, temperature=0.0, prompt_logprobs=2))
    first = next(m for m in msgs if m.token_ids)
    assert [round(x, 4) for x in first.prompt_logprobs] == [round(x, 4) for x in ref.prompt_logprobs[1:]]
    assert [list(a.token_ids) for a in first.prompt_top_logprobs] == \
        [[t for t, _ in alts] for alts in ref.prompt_top_logprobs[1:]]
    assert len(first.prompt_logprobs) == len(ref.prompt_token_ids) - 1
    assert sum(len(m.prompt_logprobs) for m in msgs) == len(first.prompt_logprobs)
    with pytest.raises(grpc.RpcError) as e:
        generate(stub, text=prompt, sampling=medha_pb2.SamplingParameters(max_tokens=1, prompt_logprobs=21))
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "sampling.prompt_logprobs" in e.value.details()


def test_token_id_prompt_and_stop_token(stub, reference):
    prompt = [256, 72, 105, 33, 10]
    ref = reference(prompt, 6)
    msgs = generate(stub, token_ids=medha_pb2.TokenIds(ids=prompt),
                    sampling=medha_pb2.SamplingParameters(max_tokens=6, temperature=0.0))
    assert joined(msgs)[0] == ref.token_ids
    assert not any(m.logprobs for m in msgs)  # logprobs not requested
    # Stop at the third generated token: the stream ends there, with the id as the stop reason.
    stop_id = ref.token_ids[2]
    msgs = generate(stub, token_ids=medha_pb2.TokenIds(ids=prompt), sampling=medha_pb2.SamplingParameters(
        max_tokens=6, temperature=0.0, stop_token_ids=[stop_id]))
    first = ref.token_ids.index(stop_id)
    assert joined(msgs)[0] == ref.token_ids[: first + 1]
    assert msgs[-1].finish_reason == medha_pb2.FINISH_REASON_STOP
    assert msgs[-1].WhichOneof("stop_reason") == "stop_token_id" and msgs[-1].stop_token_id == stop_id


def test_eos_finish_names_the_eos_token(stub, reference):
    ref = reference("prompt 32", 48)  # the demo model's greedy reply ends with an EOS here
    assert ref.finish_reason == "stop" and ref.stop_reason is None and ref.token_ids[-1] in (257, 258)
    msgs = generate(stub, text="prompt 32", sampling=medha_pb2.SamplingParameters(max_tokens=48, temperature=0.0))
    assert joined(msgs)[0] == ref.token_ids
    assert msgs[-1].finish_reason == medha_pb2.FINISH_REASON_STOP
    assert msgs[-1].WhichOneof("stop_reason") == "stop_token_id" and msgs[-1].stop_token_id == ref.token_ids[-1]


def test_seeded_sampling_is_reproducible(stub):
    sp = medha_pb2.SamplingParameters(max_tokens=6, temperature=0.8, top_p=0.9, top_k=50, seed=1234)
    a = joined(generate(stub, text="seeded", sampling=sp))[0]
    b = joined(generate(stub, text="seeded", sampling=sp))[0]
    assert a == b and len(a) == 6


def test_slo_hints_and_request_id_are_accepted(stub):
    msgs = generate(stub, request_id="client-chosen-1", text="slo",
                    sampling=medha_pb2.SamplingParameters(max_tokens=2, temperature=0.0),
                    slo=medha_pb2.SloHints(ttft_deadline_s=5.0, tpot_target_s=0.5, priority_class=2))
    assert {m.request_id for m in msgs} == {"client-chosen-1"}


def test_health_and_model_info(stub, served):
    h = stub.Health(medha_pb2.HealthRequest(), timeout=5)
    assert h.status == medha_pb2.HealthResponse.SERVING
    assert h.total_kv_pages == served.engine.kv_manager.num_total_pages
    info = stub.ModelInfo(medha_pb2.ModelInfoRequest(), timeout=5)
    assert info.model == "demo" and info.vocab_size == 512 and info.max_model_len == 256
    assert info.max_prompt_tokens == 255 and info.page_size == 16 and set(info.eos_token_ids) == {257, 258}


def test_reflection_lists_and_describes_the_services(served):
    with grpc.insecure_channel(served.grpc_target) as ch:
        db = ProtoReflectionDescriptorDatabase(ch)
        assert {"medha.v1.Medha", "grpc.health.v1.Health", "grpc.reflection.v1alpha.ServerReflection"} <= set(
            db.get_services())
        service = DescriptorPool(db).FindServiceByName("medha.v1.Medha")  # what `grpcurl describe` reads
        assert {m.name for m in service.methods} == {"Generate", "Health", "ModelInfo"}
        assert service.methods_by_name["Generate"].input_type.fields_by_name["sampling"].message_type.name == (
            "SamplingParameters")


def test_standard_health_check(served):
    with grpc.insecure_channel(served.grpc_target) as ch:
        health = health_pb2_grpc.HealthStub(ch)
        for name in ("", "medha.v1.Medha"):
            r = health.Check(health_pb2.HealthCheckRequest(service=name), timeout=5)
            assert r.status == health_pb2.HealthCheckResponse.SERVING, name
        watch = health.Watch(health_pb2.HealthCheckRequest(service="medha.v1.Medha"), timeout=5)
        assert next(watch).status == health_pb2.HealthCheckResponse.SERVING
        watch.cancel()
        with pytest.raises(grpc.RpcError) as e:
            health.Check(health_pb2.HealthCheckRequest(service="no.such.Service"), timeout=5)
        assert e.value.code() == grpc.StatusCode.NOT_FOUND


@pytest.mark.parametrize("fields, field_name", [
    (dict(), "prompt"),
    (dict(token_ids=medha_pb2.TokenIds(ids=[])), "token_ids.ids"),
    (dict(token_ids=medha_pb2.TokenIds(ids=[1, 99999])), "token_ids.ids"),
    (dict(text="x", sampling=medha_pb2.SamplingParameters(max_tokens=0)), "sampling.max_tokens"),
    (dict(text="x", sampling=medha_pb2.SamplingParameters(temperature=-1.0)), "sampling.temperature"),
    (dict(text="x", sampling=medha_pb2.SamplingParameters(temperature=float("nan"))), "sampling.temperature"),
    (dict(text="x", sampling=medha_pb2.SamplingParameters(temperature=float("inf"))), "sampling.temperature"),
    (dict(text="x", sampling=medha_pb2.SamplingParameters(temperature=1e30)), "sampling.temperature"),
    (dict(text="x", sampling=medha_pb2.SamplingParameters(temperature=1e-30)), "sampling.temperature"),
    (dict(text="x", sampling=medha_pb2.SamplingParameters(top_p=float("inf"))), "sampling.top_p"),
    (dict(text="x", sampling=medha_pb2.SamplingParameters(top_k=2**32 - 1)), "sampling.top_k"),  # int32 when packed
    (dict(text="x", sampling=medha_pb2.SamplingParameters(top_p=0.0)), "sampling.top_p"),
    (dict(text="x", sampling=medha_pb2.SamplingParameters(stop=[""])), "sampling.stop"),
    (dict(text="x", sampling=medha_pb2.SamplingParameters(stop=["s"] * 33)), "sampling.stop"),
    (dict(text="x" * 300), "text"),
    (dict(token_ids=medha_pb2.TokenIds(ids=[65] * 9000)), "token_ids.ids"),  # checked off the event loop
    (dict(text="x", slo=medha_pb2.SloHints(ttft_deadline_s=-1.0)), "slo.ttft_deadline_s"),
    (dict(text="x", slo=medha_pb2.SloHints(ttft_deadline_s=1e308)), "slo.ttft_deadline_s"),
    (dict(text="x", slo=medha_pb2.SloHints(tpot_target_s=float("nan"))), "slo.tpot_target_s"),
    (dict(text="x", slo=medha_pb2.SloHints(tpot_target_s=1e-9)), "slo.tpot_target_s"),
    (dict(text="x", request_id="bad\nid"), "request_id"),
])
def test_invalid_requests_name_the_field(stub, served, fields, field_name):
    with pytest.raises(grpc.RpcError) as e:
        generate(stub, **fields)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert field_name in e.value.details(), e.value.details()
    served.wait_idle()


def _with_bad_utf8(req: medha_pb2.GenerateRequest, marker: str) -> bytes:
    """The serialized request with `marker`'s bytes replaced by invalid UTF-8 (a client that does not check)."""
    data = req.SerializeToString()
    assert data.count(marker.encode()) == 1
    return data.replace(marker.encode(), b"\xed\xa0\x80")  # a UTF-16 surrogate, encoded as if it were UTF-8


@pytest.mark.parametrize("req, field_name", [
    (medha_pb2.GenerateRequest(text="MRK"), "text"),
    (medha_pb2.GenerateRequest(text="x", sampling=medha_pb2.SamplingParameters(stop=["ok", "MRK"])), "sampling.stop"),
    (medha_pb2.GenerateRequest(text="x", request_id="MRK"), "request_id"),
])
def test_string_fields_that_are_not_utf8_are_invalid_argument_naming_them(served, req, field_name):
    with grpc.insecure_channel(served.grpc_target) as ch:
        call = ch.unary_stream("/medha.v1.Medha/Generate", request_serializer=None,
                               response_deserializer=medha_pb2.GenerateResponse.FromString)
        with pytest.raises(grpc.RpcError) as e:
            list(call(_with_bad_utf8(req, "MRK"), timeout=10))
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert e.value.details() == f"{field_name} is not valid UTF-8 text"


def test_cancel_mid_stream_aborts_and_frees_pages(stub, served):
    call = stub.Generate(medha_pb2.GenerateRequest(
        text="cancel me " * 10, sampling=medha_pb2.SamplingParameters(max_tokens=200, temperature=0.0, ignore_eos=True)))
    got = 0
    for _ in call:
        got += 1
        if got == 3:
            break
    kv = served.engine.kv_manager
    assert kv.num_free_pages < kv.num_total_pages  # still held by the running request
    aborts = served.count_finished("abort")
    call.cancel()
    t0 = time.monotonic()
    served.wait_idle(timeout=10)
    assert time.monotonic() - t0 < 5
    assert served.count_finished("abort") == aborts + 1
    assert served.engine.executor.compiles_after_warmup == 0
