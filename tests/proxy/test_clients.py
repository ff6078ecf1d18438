"""Clients that hold the proxy's connections: oversized or slow heads, slow bodies, idle or too many
connections, readers that stop reading. Raw sockets against the proxy's own uvicorn protocol."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from collections.abc import AsyncIterator

import pytest

from tests.proxy.harness import LOOPBACK, WAIT, Cluster, running, until

pytestmark = pytest.mark.anyio

CHAT = "/v1/chat/completions"
HEAD = b"POST /v1/chat/completions HTTP/1.1\r\nhost: proxy\r\ncontent-type: application/json\r\n"
FAST = {"header": 0.3, "body": 0.3, "send": 0.3}


@contextlib.asynccontextmanager
async def connection(
    c: Cluster, rcvbuf: int = 0
) -> AsyncIterator[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
    sock = socket.socket()
    if rcvbuf:  # before connecting: the window it advertises stays small
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, (LOOPBACK, c.client.base_url.port))
    reader, writer = await asyncio.open_connection(sock=sock)
    try:
        yield reader, writer
    finally:
        writer.close()


async def answer(reader: asyncio.StreamReader) -> tuple[int, dict, dict]:
    """(status, headers, JSON body) of the answer, after which the proxy must have closed."""
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), WAIT)
    lines = head.decode().split("\r\n")
    headers = dict(line.lower().split(": ", 1) for line in lines[1:] if line)
    body = await asyncio.wait_for(reader.readexactly(int(headers["content-length"])), WAIT)
    assert await asyncio.wait_for(reader.read(), WAIT) == b"", "the connection stays open"
    return int(lines[0].split()[1]), headers, json.loads(body)


def assert_refused(status: int, headers: dict, doc: dict, expected: int, kind: str) -> None:
    assert (status, doc["error"]["type"], doc["error"]["code"]) == (expected, kind, expected)
    assert headers["content-type"] == "application/json" and headers["connection"] == "close"


@pytest.mark.parametrize("pieces", [1, 16], ids=["at-once", "in-pieces"])
async def test_a_head_over_the_limit_is_431(pieces):
    async with running(1, 1, http=True, limits={"header_bytes": 4096}) as c:
        async with connection(c) as (reader, writer):
            big = HEAD + b"x-big: " + b"a" * 20_000 + b"\r\n"
            for i in range(pieces):
                writer.write(big[i * len(big) // pieces : (i + 1) * len(big) // pieces])
                await writer.drain()
            status, headers, doc = await answer(reader)
        assert_refused(status, headers, doc, 431, "header_too_large")
        assert doc["error"]["message"] == "request line and headers over 4096 bytes"
        assert (await c.metrics())['proxy_errors_total{leg="client",kind="header_too_large"}'] == 1
        body = {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}]}
        ok = await c.client.post(CHAT, json=body, headers={"x-fine": "a" * 1000})
        assert ok.status_code == 200


async def test_a_head_that_never_completes_is_408_and_closed():
    async with running(1, 1, http=True, timeouts=FAST) as c:
        async with connection(c) as (reader, writer):
            writer.write(HEAD)  # and never the blank line
            status, headers, doc = await answer(reader)
        assert_refused(status, headers, doc, 408, "header_timeout")
        assert (await c.metrics())['proxy_errors_total{leg="client",kind="header_timeout"}'] == 1


async def test_a_slow_next_head_on_a_kept_alive_connection_is_408():
    """uvicorn's keep-alive timer stops at the first byte of the next request: ours does not."""
    async with running(1, 1, http=True, timeouts=FAST) as c:
        async with connection(c) as (reader, writer):
            writer.write(b"GET /health HTTP/1.1\r\nhost: proxy\r\n\r\n")
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), WAIT)
            length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
            await reader.readexactly(length)
            writer.write(b"GET /health HTTP/1.1\r\n")
            status, headers, doc = await answer(reader)
        assert_refused(status, headers, doc, 408, "header_timeout")


async def test_an_idle_connection_is_closed():
    async with running(1, 1, http=True, timeouts={**FAST, "keep_alive": 60.0}) as c:
        async with connection(c) as (reader, _):
            assert await asyncio.wait_for(reader.read(), WAIT) == b""


async def test_a_body_that_never_completes_is_408():
    async with running(1, 1, http=True, timeouts=FAST) as c:
        async with connection(c) as (reader, writer):
            writer.write(HEAD + b"content-length: 100\r\n\r\n" + b'{"model": ')
            status, headers, doc = await answer(reader)
        assert_refused(status, headers, doc, 408, "client_timeout")
        assert doc["error"]["message"] == "client leg: request body not received within 0.3 s"
        assert c.served("prefill") == []


async def test_connections_over_the_limit_are_answered_503_and_closed():
    async with running(1, 1, http=True, limits={"clients": 3}) as c, contextlib.AsyncExitStack() as stack:
        while c.client_connections() < 3:  # the test client may hold one already
            held = c.client_connections()
            await stack.enter_async_context(connection(c))
            await until(lambda held=held: c.client_connections() > held, "connection accepted")
        reader, _ = await stack.enter_async_context(connection(c))
        status, headers, doc = await answer(reader)
        assert_refused(status, headers, doc, 503, "too_many_clients")
        assert doc["error"]["message"] == "over 3 client connections"


@pytest.mark.parametrize(
    ("request_bytes", "message"),
    [
        (b"GARBAGE\r\n\r\n", "malformed HTTP request"),
        (b"GET / HTTP/1.1\r\nhost: x\r\nbad header\r\n\r\n", "malformed HTTP request"),
        (b"GET /ws HTTP/1.1\r\nhost: x\r\nconnection: upgrade\r\nupgrade: websocket\r\n\r\n", "upgrades"),
    ],
    ids=["garbage", "bad-header", "upgrade"],
)
async def test_malformed_http_gets_the_envelope(request_bytes, message):
    async with running(1, 1, http=True) as c:
        async with connection(c) as (reader, writer):
            writer.write(request_bytes)
            status, headers, doc = await answer(reader)
        assert_refused(status, headers, doc, 400, "malformed_http")
        assert message in doc["error"]["message"]


async def test_a_client_that_stops_reading_is_dropped_and_the_decode_closed():
    async with running(1, 1, http=True, timeouts=FAST) as c:
        c.decode[0].chunks, c.decode[0].pad = None, 1 << 16  # streams until the proxy goes away
        async with connection(c, rcvbuf=4096) as (_, writer):
            body = json.dumps(
                {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "stream": True}
            )
            writer.write(HEAD + b"content-length: %d\r\n\r\n%s" % (len(body), body.encode()))
            # and reads nothing of the answer
            await asyncio.wait_for(c.decode[0].disconnected.wait(), WAIT)
        metrics = await c.metrics()
        assert metrics['proxy_errors_total{leg="client",kind="client_stalled"}'] == 1
        assert metrics["proxy_in_flight"] == 0
