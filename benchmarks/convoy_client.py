"""Helpers of benchmarks/convoy.py: the server subprocess and the gRPC load generator.

  ServerProcess(flags)  python -m medha_jax.serve ... --port 0 --http-port 0 (subprocess; stdout and
                        stderr to a log file) -> "gRPC listening on HOST:PORT" parsed -> .address;
                        .metrics(): the HTTP front end's Prometheus /metrics (iterations, iteration time)
                        .stop(): SIGTERM (the server drains), then kill after a timeout
  run_workload(address, specs, ...)
                        one grpc.aio stream per request, each sent at its scheduled offset from a
                        common start; per request: send time, first-token time, every message's
                        time and token count (client clock), the server's Timings, errors
  cpu_probe()           seconds for a fixed pure-Python loop (how much CPU this process gets now)
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import grpc

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from proto import medha_pb2, medha_pb2_grpc  # noqa: E402

_GRPC_RE = re.compile(r"gRPC listening on (\S+?):(\d+)")
_HTTP_RE = re.compile(r"HTTP listening on (http://\S+)")


class ServerError(RuntimeError):
    pass


class ServerProcess:
    """`python -m medha_jax.serve` on a free port, its output in `log_path`."""

    def __init__(self, flags: list[str], log_path: str | os.PathLike, *, env: dict | None = None,
                 start_timeout: float = 900.0):
        self.flags = list(flags)
        self.log_path = Path(log_path)
        self.cmd = [sys.executable, "-m", "medha_jax.serve", *self.flags, "--host", "127.0.0.1",
                    "--port", "0", "--http-port", "0", "--log-level", "WARNING"]
        full_env = dict(os.environ if env is None else env)
        full_env["PYTHONPATH"] = str(ROOT) + (os.pathsep + full_env["PYTHONPATH"] if full_env.get("PYTHONPATH") else "")
        full_env.setdefault("JAX_PLATFORMS", "cpu")
        full_env.setdefault("PYTHONUNBUFFERED", "1")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "w")
        self._log.write("$ " + " ".join(self.cmd) + "\n")
        self._log.flush()
        t0 = time.monotonic()
        self.proc = subprocess.Popen(self.cmd, cwd=ROOT, env=full_env, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, bufsize=1)
        self.address: str | None = None
        self.http_url: str | None = None
        self._ready = threading.Event()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        if not self._ready.wait(start_timeout) or self.address is None:
            self.kill()
            raise ServerError(f"server did not come up within {start_timeout:.0f} s; see {self.log_path}:\n"
                              + self.tail())
        self.startup_s = time.monotonic() - t0

    def _read(self) -> None:
        for line in self.proc.stdout:
            self._log.write(line)
            self._log.flush()
            if self.address is None and (m := _GRPC_RE.search(line)):
                self.address = f"{m[1]}:{m[2]}"
            if self.http_url is None and (m := _HTTP_RE.search(line)):
                self.http_url = m[1]
            if self.address is not None and self.http_url is not None:
                self._ready.set()
        self._ready.set()  # EOF: the process ended (ready or not)

    def metrics(self) -> dict[str, float]:
        """The server's Prometheus /metrics as {sample name with labels: value} (empty on failure)."""
        import urllib.request

        try:
            with urllib.request.urlopen(self.http_url + "/metrics", timeout=30) as r:
                text = r.read().decode()
        except OSError:
            return {}
        out = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                try:
                    out[name] = float(value)
                except ValueError:
                    pass
        return out

    def tail(self, n: int = 30) -> str:
        try:
            return "".join(self.log_path.read_text().splitlines(keepends=True)[-n:])
        except OSError:
            return ""

    def stop(self, timeout: float = 60.0) -> int | None:
        """SIGTERM (graceful drain), then SIGKILL after `timeout`; the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        self._reader.join(10)
        self._log.close()
        return self.proc.returncode

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)

    def __enter__(self) -> "ServerProcess":
        return self

    def __exit__(self, *exc) -> None:
        if self.proc.poll() is None:
            self.stop()


@dataclass
class RequestSpec:
    request_id: str
    kind: str  # "short" | "long"
    arrival_s: float  # offset from the start of the run
    prompt_len: int
    max_tokens: int
    ttft_deadline_s: float | None = None
    seed: int = 0

    def prompt_ids(self) -> list[int]:
        """Deterministic byte-token prompt (ids 0..255: plain bytes of the demo tokenizer)."""
        x = (self.seed * 2654435761 + 12345) & 0xFFFFFFFF
        out = []
        for _ in range(self.prompt_len):
            x = (1103515245 * x + 12345) & 0x7FFFFFFF
            out.append(32 + (x >> 16) % 95)  # printable ASCII
        return out


@dataclass
class RequestResult:
    request_id: str
    kind: str
    arrival_s: float
    prompt_len: int
    max_tokens: int
    ttft_deadline_s: float | None
    send_s: float | None = None  # client clock, offset from the run start
    first_token_s: float | None = None
    finish_s: float | None = None
    num_tokens: int = 0
    message_times_s: list[float] = field(default_factory=list)
    message_tokens: list[int] = field(default_factory=list)
    server_ttft_s: float | None = None
    server_tpot_s: float | None = None
    server_queue_s: float | None = None
    server_e2e_s: float | None = None
    num_preemptions: int = 0
    finish_reason: str | None = None
    error: str | None = None

    @property
    def ttft(self) -> float | None:
        if self.first_token_s is None or self.send_s is None:
            return None
        return self.first_token_s - self.send_s

    @property
    def e2e(self) -> float | None:
        if self.finish_s is None or self.send_s is None:
            return None
        return self.finish_s - self.send_s

    @property
    def tpot(self) -> float | None:
        if self.finish_s is None or self.first_token_s is None or self.num_tokens < 2:
            return None
        return (self.finish_s - self.first_token_s) / (self.num_tokens - 1)

    def to_json(self) -> dict:
        d = asdict(self)
        d.update(ttft_s=self.ttft, tpot_s=self.tpot, e2e_s=self.e2e)
        d["message_times_s"] = [round(t, 4) for t in self.message_times_s]
        return {k: round(v, 6) if isinstance(v, float) else v for k, v in d.items()}


def _request_message(spec: RequestSpec) -> medha_pb2.GenerateRequest:
    msg = medha_pb2.GenerateRequest(
        request_id=spec.request_id,
        token_ids=medha_pb2.TokenIds(ids=spec.prompt_ids()),
        sampling=medha_pb2.SamplingParameters(max_tokens=spec.max_tokens, temperature=0.0, ignore_eos=True),
    )
    if spec.ttft_deadline_s is not None:
        msg.slo.ttft_deadline_s = spec.ttft_deadline_s
    return msg


_FINISH = {v: k for k, v in medha_pb2.FinishReason.items()}


async def _one(stub, spec: RequestSpec, t0: float, timeout: float) -> RequestResult:
    res = RequestResult(spec.request_id, spec.kind, spec.arrival_s, spec.prompt_len, spec.max_tokens,
                        spec.ttft_deadline_s)
    msg = _request_message(spec)  # built before the wait: prompt building is not on the clock
    delay = t0 + spec.arrival_s - time.monotonic()
    if delay > 0:
        await asyncio.sleep(delay)
    res.send_s = time.monotonic() - t0
    try:
        call = stub.Generate(msg, timeout=timeout)
        async for m in call:
            now = time.monotonic() - t0
            n = len(m.token_ids)
            if n:
                res.message_times_s.append(now)
                res.message_tokens.append(n)
                res.num_tokens += n
                if res.first_token_s is None:
                    res.first_token_s = now
            if m.finish_reason:
                res.finish_s = now
                res.finish_reason = _FINISH.get(m.finish_reason, str(m.finish_reason))
                t = m.timings
                res.server_ttft_s, res.server_tpot_s = t.ttft_s, t.tpot_s
                res.server_queue_s, res.server_e2e_s = t.queue_s, t.e2e_s
                res.num_preemptions = t.num_preemptions
    except grpc.aio.AioRpcError as e:
        res.error = f"{e.code().name}: {e.details()}"
    except asyncio.CancelledError:
        res.error = "cancelled: the run's time limit passed"
    return res


async def _run(address: str, specs: list[RequestSpec], timeout: float, on_done=None) -> tuple[list[RequestResult], float]:
    opts = [("grpc.max_send_message_length", 64 << 20), ("grpc.max_receive_message_length", 64 << 20)]
    async with grpc.aio.insecure_channel(address, options=opts) as ch:
        stub = medha_pb2_grpc.MedhaStub(ch)
        await asyncio.wait_for(ch.channel_ready(), 30)
        t0 = time.monotonic() + 0.2
        tasks = [asyncio.ensure_future(_one(stub, s, t0, timeout)) for s in specs]
        if on_done is not None:
            for t in tasks:
                t.add_done_callback(lambda f: on_done(f.result()) if not f.cancelled() else None)
        last = max((s.arrival_s for s in specs), default=0.0)
        _, pending = await asyncio.wait(tasks, timeout=max(0.0, t0 + last - time.monotonic()) + timeout)
        for t in pending:
            t.cancel()
        results = await asyncio.gather(*tasks)
        return list(results), t0


def run_workload(address: str, specs: list[RequestSpec], *, timeout: float, on_done=None,
                 with_start: bool = False):
    """Send every request at its offset; returns results in spec order (and, with_start, the
    time.monotonic() the offsets count from). `timeout`: how long after the last arrival the run
    may go on (later requests are cancelled and marked with an error)."""
    results, t0 = asyncio.run(_run(address, specs, timeout, on_done))
    return (results, t0) if with_start else results


class MetricsPoller:
    """Scrapes a server's /metrics every `period` s in a thread: [(monotonic, iterations, busy seconds)]."""

    def __init__(self, server: "ServerProcess", period: float = 0.5):
        self.server, self.period = server, period
        self.samples: list[tuple[float, float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            m = self.server.metrics()
            if m:
                it = m.get("medha_engine_iterations_total", m.get("medha_engine_iterations", 0.0))
                self.samples.append((time.monotonic(), it, m.get("medha_iteration_seconds_sum", 0.0)))
            self._stop.wait(self.period)

    def __enter__(self) -> "MetricsPoller":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(30)


def generate_once(address: str, prompt_len: int, max_tokens: int, *, seed: int = 0, timeout: float = 600.0,
                  ttft_deadline_s: float | None = None) -> RequestResult:
    """One request right now (calibration probes)."""
    spec = RequestSpec(f"probe-{prompt_len}-{max_tokens}-{seed}-{time.monotonic_ns()}", "probe", 0.0, prompt_len,
                       max_tokens, ttft_deadline_s, seed=seed)
    res = run_workload(address, [spec], timeout=timeout)[0]
    if res.error:
        raise ServerError(f"probe request failed: {res.error}")
    return res


def cpu_probe(repeats: int = 5) -> float:
    """Fastest of `repeats` runs of a fixed pure-Python loop, in seconds (one thread, no BLAS):
    about 0.02 s on an idle core of the dev VM; higher means this process gets less CPU now."""
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        x = 0
        for i in range(200_000):
            x = (x * 31 + i) & 0xFFFF
        best = min(best, time.perf_counter() - t)
    return best
