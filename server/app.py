"""ServingApp: both front ends on one asyncio loop, over one AsyncEngine.

  ServingApp.start():  metrics registry -> grpc.aio server (MedhaServicer, grpc.health.v1,
                       reflection, auth interceptor, message-size limits, connection options,
                       TLS) and aiohttp app (OpenAIServer, deadline + auth + error middlewares,
                       body-size limit, header/body/idle timeouts, TLS, handler cancellation on
                       disconnect) -> bound on config.host, real ports (port 0 = any free) in .endpoints
  ServingApp.drain():  health NOT_SERVING, refuse new requests (UNAVAILABLE / 503), let in-flight
                       ones finish, then close both servers.
  ServingApp.stop():   close both servers now (in-flight calls are cancelled and so aborted).

The AsyncEngine is started by whoever owns it (serve.py, or a test fixture) and may outlive the
app, so several apps (say, one with TLS and one without) can share one compiled engine.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import grpc
from aiohttp import web

from server.auth import BearerAuthInterceptor, bearer_middleware, grpc_server_credentials, http_ssl_context
from server.chat_template import ChatTemplate
from server.config import ServerConfig
from server.grpc_service import MedhaServicer, add_to_server
from server.grpc_standard import EngineHealth, add_standard_services
from server.http_deadlines import DeadlineSite, deadline_middleware
from server.metrics import ServerMetrics
from server.openai_http import OpenAIServer, error_middleware, error_response

log = logging.getLogger(__name__)


@dataclass
class Endpoints:
    grpc: str | None  # "host:port"
    http: str | None  # "http(s)://host:port"
    grpc_port: int | None
    http_port: int | None


GRPC_KEEPALIVE = [
    ("grpc.keepalive_time_ms", 60_000),  # ping a client after a minute without traffic ...
    ("grpc.keepalive_timeout_ms", 20_000),  # ... and drop it if the ping is not answered in 20 s
    ("grpc.http2.min_recv_ping_interval_without_data_ms", 10_000),  # clients may ping every 10 s ...
    ("grpc.http2.max_ping_strikes", 2),  # ... more often, twice, and they get GOAWAY (ping floods)
]
"""gRPC keep-alive: finds dead peers under long generations, refuses ping floods."""


def grpc_options(cfg: ServerConfig) -> list[tuple[str, int]]:
    """grpc.aio server options: message sizes, the handshake and idle limits of cfg, keep-alive."""
    return [("grpc.max_receive_message_length", cfg.max_message_bytes),
            ("grpc.max_send_message_length", cfg.max_message_bytes),
            ("grpc.so_reuseport", 0),
            ("grpc.server_handshake_timeout_ms", int(cfg.header_timeout * 1000)),
            ("grpc.max_connection_idle_ms", int(cfg.idle_timeout * 1000)),
            *GRPC_KEEPALIVE]


def host_port(host: str, port: int) -> str:
    """host:port, with an IPv6 host in brackets."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def default_model_name(model: str) -> str:
    return Path(model.rstrip("/")).name or model


class ServingApp:
    def __init__(self, async_engine, config: ServerConfig, *, model: str = "demo", mesh: str = "", dtype: str = ""):
        self.ae = async_engine
        self.config = config
        eng = async_engine.engine
        self.model_name = config.served_model_name or default_model_name(model)
        limit = eng.max_model_len - 1
        self.max_prompt_tokens = min(config.max_prompt_tokens or limit, limit)
        self.mesh, self.dtype = mesh, dtype
        self.metrics: ServerMetrics | None = None
        self._grpc: grpc.aio.Server | None = None
        self._health: EngineHealth | None = None
        self._runner: web.AppRunner | None = None
        self.endpoints: Endpoints | None = None

    async def start(self) -> Endpoints:
        cfg = self.config
        self.metrics = ServerMetrics(self.ae)
        template_src = Path(cfg.chat_template).read_text() if cfg.chat_template else None
        chat_template = ChatTemplate(self.ae.engine.tokenizer, template_src)
        grpc_target = http_url = None
        grpc_port = http_port = None
        if cfg.port != -1:
            grpc_port = await self._start_grpc()
            grpc_target = host_port(cfg.host, grpc_port)
        if cfg.http_port != -1:
            http_port = await self._start_http(chat_template)
            http_url = f"{'https' if cfg.tls else 'http'}://{host_port(cfg.host, http_port)}"
        self.endpoints = Endpoints(grpc_target, http_url, grpc_port, http_port)
        return self.endpoints

    async def _start_grpc(self) -> int:
        cfg = self.config
        interceptors = [BearerAuthInterceptor(cfg.api_key, self.metrics.reject)] if cfg.api_key else []
        server = grpc.aio.server(interceptors=interceptors, options=grpc_options(cfg))
        servicer = MedhaServicer(self.ae, model_name=self.model_name, max_prompt_tokens=self.max_prompt_tokens,
                                 mesh=self.mesh, dtype=self.dtype, metrics=self.metrics)
        add_to_server(servicer, server)
        self._health = await add_standard_services(server, self.ae)
        address = host_port(cfg.host, cfg.port)
        if cfg.tls:
            port = server.add_secure_port(address, grpc_server_credentials(cfg.tls_cert, cfg.tls_key))
        else:
            port = server.add_insecure_port(address)
        if port == 0:
            raise OSError(f"gRPC could not bind {address}")
        await server.start()
        self._grpc = server
        return port

    async def _start_http(self, chat_template: ChatTemplate) -> int:
        cfg = self.config
        middlewares = [deadline_middleware, error_middleware]
        if cfg.api_key:
            middlewares.append(bearer_middleware(cfg.api_key, error_response, self.metrics.reject))
        app = web.Application(client_max_size=cfg.max_message_bytes, middlewares=middlewares)
        OpenAIServer(self.ae, model_name=self.model_name, max_prompt_tokens=self.max_prompt_tokens,
                     max_prompts=cfg.max_prompts_per_request, chat_template=chat_template,
                     body_timeout=cfg.body_timeout, metrics=self.metrics).add_routes(app)
        runner = web.AppRunner(app, handler_cancellation=True, access_log=None, shutdown_timeout=5.0,
                               keepalive_timeout=cfg.idle_timeout)
        await runner.setup()
        ssl_ctx = http_ssl_context(cfg.tls_cert, cfg.tls_key) if cfg.tls else None
        site = DeadlineSite(runner, cfg.host, cfg.http_port, header_timeout=cfg.header_timeout, ssl_context=ssl_ctx)
        await site.start()
        self._runner = runner
        return runner.addresses[-1][1]

    async def drain(self, timeout: float | None = None) -> bool:
        """Stop admitting, wait for in-flight requests (up to timeout), close the servers. True if all finished."""
        if self._health is not None:
            await self._health.enter_graceful_shutdown()  # Watch streams see NOT_SERVING now
        finished = await self.ae.drain(timeout)
        await self.stop(grace=5.0)
        return finished

    async def stop(self, grace: float | None = None) -> None:
        if self._grpc is not None:
            await self._health.enter_graceful_shutdown()
            await self._grpc.stop(grace)
            self._grpc = self._health = None
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self.metrics is not None:
            self.metrics.detach()
            self.metrics = None
