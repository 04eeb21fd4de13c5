"""Bearer-token authentication for both front ends, and the TLS contexts they serve with.

  gRPC:  metadata "authorization: Bearer <key>" --BearerAuthInterceptor--> servicer | UNAUTHENTICATED
  HTTP:  header   "Authorization: Bearer <key>" --bearer_middleware------> handler   | 401 (OpenAI error JSON)

Health checks (medha.v1.Medha/Health, grpc.health.v1.Health, GET /health) stay open so load
balancers can probe without the key; everything else, server reflection included, needs it.
Tokens are compared in constant time.
"""

from __future__ import annotations

import hmac
import ssl

import grpc
from aiohttp import web

OPEN_GRPC_METHODS = ("/medha.v1.Medha/Health", "/grpc.health.v1.Health/Check", "/grpc.health.v1.Health/Watch")
OPEN_HTTP_PATHS = ("/health",)


def token_matches(authorization: str | None, api_key: str) -> bool:
    if not authorization:
        return False
    scheme, _, token = authorization.partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(), api_key.encode())


class BearerAuthInterceptor(grpc.aio.ServerInterceptor):
    def __init__(self, api_key: str, on_reject=None):
        self.api_key = api_key
        self.on_reject = on_reject
        self._deny = {  # by (request streaming, response streaming) of the method refused
            (False, False): grpc.unary_unary_rpc_method_handler(_deny_unary),
            (False, True): grpc.unary_stream_rpc_method_handler(_deny_stream),
            (True, False): grpc.stream_unary_rpc_method_handler(_deny_unary),
            (True, True): grpc.stream_stream_rpc_method_handler(_deny_stream),
        }

    async def intercept_service(self, continuation, handler_call_details):
        handler = await continuation(handler_call_details)
        if handler is None or handler_call_details.method in OPEN_GRPC_METHODS:
            return handler
        metadata = dict(handler_call_details.invocation_metadata or ())
        if token_matches(metadata.get("authorization"), self.api_key):
            return handler
        if self.on_reject is not None:
            self.on_reject("unauthenticated")
        return self._deny[handler.request_streaming, handler.response_streaming]


_DENIED = "missing or invalid bearer token (send metadata 'authorization: Bearer <key>')"


async def _deny_unary(request, context):
    await context.abort(grpc.StatusCode.UNAUTHENTICATED, _DENIED)


async def _deny_stream(request, context):
    await context.abort(grpc.StatusCode.UNAUTHENTICATED, _DENIED)
    yield  # pragma: no cover - makes this an async generator, as the method expects


def bearer_middleware(api_key: str, error_response, on_reject=None):
    """aiohttp middleware: 401 with an OpenAI-style error unless the bearer token matches."""

    @web.middleware
    async def middleware(request: web.Request, handler):
        if request.path in OPEN_HTTP_PATHS or token_matches(request.headers.get("Authorization"), api_key):
            return await handler(request)
        if on_reject is not None:
            on_reject("unauthenticated")
        return error_response(401, "missing or invalid bearer token (header 'Authorization: Bearer <key>')",
                              "authentication_error", None, "invalid_api_key")

    return middleware


def grpc_server_credentials(cert_path: str, key_path: str) -> grpc.ServerCredentials:
    with open(key_path, "rb") as k, open(cert_path, "rb") as c:
        return grpc.ssl_server_credentials([(k.read(), c.read())])


def http_ssl_context(cert_path: str, key_path: str) -> ssl.SSLContext:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(cert_path, key_path)
    return ctx
