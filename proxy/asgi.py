"""The few raw-ASGI pieces the proxy needs: read a request body, send a response."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from proxy.errors import ClientGone, ClientTimeout, TooLarge

Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
Header = tuple[bytes, bytes]

JSON = b"application/json"
SSE = b"text/event-stream"


async def read_body(receive: Receive, limit: int, timeout: float) -> bytes:
    """The whole body within `timeout` seconds and `limit` bytes: a client dripping its body would
    otherwise hold a connection and a task for as long as it likes."""
    try:
        async with asyncio.timeout(timeout):
            return await _read(receive, limit)
    except TimeoutError:
        raise ClientTimeout(f"request body not received within {timeout:g} s") from None


async def _read(receive: Receive, limit: int) -> bytes:
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGone("client went away while sending the request")
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise TooLarge(f"request body over the limit of {limit} bytes")
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


class Reply:
    """The response to one client request, sent at most once; knows how far it got."""

    def __init__(self, send: Send, request_id: bytes) -> None:
        self._send = send
        self.request_id = request_id
        self.started = False
        self.finished = False

    async def start(self, status: int, content_type: bytes, headers: Iterable[Header] = ()) -> None:
        self.started = True
        head = [(b"content-type", content_type), (b"x-request-id", self.request_id), *headers]
        await self._send({"type": "http.response.start", "status": status, "headers": head})

    async def chunk(self, data: bytes) -> None:
        await self._send({"type": "http.response.body", "body": data, "more_body": True})

    async def end(self, data: bytes = b"") -> None:
        self.finished = True
        await self._send({"type": "http.response.body", "body": data, "more_body": False})

    async def whole(
        self, status: int, body: bytes, content_type: bytes, headers: Iterable[Header] = ()
    ) -> None:
        await self.start(status, content_type, [(b"content-length", b"%d" % len(body)), *headers])
        await self.end(body)
