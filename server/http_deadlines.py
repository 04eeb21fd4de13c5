"""Slow-client deadlines for the HTTP front end (aiohttp itself has only an idle keep-alive timer).

  socket --DeadlineSite--> HeaderDeadline (asyncio protocol in front of aiohttp's RequestHandler)
      header timer: armed when the connection opens, and by the first byte that arrives while
      no request is in flight; disarmed when a request reaches the app (deadline_middleware).
      Fired: "408 Request Timeout" is written and the connection closed, whatever aiohttp holds.
  handler --read_body(request, timeout)--> the body | BodyTimeout (the handler answers 408 with
      Connection: close; aiohttp then reads and drops what more arrives for up to its
      lingering_time, 10 s, so the client can read the 408, and closes)
  aiohttp's keepalive_timeout (ServingApp passes idle_timeout): a connection with no request in
      flight is closed.

So a client trickling its headers holds a connection at most header_timeout, its body at most
body_timeout + 10 s, and an idle connection lives at most idle_timeout.
"""

from __future__ import annotations

import asyncio

from aiohttp import web

_TIMEOUT_TEXT = b"the request headers took too long\n"
REQUEST_TIMEOUT = (b"HTTP/1.1 408 Request Timeout\r\nContent-Type: text/plain\r\nConnection: close\r\n"
                   b"Content-Length: %d\r\n\r\n%s" % (len(_TIMEOUT_TEXT), _TIMEOUT_TEXT))


class BodyTimeout(Exception):
    pass


class HeaderDeadline(asyncio.Protocol):
    """Forwards every event to aiohttp's protocol (`inner`); closes a connection whose request
    line and headers are not in within `timeout` seconds."""

    def __init__(self, inner: asyncio.Protocol, timeout: float):
        self.inner = inner
        self.timeout = timeout
        self.in_request = False
        self._transport: asyncio.Transport | None = None
        self._timer: asyncio.TimerHandle | None = None

    # ---- asyncio.Protocol, forwarded ---------------------------------------------------------
    def connection_made(self, transport) -> None:
        self._transport = transport
        self.inner.connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        if not self.in_request and self._timer is None:
            self._arm()  # the first byte of the next request
        self.inner.data_received(data)

    def eof_received(self):
        return self.inner.eof_received()

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        self.inner.connection_lost(exc)

    # ---- told by deadline_middleware -----------------------------------------------------------
    def request_started(self) -> None:
        self.in_request = True
        self._disarm()

    def request_finished(self) -> None:
        self.in_request = False

    # ---- the timer ---------------------------------------------------------------------------
    def _arm(self) -> None:
        self._timer = asyncio.get_running_loop().call_later(self.timeout, self._expired)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _expired(self) -> None:
        self._timer = None
        if self.in_request or self._transport.is_closing():
            return
        self._transport.write(REQUEST_TIMEOUT)
        self._transport.close()


@web.middleware
async def deadline_middleware(request: web.Request, handler):
    """Marks the connection busy while the request is handled (first in the middleware chain)."""
    transport = request.transport
    conn = transport.get_protocol() if transport is not None else None
    if not isinstance(conn, HeaderDeadline):
        return await handler(request)
    conn.request_started()
    try:
        return await handler(request)
    finally:
        conn.request_finished()


async def read_body(request: web.Request, timeout: float) -> bytes:
    """The request body (aiohttp raises 413 past client_max_size); BodyTimeout after `timeout` s."""
    try:
        async with asyncio.timeout(timeout):
            return await request.read()
    except TimeoutError:
        raise BodyTimeout(f"the request body did not arrive within {timeout:g} s") from None


class DeadlineSite(web.BaseSite):
    """aiohttp's TCPSite, with every connection behind a HeaderDeadline (and, with TLS, the
    handshake held to the same deadline)."""

    __slots__ = ("_host", "_port", "_header_timeout")

    def __init__(self, runner: web.BaseRunner, host: str, port: int, *, header_timeout: float, ssl_context=None):
        super().__init__(runner, ssl_context=ssl_context)
        self._host, self._port, self._header_timeout = host, port, header_timeout

    @property
    def name(self) -> str:
        return f"{'https' if self._ssl_context else 'http'}://{self._host}:{self._port}"

    async def start(self) -> None:
        await super().start()
        server = self._runner.server
        tls = {"ssl": self._ssl_context, "ssl_handshake_timeout": self._header_timeout} if self._ssl_context else {}
        self._server = await asyncio.get_running_loop().create_server(
            lambda: HeaderDeadline(server(), self._header_timeout), self._host, self._port,
            backlog=self._backlog, **tls)
