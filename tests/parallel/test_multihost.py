"""Two processes with 4 CPU devices each form one (tp=2, spp=2, kvp=2) mesh and serve end to end.

    process 0: python -m medha_jax.serve --multihost --process-id 0 ...  (front ends, scheduler)
    process 1: python -m medha_jax.serve --multihost --process-id 1 ...  (replays process 0's steps)

A greedy completion of a 1000-token golden prompt (its KV spreads over both kvp groups, and a
kvp group is a process here) over gRPC equals transformers'; SIGTERM to process 0 drains it,
it tells process 1 to stop, and both exit 0. Loopback only; bounded by timeouts.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import grpc
import pytest

from proto import medha_pb2, medha_pb2_grpc

pytestmark = pytest.mark.multiprocess
ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "tiny-llama3"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(pid: int, coordinator: str) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "medha_jax.serve", "--model", str(DATA), "--mesh", "tp=2,spp=2,kvp=2",
           "--dtype", "float32", "--policy", "fcfs", "--max-model-len", "2048", "--num-pages", "64",
           "--max-tokens-per-kvp-group", "768", "--max-num-batched-tokens", "256", "--max-num-seqs", "4",
           "--min-page-bucket", "64", "--no-warmup", "--port", "0", "--http-port", "-1", "--log-level", "WARNING",
           "--multihost", "--coordinator-address", coordinator, "--num-processes", "2", "--process-id", str(pid)]
    env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS="--xla_force_host_platform_device_count=4",
               PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _collect(proc: subprocess.Popen, lines: list[str]) -> threading.Thread:
    t = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
    t.start()
    return t


def test_two_processes_serve_one_mesh():
    golden = json.loads((DATA / "golden.json").read_text())
    prompt = next(p for p in golden["prompts"] if len(p["token_ids"]) == 1000)
    coordinator = f"127.0.0.1:{_free_port()}"
    procs = [_start(0, coordinator), _start(1, coordinator)]
    logs: list[list[str]] = [[], []]
    readers = [_collect(p, log) for p, log in zip(procs, logs)]
    try:
        addr, deadline = None, time.monotonic() + 240
        while addr is None and time.monotonic() < deadline and procs[0].poll() is None:
            for line in list(logs[0]):
                if m := re.search(r"gRPC listening on (127\.0\.0\.1:\d+)", line):
                    addr = m[1]
            time.sleep(0.2)
        assert addr, "leader never listened:\n" + "".join(logs[0]) + "\n--- follower:\n" + "".join(logs[1])
        with grpc.insecure_channel(addr) as ch:
            req = medha_pb2.GenerateRequest(
                token_ids=medha_pb2.TokenIds(ids=prompt["token_ids"]),
                sampling=medha_pb2.SamplingParameters(max_tokens=golden["new_tokens"], temperature=0.0,
                                                      ignore_eos=True))
            msgs = list(medha_pb2_grpc.MedhaStub(ch).Generate(req, timeout=240))
        assert [t for m in msgs for t in m.token_ids] == prompt["greedy"]
        procs[0].send_signal(signal.SIGTERM)
        codes = [p.wait(timeout=120) for p in procs]
        for t in readers:
            t.join(10)
        assert codes == [0, 0], "".join(logs[0]) + "\n--- follower:\n" + "".join(logs[1])
        assert any("following process 0" in ln for ln in logs[1])
        assert any("follower stopped" in ln for ln in logs[1])
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(10)
