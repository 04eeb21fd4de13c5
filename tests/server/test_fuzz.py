"""Fuzzed request fields (hypothesis, bounded) never crash the server or leak KV pages.

Every fuzzed request must end in a clean outcome: OK, INVALID_ARGUMENT / 400 (or 404 for an
unknown model, 413 for a huge body), or the client's own deadline (which cancels and so aborts
the request). INTERNAL / 500, UNKNOWN or a dropped connection would be a crash. Afterwards the
server is serving and every KV page is free.
"""

from __future__ import annotations

import json
import math

import grpc
import httpx
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from proto import medha_pb2, medha_pb2_grpc

FUZZ = settings(max_examples=40, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
U32 = 2**32 - 1
f32 = st.floats(width=32, allow_nan=True, allow_infinity=True)

# Each request is a valid one with at most one field replaced by a wild value, so the fuzzer
# reaches both the engine (valid requests) and every validation branch.
valid_sampling = {
    "max_tokens": st.integers(1, 6), "temperature": st.floats(0, 2, width=32), "top_p": st.floats(0.25, 1, width=32),
    "top_k": st.integers(0, 600), "seed": st.integers(0, 2**64 - 1),
    "stop": st.lists(st.text(min_size=1, max_size=4), max_size=2),
    "stop_token_ids": st.lists(st.integers(0, 600), max_size=2), "ignore_eos": st.booleans(), "logprobs": st.booleans(),
}
wild_sampling = {
    "max_tokens": st.integers(0, U32), "temperature": f32, "top_p": f32, "top_k": st.integers(0, U32),
    "stop": st.lists(st.text(max_size=300), max_size=40), "stop_token_ids": st.lists(st.integers(0, U32), max_size=2000),
}
valid_prompt = st.one_of(
    st.builds(lambda t: {"text": t}, st.text(min_size=1, max_size=80)),
    st.builds(lambda ids: {"token_ids": medha_pb2.TokenIds(ids=ids)}, st.lists(st.integers(0, 511), min_size=1, max_size=40)),
)
wild_prompt = st.one_of(
    st.just({}), st.builds(lambda t: {"text": t}, st.text(max_size=400)),
    st.builds(lambda ids: {"token_ids": medha_pb2.TokenIds(ids=ids)}, st.lists(st.integers(0, U32), max_size=300)),
)
valid_slo = st.builds(medha_pb2.SloHints, ttft_deadline_s=st.floats(0.01, 100), priority_class=st.integers(-3, 3))
wild_slo = st.builds(medha_pb2.SloHints, ttft_deadline_s=st.floats(allow_nan=True), tpot_target_s=st.floats(allow_nan=True),
                     priority_class=st.integers(-(2**31), 2**31 - 1))


@st.composite
def grpc_requests(draw):
    target = draw(st.sampled_from([None, None, "prompt", "slo", "request_id", *wild_sampling]))
    fields = {k: draw(wild_sampling[k] if k == target else v) for k, v in valid_sampling.items()}
    p = draw(wild_prompt if target == "prompt" else valid_prompt)
    h = draw(wild_slo if target == "slo" else valid_slo)
    rid = draw(st.text(max_size=200) if target == "request_id" else st.just(""))
    return medha_pb2.GenerateRequest(request_id=rid, sampling=medha_pb2.SamplingParameters(**fields), slo=h, **p)


GRPC_OK = {grpc.StatusCode.OK, grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.DEADLINE_EXCEEDED}


@pytest.fixture(scope="module")
def stub(served):
    with grpc.insecure_channel(served.grpc_target) as ch:
        yield medha_pb2_grpc.MedhaStub(ch)


@FUZZ
@given(req=grpc_requests())
def test_fuzzed_grpc_requests_end_cleanly(stub, req):
    try:
        msgs = list(stub.Generate(req, timeout=1.0))
        assert msgs and msgs[-1].finish_reason != medha_pb2.FINISH_REASON_UNSPECIFIED
        code = grpc.StatusCode.OK
    except grpc.RpcError as e:
        code = e.code()
        assert code in GRPC_OK, (code, e.details(), req)
        if code == grpc.StatusCode.INVALID_ARGUMENT:
            assert e.details()
    event(code.name)


json_leaf = st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=12)
json_any = st.recursive(json_leaf, lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=6), c, max_size=3),
                        max_leaves=8)
valid_common = {
    "model": st.just("demo"), "max_tokens": st.integers(1, 6), "temperature": st.floats(0, 2), "top_p": st.floats(0.05, 1),
    "top_k": st.integers(-1, 50), "seed": st.integers(-(2**70), 2**70),
    "stop": st.text(min_size=1, max_size=4) | st.lists(st.text(min_size=1, max_size=4), max_size=3),
    "stop_token_ids": st.lists(st.integers(0, 600), max_size=3), "stream": st.booleans(), "ignore_eos": st.booleans(),
    "priority": st.integers(-5, 5), "ttft_deadline": st.floats(0.01, 60), "n": st.just(1),
}
valid_completion = dict(valid_common, prompt=st.text(min_size=1, max_size=60) | st.lists(st.integers(0, 511), min_size=1, max_size=20),
                        logprobs=st.just(0))
valid_chat = dict(valid_common, logprobs=st.booleans(), messages=st.lists(st.fixed_dictionaries({
    "role": st.sampled_from(["user", "system", "assistant"]), "content": st.text(max_size=30)}), min_size=1, max_size=3))


@st.composite
def http_bodies(draw, valid: dict):
    shape = draw(st.sampled_from(["valid", "valid", "one wild field", "extra field", "any json", "bytes"]))
    if shape == "bytes":
        return draw(st.binary(max_size=64))
    if shape == "any json":
        return _dumps(draw(json_any))
    required = {k for k in ("prompt", "messages") if k in valid}
    body = draw(st.fixed_dictionaries({k: valid[k] for k in required},
                                      optional={k: v for k, v in valid.items() if k not in required}))
    if shape == "one wild field":
        body[draw(st.sampled_from(sorted(valid)))] = draw(json_any)
    elif shape == "extra field":
        body[draw(st.text(max_size=10))] = draw(json_any)
    return _dumps(body)


def _dumps(body) -> bytes:
    return json.dumps(body, allow_nan=True).encode()


@FUZZ
@given(path=st.sampled_from(["/v1/completions", "/v1/chat/completions"]), data=st.data())
def test_fuzzed_http_bodies_end_cleanly(served, path, data):
    body = data.draw(http_bodies(valid_completion if path == "/v1/completions" else valid_chat))
    try:
        r = httpx.post(served.http_url + path, content=body, headers={"Content-Type": "application/json"}, timeout=1.0)
    except httpx.ReadTimeout:
        event("client timeout")
        return  # the client gave up: its request is aborted
    event(str(r.status_code))
    assert r.status_code in (200, 400, 404), (r.status_code, r.text, body)
    if r.status_code != 200:
        err = r.json()["error"]
        assert err["message"] and err["type"] == "invalid_request_error"
    elif "text/event-stream" in r.headers["content-type"]:
        assert r.text.endswith("data: [DONE]\n\n") and '"error"' not in r.text
    else:
        assert all(math.isfinite(lp) for c in r.json()["choices"] for lp in ((c.get("logprobs") or {}).get("token_logprobs") or []))


def test_server_healthy_and_pages_free_after_fuzzing(served, stub):
    served.wait_idle(timeout=30)
    assert stub.Health(medha_pb2.HealthRequest(), timeout=5).status == medha_pb2.HealthResponse.SERVING
    assert served.engine.executor.compiles_after_warmup == 0
