"""An httpx transport for the engines: HTTP/1.1 on asyncio protocols, parsed by httptools.

httpx's default transport (httpcore on anyio, h11) cost about two thirds of the proxy's CPU under load
(profiled with py-spy, `make bench-proxy`): per request a scan of the whole connection pool, a socket
readability probe, anyio cancel scopes, and per SSE chunk several generator layers. Here one protocol
object per connection parses responses in C and hands body bytes to the reader as they come, with
whatever arrived since the last read coalesced into one piece. What the proxy sees stays httpx: the same
Request/Response objects, and failures raised as the httpx exceptions the default transport raises
(errors.py maps them to statuses), so the proxy's code and the in-process test transport are unchanged.
"""

from __future__ import annotations

import asyncio
import ssl as ssl_module
from collections import deque
from collections.abc import AsyncIterator

import httptools
import httpx

Origin = tuple[bytes, str, int]  # scheme, host, port
HIGH_WATER = 1 << 20  # buffered body bytes before reading from the engine pauses (a slow client)
HEAD_LIMIT = 1 << 20  # an engine's status line and headers: vLLM sends a few hundred bytes
_DEFAULT_PORTS = {b"http": 80, b"https": 443}


class _Connection(asyncio.Protocol):
    """One keep-alive connection; carries one exchange at a time."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._parser = httptools.HttpResponseParser(self)
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.idle_since = 0.0
        self._busy = False
        self._reset()

    def _reset(self) -> None:
        self._head_bytes = 0
        self.status = 0
        self.headers: list[tuple[bytes, bytes]] = []
        self.head_done = False
        self.complete = False
        self.keep_alive = False
        self._body: deque[bytes] = deque()
        self._buffered = 0
        self._paused = False
        self._error: Exception | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._last = 0.0  # loop time of the last byte or of the start of the wait: the read timeout
        self._timer: asyncio.TimerHandle | None = None

    # -- asyncio.Protocol --------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if not self._busy or self.complete:  # nothing asked, or more than the answer: drop it
            self.close()
            return
        self._last = self._loop.time()
        # httptools gathers a header until it is whole: whatever answers on an engine's port could
        # make it gather without end. One test per read, and a sum only until the head is complete.
        if not self.head_done:
            self._head_bytes += len(data)
            if self._head_bytes > HEAD_LIMIT:
                self._fail(httpx.RemoteProtocolError(f"response head over {HEAD_LIMIT} bytes"))
                self.close()
                return
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(httpx.RemoteProtocolError(f"malformed HTTP response: {exc}"))
            self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self._busy and not self.complete:
            if not self.head_done:
                self._fail(httpx.RemoteProtocolError("Server disconnected without sending a response."))
            else:
                self._fail(httpx.ReadError(f"peer closed connection without sending complete body: {exc}"))

    def pause_writing(self) -> None:  # request bodies are written whole; nothing to pause
        pass

    def resume_writing(self) -> None:
        pass

    # -- httptools callbacks -----------------------------------------------------------------------

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        self.status = self._parser.get_status_code()
        self.keep_alive = self._parser.should_keep_alive()
        self.head_done = True
        self._wake()

    def on_body(self, body: bytes) -> None:
        self._body.append(body)
        self._buffered += len(body)
        if self._buffered > HIGH_WATER and not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()
        self._wake()

    def on_message_complete(self) -> None:
        self.complete = True
        self._wake()

    # -- the exchange ------------------------------------------------------------------------------

    def send(self, data: bytes) -> None:
        assert self.transport is not None
        self._reset()
        self._busy = True
        self._last = self._loop.time()
        if self.closed:  # the engine closed it while idle: fail now rather than wait for a timeout
            self._fail(httpx.RemoteProtocolError("Server disconnected without sending a response."))
            return
        self.transport.write(data)

    async def wait_head(self, timeout: float | None) -> None:
        while not self.head_done:
            await self._wait(timeout)

    async def read(self, timeout: float | None) -> bytes:
        """Body bytes that arrived since the last read (b"" once the body is complete)."""
        while not self._body:
            if self.complete:
                return b""
            await self._wait(timeout)
        data = self._body.popleft() if len(self._body) == 1 else b"".join(self._body)
        self._body.clear()
        self._buffered = 0
        if self._paused and self.transport is not None:
            self._paused = False
            self.transport.resume_reading()
        return data

    async def _wait(self, timeout: float | None) -> None:
        if self._error is not None:
            raise self._error
        self._waiter = self._loop.create_future()
        if timeout is not None:
            # httpx's read timeout: how long one read waits, from its start or the last byte since.
            self._last = self._loop.time()
            if self._timer is None:
                self._timer = self._loop.call_at(self._last + timeout, self._check_timeout, timeout)
        try:
            await self._waiter
        finally:
            self._waiter = None
        if self._error is not None:
            raise self._error

    def _check_timeout(self, timeout: float) -> None:
        """One timer per exchange, re-armed from the last byte: a read costs no timer of its own."""
        due = self._last + timeout
        if self._loop.time() < due:
            self._timer = self._loop.call_at(due, self._check_timeout, timeout)
            return
        self._timer = None  # the next wait arms it again
        if self._waiter is not None:
            self._fail(httpx.ReadTimeout(f"no data from the engine within {timeout:g} s"))
            self.close()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _fail(self, error: Exception) -> None:
        if self._error is None:
            self._error = error
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_exception(error)

    def finish(self) -> bool:
        """The exchange is over; True when the connection can carry another one."""
        self._busy = False
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        reusable = self.complete and self.keep_alive and self._error is None and not self.closed
        if not reusable:
            self.close()
        self._body.clear()
        return reusable

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()


class _Body(httpx.AsyncByteStream):
    def __init__(self, transport: FastTransport, origin: Origin, conn: _Connection, request: httpx.Request):
        self._transport, self._origin, self._conn, self._request = transport, origin, conn, request
        self._done = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        conn, timeout = self._conn, self._request.extensions.get("timeout", {}).get("read")
        while True:
            try:
                data = await conn.read(timeout)
            except BaseException as exc:  # the connection is done for: free it even if nobody closes
                await self.aclose()
                if isinstance(exc, httpx.TransportError):
                    exc.request = self._request
                raise
            if not data:
                return
            yield data

    async def aclose(self) -> None:
        if not self._done:
            self._done = True
            self._transport._release(self._origin, self._conn)


class FastTransport(httpx.AsyncBaseTransport):
    """Keep-alive pools per engine under one connection limit (like httpx.Limits: `max_connections` in
    use at once, waiting up to the pool timeout for one; `max_keepalive` idle ones kept for
    `keepalive_expiry` seconds: below the 5 s after which uvicorn, hence vLLM, closes an idle
    connection, so that a request is not written into a connection the engine is closing)."""

    def __init__(
        self,
        *,
        max_connections: int,
        max_keepalive: int | None = None,
        keepalive_expiry: float = 4.0,
        ssl_context: ssl_module.SSLContext | None = None,
    ) -> None:
        self._max = max_connections
        self._max_idle = max_connections if max_keepalive is None else max_keepalive
        self._expiry = keepalive_expiry
        self._ssl = ssl_context
        self._in_use = 0
        self._idle: dict[Origin, deque[_Connection]] = {}  # oldest left, most recently used right
        self._idle_count = 0
        self._waiters: deque[asyncio.Future[None]] = deque()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        timeouts = request.extensions.get("timeout", {})
        url = request.url
        origin = (url.raw_scheme, url.host, url.port or _DEFAULT_PORTS.get(url.raw_scheme, 80))
        await self._slot(request, timeouts.get("pool"))
        try:
            conn = await self._connection(request, origin, timeouts.get("connect"))
        except BaseException:
            self._free_slot()
            raise
        try:
            conn.send(await _serialize(request))
            await conn.wait_head(timeouts.get("read"))
        except BaseException as exc:
            conn.finish()
            self._free_slot()
            if isinstance(exc, httpx.TransportError):
                exc.request = request
            raise
        return httpx.Response(
            conn.status,
            headers=conn.headers,
            stream=_Body(self, origin, conn, request),
            extensions={"http_version": b"HTTP/1.1"},
        )

    async def _slot(self, request: httpx.Request, timeout: float | None) -> None:
        if self._in_use < self._max and not self._waiters:
            self._in_use += 1
            return
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await asyncio.wait_for(asyncio.shield(waiter), timeout)
        except BaseException as exc:
            if waiter.done() and not waiter.cancelled():
                self._free_slot()  # handed a slot while giving up: pass it on
            else:
                waiter.cancel()
            if isinstance(exc, TimeoutError):
                raise httpx.PoolTimeout("no free connection to the engines", request=request) from None
            raise

    def _free_slot(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)  # the slot moves to the waiter: in_use stays
                return
        self._in_use -= 1

    async def _connection(self, request: httpx.Request, origin: Origin, timeout: float | None) -> _Connection:
        loop = asyncio.get_running_loop()
        idle = self._idle.get(origin)
        if idle:
            self._prune(idle, loop.time())
            while idle:  # the most recently used: the furthest from its engine's keep-alive timeout
                conn = idle.pop()
                self._idle_count -= 1
                if not conn.closed:
                    return conn
        scheme, host, port = origin
        tls = None
        if scheme == b"https":
            if self._ssl is None:
                self._ssl = ssl_module.create_default_context()
            tls = self._ssl
        try:
            _, conn = await asyncio.wait_for(
                loop.create_connection(
                    lambda: _Connection(loop), host, port, ssl=tls, server_hostname=host if tls else None
                ),
                timeout,
            )
        except TimeoutError:
            raise httpx.ConnectTimeout(f"connecting to {host}:{port} timed out", request=request) from None
        except OSError as exc:
            raise httpx.ConnectError(str(exc) or type(exc).__name__, request=request) from None
        return conn

    def _release(self, origin: Origin, conn: _Connection) -> None:
        now = asyncio.get_running_loop().time()
        idle = self._idle.setdefault(origin, deque())
        self._prune(idle, now)
        if conn.finish() and self._idle_count < self._max_idle:
            conn.idle_since = now
            idle.append(conn)
            self._idle_count += 1
        elif not conn.closed:
            conn.close()
        self._free_slot()

    def _prune(self, idle: deque[_Connection], now: float) -> None:
        """Closes the idle connections past the expiry or closed by the engine, oldest first: after a
        burst, the connections it left are closed within the expiry instead of lingering."""
        while idle and (idle[0].closed or now - idle[0].idle_since >= self._expiry):
            idle.popleft().close()
            self._idle_count -= 1

    async def aclose(self) -> None:
        for conns in self._idle.values():
            for conn in conns:
                conn.close()
        self._idle.clear()
        self._idle_count = 0


async def _serialize(request: httpx.Request) -> bytes:
    """Request line, headers as httpx built them (Host, Content-Length or chunked), body."""
    target = request.url.raw_path
    head = [request.method.encode(), b" ", target, b" HTTP/1.1\r\n"]
    for name, value in request.headers.raw:
        head += (name, b": ", value, b"\r\n")
    head.append(b"\r\n")
    chunked = request.headers.get("transfer-encoding", "").lower() == "chunked"
    parts = [b"".join(head)]
    async for part in request.stream:  # type: ignore[union-attr]
        if chunked and part:
            parts.append(b"%x\r\n%s\r\n" % (len(part), part))
        elif not chunked:
            parts.append(part)
    if chunked:
        parts.append(b"0\r\n\r\n")
    return b"".join(parts)
