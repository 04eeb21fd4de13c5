"""ServerConfig: where and how the front ends listen, and the limits they enforce.

A typed dataclass validated on construction; its field docstrings become `serve --help`
(via medha_jax.cli_args), beside the EngineConfig and SchedulerConfig flags.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(slots=True)
class ServerConfig:
    """Front ends (gRPC and OpenAI-compatible HTTP), security and request limits."""

    host: str = "127.0.0.1"
    """Address both front ends bind (0.0.0.0 listens on every interface)."""
    port: int = 50051
    """gRPC port; 0 picks a free port (printed once listening); -1 disables gRPC."""
    http_port: int = 8000
    """OpenAI-compatible HTTP port; 0 picks a free port (printed once listening); -1 disables HTTP."""
    served_model_name: str | None = None
    """Model name in /v1/models and ModelInfo (requests may name it); default: the model directory's name."""
    api_key: str | None = None
    """Bearer token both front ends require (health checks excepted); also read from MEDHA_API_KEY."""
    tls_cert: str | None = None
    """PEM certificate chain; with tls_key, both front ends serve TLS only."""
    tls_key: str | None = None
    """PEM private key for tls_cert."""
    max_queue: int = 256
    """Most unfinished requests (waiting + running); more are refused with RESOURCE_EXHAUSTED / HTTP 429."""
    max_prompt_tokens: int | None = None
    """Longest prompt accepted, in tokens; default: the engine's max_model_len - 1."""
    max_message_bytes: int = 16 * 1024 * 1024
    """Largest request message (gRPC) or body (HTTP), in bytes."""
    max_prompts_per_request: int = 16
    """Most sequences one /v1/completions request starts: prompts (a list is a batch) x best_of (or n)."""
    chat_template: str | None = None
    """Path to a jinja2 chat template that overrides the tokenizer's."""
    drain_timeout: float = 300.0
    """Seconds to wait for in-flight requests after SIGTERM before aborting them."""
    header_timeout: float = 10.0
    """Seconds a client has to finish the TLS handshake, and then (HTTP) to send a request's line
    and headers, from their first byte or from connecting, else 408 and the connection is closed,
    or (gRPC) its HTTP/2 preface and settings."""
    body_timeout: float = 30.0
    """HTTP: seconds a client has to send a request's body once its headers are in, else 408 and the
    connection is closed."""
    idle_timeout: float = 30.0
    """Seconds a connection with no request in flight stays open (HTTP keep-alive; gRPC
    max_connection_idle, after which clients reconnect on their next call)."""

    def __post_init__(self) -> None:
        for name in ("port", "http_port"):
            v = getattr(self, name)
            if not isinstance(v, int) or not -1 <= v <= 65535:
                raise ValueError(f"{name} must be a port number, 0 (any free port) or -1 (disabled), got {v!r}")
        if self.port == -1 and self.http_port == -1:
            raise ValueError("port and http_port are both -1: at least one front end must be enabled")
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError("tls_cert and tls_key must be given together")
        for name in ("tls_cert", "tls_key", "chat_template"):
            path = getattr(self, name)
            if path is not None and not Path(path).is_file():
                raise ValueError(f"{name}: no such file {path!r}")
        if self.api_key is not None and not self.api_key.strip():
            raise ValueError("api_key must not be empty")
        for name in ("max_queue", "max_message_bytes", "max_prompts_per_request"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
        if self.max_prompt_tokens is not None and self.max_prompt_tokens < 1:
            raise ValueError(f"max_prompt_tokens must be >= 1, got {self.max_prompt_tokens!r}")
        if not self.drain_timeout >= 0:
            raise ValueError(f"drain_timeout must be >= 0 seconds, got {self.drain_timeout!r}")
        for name in ("header_timeout", "body_timeout", "idle_timeout"):
            v = getattr(self, name)
            if not 0.1 <= v <= 86400:
                raise ValueError(f"{name} must be between 0.1 and 86400 seconds, got {v!r}")

    @property
    def tls(self) -> bool:
        return self.tls_cert is not None
