"""One real server for the whole test session, on a background asyncio loop in this process.

  session: Engine(demo, one shape bucket) -> AsyncEngine -> ServingApp(gRPC + HTTP on 127.0.0.1:0)
  tests:   grpcio / openai / httpx clients against the printed ports; `served.run(coro)` runs a
           coroutine on the server's loop (to start extra apps that share the same engine).

The engine settings (engine_settings.py) keep one shape bucket, so warm-up is one compile.
`reference` is the Python API (`LLM(...)` with the same settings) the servers must equal.
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass

import pytest

from tests.server.engine_settings import ENGINE_KW


class LoopThread:
    """An asyncio loop running forever on a daemon thread."""

    def __init__(self):
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="test-server-loop", daemon=True)
        self.thread.start()

    def run(self, coro, timeout: float = 60.0):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self):
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@dataclass
class Served:
    loop: LoopThread
    engine: object
    async_engine: object
    app: object
    grpc_target: str
    http_url: str

    def run(self, coro, timeout: float = 60.0):
        return self.loop.run(coro, timeout)

    def start_app(self, **server_kw):
        """Another ServingApp (its own ports/options) over the same engine; stop it with stop_app."""
        from server.app import ServingApp
        from server.config import ServerConfig

        app = ServingApp(self.async_engine, ServerConfig(host="127.0.0.1", port=0, http_port=0, **server_kw))
        self.run(app.start())
        return app

    def stop_app(self, app):
        self.run(app.stop(grace=1.0))

    def count_finished(self, reason: str) -> float:
        """Requests the session app has seen finish with `reason` (from its Prometheus counter)."""
        return self.app.metrics.finished.labels(reason)._value.get()

    def wait_idle(self, timeout: float = 30.0) -> None:
        """Until nothing is in flight and every KV page is free again (asserts it)."""
        deadline = time.monotonic() + timeout
        kv = self.engine.kv_manager
        while time.monotonic() < deadline:
            if (self.async_engine.num_inflight == 0 and not self.engine.has_unfinished()
                    and kv.num_free_pages == kv.num_total_pages):
                return
            time.sleep(0.02)
        raise AssertionError(
            f"not idle after {timeout}s: inflight={self.async_engine.num_inflight} "
            f"unfinished={self.engine.has_unfinished()} free={kv.num_free_pages}/{kv.num_total_pages}")


@pytest.fixture(scope="session")
def served():
    from medha_jax.async_engine import AsyncEngine
    from medha_jax.engine import Engine
    from medha_jax.llm import split_config_kwargs
    from server.app import ServingApp
    from server.config import ServerConfig

    engine_config, scheduler_config = split_config_kwargs(ENGINE_KW)
    engine = Engine(engine_config, scheduler_config)
    lt = LoopThread()

    async def start():
        ae = AsyncEngine(engine, max_queue=64)
        ae.start()
        app = ServingApp(ae, ServerConfig(host="127.0.0.1", port=0, http_port=0), model="demo")
        ep = await app.start()
        return ae, app, ep

    ae, app, ep = lt.run(start())
    yield Served(lt, engine, ae, app, ep.grpc, ep.http)
    lt.run(app.stop(grace=1.0))
    lt.run(ae.shutdown())
    lt.close()


@pytest.fixture(scope="session")
def reference():
    """greedy(prompt, max_tokens, **sampling) -> the Python API's RequestOutput for that prompt alone."""
    from medha_jax.llm import LLM
    from medha_jax.sampling_params import SamplingParams

    llm = LLM(**ENGINE_KW)
    cache = {}

    def greedy(prompt, max_tokens=8, **kw):
        key = (repr(prompt), max_tokens, repr(sorted(kw.items())))
        if key not in cache:
            cache[key] = llm.generate([prompt], SamplingParams(max_tokens=max_tokens, temperature=0.0, **kw))[0]
        return cache[key]

    greedy.llm = llm
    return greedy


@pytest.fixture(scope="module")
def client(served):
    """The official `openai` client on the served HTTP front end."""
    import openai

    c = openai.OpenAI(base_url=served.http_url + "/v1", api_key="unused", max_retries=0, timeout=60)
    yield c
    c.close()
