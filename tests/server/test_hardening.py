"""Hardening on a real server: bounded queue, failing iterations, TLS + bearer auth, size limits,
slow and idle clients."""

from __future__ import annotations

import socket
import ssl
import subprocess
import threading
import time

import grpc
import httpx
import openai
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase

from proto import medha_pb2, medha_pb2_grpc

POISON = 300  # a reserved special token id: a prompt holding it makes the injected fault fire


def _sp(**kw):
    return medha_pb2.SamplingParameters(temperature=0.0, **kw)


@pytest.fixture(scope="module")
def stub(served):
    channel = grpc.insecure_channel(served.grpc_target)
    yield medha_pb2_grpc.MedhaStub(channel)
    channel.close()


def _first_message(call):
    return next(iter(call))


def test_full_queue_answers_resource_exhausted_and_429(stub, served):
    ae = served.async_engine
    old = ae.max_queue
    ae.max_queue = 2
    calls = []
    try:
        for i in range(2):
            call = stub.Generate(medha_pb2.GenerateRequest(text=f"long {i}", sampling=_sp(max_tokens=200, ignore_eos=True)))
            _first_message(call)  # admitted and running
            calls.append(call)
        with pytest.raises(grpc.RpcError) as e:
            list(stub.Generate(medha_pb2.GenerateRequest(text="one too many", sampling=_sp(max_tokens=2)), timeout=10))
        assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and "queue is full" in e.value.details()
        r = httpx.post(served.http_url + "/v1/completions", json={"prompt": "x", "max_tokens": 2}, timeout=10)
        assert r.status_code == 429 and r.json()["error"]["code"] == "queue_full"
    finally:
        for call in calls:
            call.cancel()
        served.wait_idle()
        ae.max_queue = old
    assert len(list(stub.Generate(medha_pb2.GenerateRequest(text="after", sampling=_sp(max_tokens=2)), timeout=10))) >= 1


@pytest.fixture
def faulty_executor(served):
    """Make the real executor raise for any batch holding a POISON prompt (the engine's error path)."""
    ex = served.engine.executor
    real = ex.launch  # where every step starts, waited for (execute) or not (asynchronous scheduling)

    def launch(step):
        if any(POISON in seq.token_ids for seq in step.seqs):
            raise RuntimeError("injected device fault")
        return real(step)

    ex.launch = launch
    yield
    del ex.launch


def test_failed_iteration_is_internal_and_server_keeps_serving(stub, served, reference, faulty_executor):
    with pytest.raises(grpc.RpcError) as e:
        list(stub.Generate(medha_pb2.GenerateRequest(token_ids=medha_pb2.TokenIds(ids=[256, POISON, 65]),
                                                     sampling=_sp(max_tokens=4)), timeout=10))
    assert e.value.code() == grpc.StatusCode.INTERNAL and "injected device fault" in e.value.details()
    r = httpx.post(served.http_url + "/v1/completions", json={"prompt": [256, POISON], "max_tokens": 4}, timeout=10)
    assert r.status_code == 500 and r.json()["error"]["type"] == "internal_error"
    with httpx.stream("POST", served.http_url + "/v1/completions", timeout=10,
                      json={"prompt": [256, POISON], "max_tokens": 4, "stream": True}) as r:
        body = r.read().decode()
    assert r.status_code == 200 and '"error"' in body and "injected device fault" in body and body.endswith("data: [DONE]\n\n")
    served.wait_idle()
    msgs = list(stub.Generate(medha_pb2.GenerateRequest(text="Hello world", sampling=_sp(max_tokens=8)), timeout=10))
    assert [t for m in msgs for t in m.token_ids] == reference("Hello world", 8).token_ids


def test_failing_engine_step_fails_inflight_requests_only_once(stub, served, reference):
    """A bug outside the executor (here: the scheduler raising once) fails what is in flight, then serving goes on."""
    sched = served.engine.scheduler
    real = sched.schedule
    armed = threading.Event()

    def schedule(now):
        if armed.is_set():
            armed.clear()
            raise RuntimeError("injected scheduler bug")
        return real(now)

    sched.schedule = schedule
    try:
        call = stub.Generate(medha_pb2.GenerateRequest(text="in flight", sampling=_sp(max_tokens=200, ignore_eos=True)))
        it = iter(call)
        next(it)
        armed.set()
        with pytest.raises(grpc.RpcError) as e:
            list(it)
        assert e.value.code() == grpc.StatusCode.INTERNAL and "injected scheduler bug" in e.value.details()
    finally:
        del sched.schedule
    served.wait_idle()
    assert served.async_engine.accepting
    msgs = list(stub.Generate(medha_pb2.GenerateRequest(text="Hello world", sampling=_sp(max_tokens=8)), timeout=10))
    assert [t for m in msgs for t in m.token_ids] == reference("Hello world", 8).token_ids


@pytest.fixture(scope="module")
def cert(tmp_path_factory):
    d = tmp_path_factory.mktemp("tls")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
                    "-keyout", str(d / "key.pem"), "-out", str(d / "cert.pem")], check=True, capture_output=True)
    return d / "cert.pem", d / "key.pem"


@pytest.fixture(scope="module")
def secure_app(served, cert):
    app = served.start_app(api_key="s3cret", tls_cert=str(cert[0]), tls_key=str(cert[1]))
    yield app
    served.stop_app(app)


def test_grpc_tls_and_bearer_token(secure_app, cert, reference):
    creds = grpc.ssl_channel_credentials(root_certificates=cert[0].read_bytes())
    with grpc.secure_channel(secure_app.endpoints.grpc, creds) as ch:
        stub = medha_pb2_grpc.MedhaStub(ch)
        assert stub.Health(medha_pb2.HealthRequest(), timeout=5).status == medha_pb2.HealthResponse.SERVING
        req = medha_pb2.GenerateRequest(text="Hello world", sampling=_sp(max_tokens=8))
        for metadata in ((), (("authorization", "Bearer wrong"),)):
            with pytest.raises(grpc.RpcError) as e:
                list(stub.Generate(req, timeout=10, metadata=metadata))
            assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
        with pytest.raises(grpc.RpcError) as e:
            stub.ModelInfo(medha_pb2.ModelInfoRequest(), timeout=5)
        assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
        msgs = list(stub.Generate(req, timeout=10, metadata=(("authorization", "Bearer s3cret"),)))
        assert [t for m in msgs for t in m.token_ids] == reference("Hello world", 8).token_ids
        health = health_pb2_grpc.HealthStub(ch)  # open, like Medha/Health
        assert health.Check(health_pb2.HealthCheckRequest(), timeout=5).status == health_pb2.HealthCheckResponse.SERVING
        with pytest.raises(grpc.RpcError) as e:  # reflection (a bidirectional stream) needs the token
            ProtoReflectionDescriptorDatabase(ch).get_services()
        assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
    with grpc.insecure_channel(secure_app.endpoints.grpc) as ch:  # plaintext to a TLS port
        with pytest.raises(grpc.RpcError) as e:
            medha_pb2_grpc.MedhaStub(ch).Health(medha_pb2.HealthRequest(), timeout=5)
        assert e.value.code() == grpc.StatusCode.UNAVAILABLE


def test_https_and_bearer_token(secure_app, cert, reference):
    ctx = ssl.create_default_context(cafile=str(cert[0]))
    url = secure_app.endpoints.http
    assert url.startswith("https://")
    with httpx.Client(verify=ctx, timeout=10) as http:
        assert http.get(url + "/health").status_code == 200  # open for load balancers
        r = http.get(url + "/metrics")
        assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error"
        bad = openai.OpenAI(base_url=url + "/v1", api_key="wrong", http_client=http, max_retries=0)
        with pytest.raises(openai.AuthenticationError):
            bad.completions.create(model="demo", prompt="x", max_tokens=1)
        good = openai.OpenAI(base_url=url + "/v1", api_key="s3cret", http_client=http, max_retries=0)
        r = good.completions.create(model="demo", prompt="Hello world", max_tokens=8, temperature=0)
        assert r.choices[0].text == reference("Hello world", 8).text
    with pytest.raises(httpx.HTTPError):
        httpx.get(url.replace("https://", "http://") + "/health", timeout=5)


def test_message_and_prompt_limits(served):
    app = served.start_app(max_message_bytes=4096, max_prompt_tokens=50)
    try:
        with grpc.insecure_channel(app.endpoints.grpc) as ch:
            stub = medha_pb2_grpc.MedhaStub(ch)
            with pytest.raises(grpc.RpcError) as e:
                list(stub.Generate(medha_pb2.GenerateRequest(text="y" * 5000), timeout=10))
            assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            with pytest.raises(grpc.RpcError) as e:
                list(stub.Generate(medha_pb2.GenerateRequest(text="y" * 60), timeout=10))
            assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "at most 50" in e.value.details()
        http = app.endpoints.http
        r = httpx.post(http + "/v1/completions", json={"prompt": "y" * 5000, "max_tokens": 1}, timeout=10)
        assert r.status_code == 413 and "error" in r.json()
        r = httpx.post(http + "/v1/completions", json={"prompt": "y" * 60, "max_tokens": 1}, timeout=10)
        assert r.status_code == 400 and r.json()["error"]["param"] == "prompt" and "at most 50" in r.json()["error"]["message"]
    finally:
        served.stop_app(app)
    served.wait_idle()


# ---- slow and idle clients ----------------------------------------------------------------------
TIMEOUTS = dict(header_timeout=1.5, body_timeout=1.5, idle_timeout=2.0)
SLACK = 2.0  # seconds of scheduling noise allowed past a deadline


@pytest.fixture(scope="module")
def strict_app(served):
    app = served.start_app(**TIMEOUTS)
    yield app
    served.stop_app(app)


def _trickle(sock: socket.socket, data: bytes, stop: threading.Event, interval: float = 1.0) -> None:
    """Send `data` one byte per `interval` seconds, until sent, stopped, or the server hangs up."""
    for b in data:
        if stop.is_set():
            return
        try:
            sock.sendall(bytes([b]))
        except OSError:
            return
        stop.wait(interval)


def _read_to_eof(sock: socket.socket, timeout: float) -> tuple[bytes, float]:
    """Everything the server sends until it closes the connection, and when it closed (monotonic)."""
    sock.settimeout(timeout)
    data = b""
    while chunk := sock.recv(4096):
        data += chunk
    return data, time.monotonic()


def _completion(url: str, reference) -> None:
    r = httpx.post(url + "/v1/completions", json={"prompt": "Hello world", "max_tokens": 8, "temperature": 0},
                   timeout=10)
    assert r.status_code == 200 and r.json()["choices"][0]["text"] == reference("Hello world", 8).text


def test_slow_headers_get_408_and_are_closed_while_others_are_served(strict_app, reference):
    """Three clients trickle a request's headers at one byte per second (slowloris)."""
    port = strict_app.endpoints.http_port
    head = b"POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
    stop = threading.Event()
    socks = [socket.create_connection(("127.0.0.1", port)) for _ in range(3)]
    t0 = time.monotonic()
    trickles = [threading.Thread(target=_trickle, args=(s, head, stop), daemon=True) for s in socks]
    try:
        for t in trickles:
            t.start()
        _completion(strict_app.endpoints.http, reference)  # served meanwhile
        for s in socks:
            data, closed = _read_to_eof(s, timeout=10)
            assert data.startswith(b"HTTP/1.1 408 "), data
            assert closed - t0 < TIMEOUTS["header_timeout"] + SLACK
    finally:
        stop.set()
        for s in socks:
            s.close()
    _completion(strict_app.endpoints.http, reference)


def test_slow_body_gets_408(strict_app, reference):
    head = (b"POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
            b"Content-Length: 60\r\n\r\n")
    stop = threading.Event()
    with socket.create_connection(("127.0.0.1", strict_app.endpoints.http_port)) as s:
        s.sendall(head)
        t0 = time.monotonic()
        threading.Thread(target=_trickle, args=(s, b'{"prompt": "x"' + b" " * 46, stop), daemon=True).start()
        try:
            s.settimeout(TIMEOUTS["body_timeout"] + SLACK)
            data = b""
            while not data.endswith(b"}}"):  # the whole 408 (its JSON body ends the response)
                data += s.recv(4096)
            assert time.monotonic() - t0 < TIMEOUTS["body_timeout"] + SLACK
        finally:
            stop.set()
    assert data.startswith(b"HTTP/1.1 408 ") and b'"request_timeout"' in data and b"Connection: close" in data, data
    _completion(strict_app.endpoints.http, reference)


def test_idle_keep_alive_connection_is_closed(strict_app):
    with socket.create_connection(("127.0.0.1", strict_app.endpoints.http_port)) as s:
        s.sendall(b"GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n")
        s.settimeout(10)
        first = s.recv(4096)
        assert first.startswith(b"HTTP/1.1 200 ")
        t0 = time.monotonic()
        rest, closed = _read_to_eof(s, timeout=TIMEOUTS["idle_timeout"] + SLACK + 5)
    assert rest == b"" and TIMEOUTS["idle_timeout"] - 0.5 < closed - t0 < TIMEOUTS["idle_timeout"] + SLACK


def test_grpc_handshake_deadline_and_idle_connections(strict_app):
    with socket.create_connection(("127.0.0.1", strict_app.endpoints.grpc_port)) as s:  # never sends a preface
        t0 = time.monotonic()
        _, closed = _read_to_eof(s, timeout=10)
    assert closed - t0 < TIMEOUTS["header_timeout"] + SLACK
    states = []
    with grpc.insecure_channel(strict_app.endpoints.grpc) as ch:
        ch.subscribe(watch := states.append)
        stub = medha_pb2_grpc.MedhaStub(ch)
        assert stub.Health(medha_pb2.HealthRequest(), timeout=5).status == medha_pb2.HealthResponse.SERVING
        ready, idle = grpc.ChannelConnectivity.READY, grpc.ChannelConnectivity.IDLE
        deadline = time.monotonic() + TIMEOUTS["idle_timeout"] + SLACK + 3
        while not (ready in states and idle in states[states.index(ready):]):
            assert time.monotonic() < deadline, states  # the server's GOAWAY after idle_timeout
            time.sleep(0.05)
        assert stub.Health(medha_pb2.HealthRequest(), timeout=5).status == medha_pb2.HealthResponse.SERVING
        # grpc's connectivity poller watches in 0.2 s waits; closing the channel under one raised
        # "Cannot monitor channel state: Channel closed!" in its thread
        ch.unsubscribe(watch)
        time.sleep(0.3)

