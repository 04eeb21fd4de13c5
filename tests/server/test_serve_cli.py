"""`python -m medha_jax.serve` as a subprocess: ports printed, both front ends answer like the
Python API, and SIGTERM drains (new requests refused, running ones finish, exit code 0)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import grpc
import httpx
import openai
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from proto import medha_pb2, medha_pb2_grpc
from tests.server.engine_settings import ENGINE_KW

pytestmark = pytest.mark.multiprocess
ROOT = Path(__file__).resolve().parents[2]


def _flags(kw: dict) -> list[str]:
    out = []
    for k, v in kw.items():
        out += [f"--{k.replace('_', '-')}", str(v)]
    return out


def start_server(*extra: str):
    """(process, {"grpc": host:port, "http": url}, stdout lines so far, later lines, their reader thread)."""
    cmd = [sys.executable, "-m", "medha_jax.serve", *_flags(ENGINE_KW), "--port", "0", "--http-port", "0",
           "--log-level", "WARNING", *extra]
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines, ports = [], {}
    deadline = time.monotonic() + 180
    while len(ports) < 2 and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        if m := re.search(r"gRPC listening on ([\d.]+):(\d+)", line):
            ports["grpc"] = f"{m[1]}:{m[2]}"
        if m := re.search(r"HTTP listening on (http://[\d.]+:\d+)", line):
            ports["http"] = m[1]
    if len(ports) < 2:
        proc.kill()
        pytest.fail("server did not print its endpoints:\n" + "".join(lines))
    rest: list[str] = []
    reader = threading.Thread(target=lambda: rest.extend(proc.stdout), daemon=True)
    reader.start()
    return proc, ports, lines, rest, reader


@pytest.fixture(scope="module")
def server_proc():
    handle = start_server()
    yield handle
    proc = handle[0]
    if proc.poll() is None:
        proc.kill()
        proc.wait(10)


def _long_call(stub, max_tokens=240):
    return iter(stub.Generate(medha_pb2.GenerateRequest(text="drain", sampling=medha_pb2.SamplingParameters(
        max_tokens=max_tokens, temperature=0.0, ignore_eos=True)), timeout=60))


def _wait_draining(http_url):
    deadline = time.monotonic() + 10
    while httpx.get(http_url + "/health", timeout=5).status_code != 503:
        assert time.monotonic() < deadline, "server never reported draining"
        time.sleep(0.005)


def test_prints_one_line_per_endpoint_on_loopback(server_proc):
    _, ports, lines, _, _ = server_proc
    assert ports["grpc"].startswith("127.0.0.1:") and not ports["grpc"].endswith(":0")
    assert ports["http"].startswith("http://127.0.0.1:") and not ports["http"].endswith(":0")
    assert sum("listening on" in line for line in lines) == 2


def test_both_front_ends_equal_the_python_api(server_proc, reference):
    _, ports, _, _, _ = server_proc
    ref = reference("Hello world", 8)
    with grpc.insecure_channel(ports["grpc"]) as ch:
        msgs = list(medha_pb2_grpc.MedhaStub(ch).Generate(medha_pb2.GenerateRequest(
            text="Hello world", sampling=medha_pb2.SamplingParameters(max_tokens=8, temperature=0.0)), timeout=30))
    assert [t for m in msgs for t in m.token_ids] == ref.token_ids
    client = openai.OpenAI(base_url=ports["http"] + "/v1", api_key="x", max_retries=0)
    r = client.completions.create(model="demo", prompt="Hello world", max_tokens=8, temperature=0)
    assert r.choices[0].text == ref.text
    chunks = client.completions.create(model="demo", prompt="Hello world", max_tokens=8, temperature=0, stream=True)
    assert "".join(c.choices[0].text for c in chunks) == ref.text


def test_sigterm_drains_then_exits_zero(server_proc):
    proc, ports, _, rest, reader = server_proc
    with grpc.insecure_channel(ports["grpc"]) as ch:
        stub = medha_pb2_grpc.MedhaStub(ch)
        health = health_pb2_grpc.HealthStub(ch)
        watch = health.Watch(health_pb2.HealthCheckRequest(service="medha.v1.Medha"), timeout=60)
        assert next(watch).status == health_pb2.HealthCheckResponse.SERVING
        it = _long_call(stub)
        got = len(next(it).token_ids)
        proc.send_signal(signal.SIGTERM)
        _wait_draining(ports["http"])
        assert next(watch).status == health_pb2.HealthCheckResponse.NOT_SERVING  # pushed to watchers
        for name in ("", "medha.v1.Medha"):
            r = health.Check(health_pb2.HealthCheckRequest(service=name), timeout=5)
            assert r.status == health_pb2.HealthCheckResponse.NOT_SERVING, name
        with pytest.raises(grpc.RpcError) as e:
            list(stub.Generate(medha_pb2.GenerateRequest(text="late"), timeout=10))
        assert e.value.code() == grpc.StatusCode.UNAVAILABLE
        r = httpx.post(ports["http"] + "/v1/completions", json={"prompt": "late", "max_tokens": 1}, timeout=10)
        assert r.status_code == 503 and r.json()["error"]["type"] == "service_unavailable"
        msgs = list(it)
        got += sum(len(m.token_ids) for m in msgs)
    assert got == 240 and msgs[-1].finish_reason == medha_pb2.FINISH_REASON_LENGTH
    assert proc.wait(30) == 0
    reader.join(10)
    assert any("stopped" in line for line in rest), rest


def test_second_signal_stops_at_once():
    # A longer context than the session's so the cut-off request cannot finish first (~1000 decode steps).
    proc, ports, _, rest, reader = start_server("--drain-timeout", "600", "--max-model-len", "1024",
                                                "--min-page-bucket", "64")
    try:
        with grpc.insecure_channel(ports["grpc"]) as ch:
            it = _long_call(medha_pb2_grpc.MedhaStub(ch), max_tokens=1000)
            next(it)
            proc.send_signal(signal.SIGTERM)
            _wait_draining(ports["http"])
            proc.send_signal(signal.SIGTERM)
            with pytest.raises(grpc.RpcError):
                list(it)  # cut off, not finished
        assert proc.wait(30) == 0
        reader.join(10)
        assert any("aborting in-flight" in line for line in rest), rest
    finally:
        if proc.poll() is None:
            proc.kill()
