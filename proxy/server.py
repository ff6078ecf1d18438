"""uvicorn as the proxy runs it, with the bounds on clients that uvicorn's httptools protocol lacks.

uvicorn bounds an idle keep-alive connection (5 s) and nothing else on this path: a connection that
never sends a whole request head stays open for good (the keep-alive timer stops at its first byte),
request headers may grow without limit (`h11_max_incomplete_event_size` is h11's only; a 32 MB header
was served), there is no cap on connections (`limit_concurrency` answers requests 503 but keeps the
connections), and a client that stops reading its answer parks the request in `send()` for good.
`Protocol` adds, per connection: a deadline for each request head, a size limit on it, a connection
cap, and a deadline on a stalled write; a request body's deadline is the app's (`asgi.read_body`).
Its refusals are the proxy's one JSON envelope with `connection: close`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import uvicorn

from proxy.config import Config
from proxy.errors import envelope

Report = Callable[[str, str], None]  # (kind, message) of a refusal: counted and logged by the app
log = logging.getLogger("proxy")

try:
    import httptools
    from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol
except ImportError:  # no httptools: uvicorn's h11 protocol, which bounds only the header size
    HttpToolsProtocol = None  # type: ignore[assignment,misc]


class _Refusal(Exception):
    """Raised in a parser callback to refuse the request; httptools re-raises it as its __context__."""

    def __init__(self, status: int, kind: str, message: str) -> None:
        super().__init__(message)
        self.status, self.kind = status, kind


if HttpToolsProtocol is not None:

    class Protocol(HttpToolsProtocol):
        """One client connection. Class attributes come from `protocol_for(config, report)`."""

        timeouts: Any
        limits: Any
        report: Report

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._head_open = False  # a request head has begun and is not complete
            self._head_bytes = self._body_bytes = 0
            self._head_timer: asyncio.TimerHandle | None = None
            self._stall_timer: asyncio.TimerHandle | None = None
            if len(self.connections) > self.limits.clients:
                return self._refuse(503, "too_many_clients", f"over {self.limits.clients} client connections")
            self._arm_head_timer()

        def connection_lost(self, exc: Exception | None) -> None:
            for timer in (self._head_timer, self._stall_timer):
                if timer is not None:
                    timer.cancel()
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            """uvicorn's, with the proxy's refusals instead of a plain-text 400 and a log line each."""
            self._unset_keepalive_if_required()
            self._body_bytes = 0
            try:
                self.parser.feed_data(data)
            except httptools.HttpParserCallbackError as exc:
                refusal = exc.__context__
                if not isinstance(refusal, _Refusal):
                    refusal = _Refusal(400, "malformed_http", f"malformed HTTP request ({refusal!r:.80})")
                return self._refuse(refusal.status, refusal.kind, str(refusal))
            except httptools.HttpParserError as exc:
                return self._refuse(400, "malformed_http", f"malformed HTTP request: {exc}")
            # httptools gathers a header in pieces until it is whole: count what arrives for an open
            # head (less the body bytes of this same read), not only what the callbacks see.
            if self._head_open:
                self._head_bytes += len(data) - self._body_bytes
                if self._head_bytes > self.limits.header_bytes:
                    size = self.limits.header_bytes
                    self._refuse(431, "header_too_large", f"request line and headers over {size} bytes")

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._head_open, self._head_bytes = True, 0

        def on_headers_complete(self) -> None:
            self._head_open = False
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None
            if self.parser.should_upgrade():  # CONNECT, websockets: nothing here serves them
                raise _Refusal(400, "malformed_http", "protocol upgrades are not served")
            super().on_headers_complete()

        def on_body(self, body: bytes) -> None:
            self._body_bytes += len(body)
            super().on_body(body)

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                self._arm_head_timer()  # the next request head, or the connection closes

        def pause_writing(self) -> None:
            super().pause_writing()
            if self._stall_timer is None:
                self._stall_timer = self.loop.call_later(self.timeouts.send, self._stalled)

        def resume_writing(self) -> None:
            super().resume_writing()
            if self._stall_timer is not None:
                self._stall_timer.cancel()
                self._stall_timer = None

        def _arm_head_timer(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
            self._head_timer = self.loop.call_later(self.timeouts.header, self._head_expired)

        def _head_expired(self) -> None:
            self._head_timer = None
            if self.cycle is not None and not self.cycle.response_complete:
                return  # a request is being served: its own deadlines bound it
            if self._head_open:
                self._refuse(
                    408, "header_timeout", f"no whole request head within {self.timeouts.header:g} s"
                )
            elif not self.transport.is_closing():
                self.transport.close()  # idle since connecting or since its last answer

        def _stalled(self) -> None:
            """The client read nothing for a while: drop the connection (a close would wait for the
            unread bytes to drain); uvicorn then tells the app the client is gone."""
            self._stall_timer = None
            self.report("client_stalled", f"client read nothing for {self.timeouts.send:g} s")
            self.transport.abort()

        def _refuse(self, status: int, kind: str, message: str) -> None:
            self.report(kind, message)
            if self.transport.is_closing():
                return
            if self.cycle is None or self.cycle.response_complete:  # else a response is half sent
                body = envelope(status, kind, message)
                head = b"content-type: application/json\r\ncontent-length: %d\r\nconnection: close\r\n\r\n"
                self.transport.write(STATUS_LINE[status] + head % len(body) + body)
            self.transport.close()


def protocol_for(config: Config, report: Report) -> type | None:
    """The protocol class uvicorn is given, bound to this config; None without httptools."""
    if HttpToolsProtocol is None:
        return None
    attributes = {"timeouts": config.timeouts, "limits": config.limits, "report": staticmethod(report)}
    return type("Protocol", (Protocol,), attributes)


def serve(app: Any, config: Config, report: Report) -> None:
    protocol = protocol_for(config, report)
    if protocol is None:
        log.warning("httptools is not installed: clients are bounded in header size, not in time")
    uvicorn.run(
        app,
        host=config.host,
        port=config.port,
        http=protocol or "h11",
        h11_max_incomplete_event_size=config.limits.header_bytes,
        ws="none",
        timeout_keep_alive=config.timeouts.keep_alive,  # type: ignore[arg-type]  # a float works
        log_level=config.log_level,
        access_log=False,
        server_header=False,
        proxy_headers=False,  # nothing here reads the client address X-Forwarded-* would rewrite
        lifespan="on",
        backlog=max(2048, config.max_concurrency),
        timeout_graceful_shutdown=5,
    )
