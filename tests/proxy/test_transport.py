"""The proxy's own HTTP/1.1 transport against raw loopback servers that misbehave on purpose: it must
answer like httpx's default transport (the same exceptions, pool limits and timeouts) while reusing
connections and closing the ones a request gave up on."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

import httpx
import pytest

from proxy.runtime import Upstream
from proxy.transport import HEAD_LIMIT, HIGH_WATER, FastTransport
from tests.ports import free_port
from tests.proxy.harness import LOOPBACK, running, until

pytestmark = pytest.mark.anyio
Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class Raw:
    """A loopback server running `handler` per connection; counts connections and their ends."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.connections = 0
        self.closed = 0
        self.server: asyncio.Server | None = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            await self.handler(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self.closed += 1
            writer.close()

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://{LOOPBACK}:{self.server.sockets[0].getsockname()[1]}"


@contextlib.asynccontextmanager
async def serving(handler: Handler) -> AsyncIterator[Raw]:
    raw = Raw(handler)
    raw.server = await asyncio.start_server(raw._serve, LOOPBACK, 0)
    try:
        yield raw
    finally:
        raw.server.close()


async def read_request(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    return head + await reader.readexactly(length)


def response(body: bytes, *, status: int = 200, extra: bytes = b"") -> bytes:
    return b"HTTP/1.1 %d X\r\ncontent-length: %d\r\n%s\r\n" % (status, len(body), extra) + body


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


CHUNKED_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"


async def keep_answering(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while True:
        request = await read_request(reader)
        writer.write(response(b"echo:" + request.split(b"\r\n\r\n", 1)[1]))
        await writer.drain()


def upstream(connections: int = 4, **timeouts: float) -> Upstream:
    timeout = httpx.Timeout(**{"timeout": 5.0, **timeouts})
    return Upstream(FastTransport(max_connections=connections), ((b"x-test", b"1"),), timeout.as_dict())


async def post(up: Upstream, url: str, body: bytes = b"{}") -> httpx.Response:
    response = await up.post(url + "/v1/completions", body, [(b"x-request-id", b"r1")])
    await response.aread()
    return response


async def test_connections_are_reused_and_bodies_arrive_whole():
    async with serving(keep_answering) as server:
        up = upstream()
        for i in range(3):
            r = await post(up, server.url, b'{"n": %d}' % i)
            assert (r.status_code, r.content) == (200, b'echo:{"n": %d}' % i)
        assert server.connections == 1
        await up.transport.aclose()


async def test_request_carries_headers_and_body_as_built():
    seen: list[bytes] = []

    async def record(reader, writer):
        seen.append(await read_request(reader))
        writer.write(response(b"ok"))
        await writer.drain()

    async with serving(record) as server:
        await post(upstream(), server.url, b'{"a": 1}')
    head, body = seen[0].split(b"\r\n\r\n")
    lines = head.lower().split(b"\r\n")
    assert lines[0] == b"post /v1/completions http/1.1"
    assert {b"x-test: 1", b"x-request-id: r1", b"content-length: 8"} <= set(lines[1:])
    assert any(line.startswith(b"host: 127.0.0.1:") for line in lines) and body == b'{"a": 1}'


async def test_chunked_stream_is_relayed_as_it_comes():
    release = asyncio.Event()

    async def stream(reader, writer):
        await read_request(reader)
        writer.write(CHUNKED_HEAD + chunk(b"data: 1\n\n"))
        await writer.drain()
        await release.wait()
        writer.write(chunk(b"data: 2\n\n") + chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
        await writer.drain()
        await reader.read()  # keep-alive: the client may send another request

    async with serving(stream) as server:
        up = upstream()
        r = await up.post(server.url + "/v1/completions", b"{}", [])
        parts = r.stream.__aiter__()
        assert await parts.__anext__() == b"data: 1\n\n"  # before the rest exists
        release.set()
        rest = b"".join([p async for p in parts])
        assert rest == b"data: 2\n\ndata: [DONE]\n\n"  # what arrived together comes as one piece
        await r.aclose()
        assert up.transport._idle_count == 1  # complete, keep-alive: back in the pool


async def test_error_status_and_body_come_back_unchanged():
    async def refuse(reader, writer):
        await read_request(reader)
        writer.write(response(b'{"error": "no"}', status=400, extra=b"content-type: application/json\r\n"))
        await writer.drain()

    async with serving(refuse) as server:
        r = await post(upstream(), server.url)
    assert (r.status_code, r.content, r.headers["content-type"]) == (
        400,
        b'{"error": "no"}',
        "application/json",
    )


async def test_refused_connection_is_a_connect_error():
    with pytest.raises(httpx.ConnectError):
        await post(upstream(), f"http://{LOOPBACK}:{free_port()}")


@pytest.mark.parametrize(
    ("behaviour", "error"),
    [
        ("close-before-answer", httpx.RemoteProtocolError),
        ("close-mid-body", httpx.ReadError),
        ("garbage", httpx.RemoteProtocolError),
        ("silent", httpx.ReadTimeout),
        ("stall-mid-body", httpx.ReadTimeout),
        ("endless-head", httpx.RemoteProtocolError),
    ],
)
async def test_broken_engines_raise_what_httpx_raises(behaviour, error):
    async def broken(reader, writer):
        await read_request(reader)
        if behaviour == "close-mid-body":
            writer.write(CHUNKED_HEAD + chunk(b"data: 1\n\n"))
        elif behaviour == "garbage":
            writer.write(b"NOT HTTP AT ALL\r\n\r\n")
        elif behaviour == "stall-mid-body":
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nabc")
        elif behaviour == "endless-head":  # a header that never ends, faster than any timeout
            writer.write(b"HTTP/1.1 200 OK\r\nx-big: " + b"a" * (HEAD_LIMIT + 1))
        await writer.drain()
        if behaviour in ("silent", "stall-mid-body", "endless-head"):
            await reader.read()  # until the client gives up and closes

    async with serving(broken) as server:
        up = upstream(read=0.2)
        with pytest.raises(error) as caught:
            await post(up, server.url)
        assert caught.value.request.url.path == "/v1/completions"
        assert up.transport._in_use == 0  # the slot came back
        await until(lambda: server.closed == 1, "connection closed")


async def test_pool_limit_waits_then_times_out():
    gate = asyncio.Event()

    async def slow(reader, writer):
        await read_request(reader)
        await gate.wait()
        writer.write(response(b"late"))
        await writer.drain()

    async with serving(slow) as server:
        up = upstream(connections=1, pool=0.2)
        first = asyncio.ensure_future(post(up, server.url))
        await until(lambda: server.connections == 1, "first request sent")
        with pytest.raises(httpx.PoolTimeout):
            await post(up, server.url)
        patient = Upstream(up.transport, (), httpx.Timeout(5.0).as_dict())
        second = asyncio.ensure_future(post(patient, server.url))
        await asyncio.sleep(0.05)
        assert not second.done()  # waits for the one connection
        gate.set()
        assert (await first).content == b"late"
        assert (await second).content == b"late"
        assert up.transport._in_use == 0


async def test_giving_up_closes_the_connection_so_the_engine_aborts():
    async def endless(reader, writer):
        await read_request(reader)
        writer.write(CHUNKED_HEAD)
        while True:
            writer.write(chunk(b"data: x\n\n"))
            await writer.drain()
            await asyncio.sleep(0.01)

    async with serving(endless) as server:
        up = upstream()
        r = await up.post(server.url + "/v1/completions", b"{}", [])
        async for _ in r.stream:
            break
        await r.aclose()  # the client went away mid-stream
        await until(lambda: server.closed == 1, "engine sees the disconnect")
        assert up.transport._in_use == 0 and up.transport._idle_count == 0

        waiting = asyncio.ensure_future(post(up, server.url))  # cancelled while waiting for the head
        await until(lambda: server.connections == 2, "second request sent")
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        await until(lambda: server.closed == 2, "engine sees the cancel")
        assert up.transport._in_use == 0


async def test_a_connection_the_engine_closed_while_idle_is_not_reused():
    async def once(reader, writer):
        await read_request(reader)
        writer.write(response(b"one"))
        await writer.drain()  # then closes: an engine's keep-alive timeout

    async with serving(once) as server:
        up = upstream()
        assert (await post(up, server.url)).content == b"one"
        await until(lambda: server.closed == 1, "engine closed the idle connection")
        await asyncio.sleep(0.01)
        assert (await post(up, server.url)).content == b"one"
        assert server.connections == 2


async def test_a_slow_reader_pauses_the_engine_and_gets_every_byte():
    big = b"x" * (3 * HIGH_WATER)

    async def flood(reader, writer):
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
        for i in range(0, len(big), 65536):
            writer.write(chunk(big[i : i + 65536]))
        writer.write(b"0\r\n\r\n")
        await writer.drain()

    async with serving(flood) as server:
        up = upstream()
        r = await up.post(server.url + "/v1/completions", b"{}", [])
        got = 0
        async for part in r.stream:
            got += len(part)
            assert len(part) <= HIGH_WATER + (512 << 10)  # reading paused instead of buffering it all
            await asyncio.sleep(0.001)
        await r.aclose()
        assert got == len(big)


@pytest.mark.parametrize("fast", [True, False], ids=["own-transport", "httpx-transport"])
async def test_the_proxy_streams_the_same_over_either_transport(monkeypatch, fast):
    """Without httptools the proxy falls back to httpx's transport: same answers, only slower."""
    built: list[FastTransport] = []

    class Counted(FastTransport):
        def __init__(self, **kw) -> None:
            super().__init__(**kw)
            built.append(self)

    monkeypatch.setattr("proxy.runtime.FastTransport", Counted if fast else None)
    body = {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    async with running(1, 1, http=True) as c:
        response = await c.client.post("/v1/chat/completions", json=body)
        assert response.status_code == 200 and response.content == b"".join(c.decode[0].sent)
        c.decode[0].die_after = 1
        response = await c.client.post("/v1/chat/completions", json=body)
        assert b'"type":"upstream_broken"' in response.content
    assert len(built) == (3 if fast else 0)  # prefill, decode, health checks


async def test_idle_connections_past_the_expiry_are_closed_not_reused():
    async with serving(keep_answering) as server:
        up = Upstream(
            FastTransport(max_connections=8, keepalive_expiry=0.1), (), httpx.Timeout(5.0).as_dict()
        )
        await asyncio.gather(*(post(up, server.url) for _ in range(4)))  # a burst: four connections
        assert (server.connections, up.transport._idle_count) == (4, 4)
        await asyncio.sleep(0.15)
        await post(up, server.url)  # the burst's connections expired: closed, one new one
        assert server.connections == 5
        await until(lambda: server.closed == 4, "expired connections closed")
        assert up.transport._idle_count == 1
