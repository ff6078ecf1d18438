"""HTTP requests of the node tools, bounded as a whole: one deadline for connect, send, headers and body,
and a cap on the body read; stdlib only.

urllib's timeout bounds each socket operation, not the exchange: a server that drips a byte a second
never trips it, and read() takes a body of any size. Every node tool that talks HTTP goes through fetch()."""

from __future__ import annotations

import http.client
import socket
import time
import urllib.parse
from collections.abc import Callable, Sequence
from typing import NamedTuple, TypeVar

from failures import one_line

T = TypeVar("T")
R = TypeVar("R")

READ_PIECE = 1 << 16


class FetchError(Exception):
    """Why a request got no usable answer; one line."""


class Response(NamedTuple):
    status: int
    body: bytes


class _DeadlineSocket(socket.socket):
    """A socket whose every blocking call ends at one deadline (http.client reads through recv_into)."""

    deadline = 0.0

    def _arm(self) -> None:
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise socket.timeout("deadline passed")  # noqa: UP041 (TimeoutError only from Python 3.10)
        self.settimeout(remaining)

    def recv_into(self, *args, **kwargs):
        self._arm()
        return super().recv_into(*args, **kwargs)

    def recv(self, *args, **kwargs):
        self._arm()
        return super().recv(*args, **kwargs)

    def sendall(self, *args, **kwargs):
        self._arm()
        return super().sendall(*args, **kwargs)


class _Connection(http.client.HTTPConnection):
    def __init__(self, host: str, port: int, deadline: float) -> None:
        super().__init__(host, port)
        self.deadline = deadline

    def connect(self) -> None:
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise socket.timeout("deadline passed")  # noqa: UP041
        raw = socket.create_connection((self.host, self.port), timeout=remaining)
        sock = _DeadlineSocket(fileno=raw.detach())
        sock.deadline = self.deadline
        self.sock = sock


def split_url(url: str) -> tuple[str, int, str]:
    """(host, port, path?query) of an http:// URL; ValueError for anything else (https needs a TLS socket
    this deadline does not reach; node-local endpoints are plain HTTP)."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        raise ValueError(f"not an http://HOST[:PORT]/PATH URL: {url!r}")
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return parts.hostname, parts.port or 80, path  # .port raises ValueError for a port out of range


def _read_body(response: http.client.HTTPResponse, max_bytes: int) -> bytes:
    body = bytearray()
    while len(body) <= max_bytes:
        piece = response.read(min(READ_PIECE, max_bytes + 1 - len(body)))
        if not piece:
            return bytes(body)
        body += piece
    raise FetchError(f"answer body larger than {max_bytes} bytes")


def fetch(
    url: str,
    *,
    timeout: float,
    max_bytes: int,
    data: bytes | None = None,
    headers: dict[str, str] | None = None,
    read_body: bool = True,
) -> Response:
    """GET (POST when DATA is given) URL; the whole exchange ends within TIMEOUT seconds and reads at most
    MAX_BYTES of body (none unless READ_BODY). FetchError on any failure; any status is a Response."""
    try:
        host, port, path = split_url(url)
    except ValueError as err:
        raise FetchError(str(err)) from None
    conn = _Connection(host, port, time.monotonic() + timeout)
    try:
        conn.request("GET" if data is None else "POST", path, body=data, headers=headers or {})
        response = conn.getresponse()
        return Response(response.status, _read_body(response, max_bytes) if read_body else b"")
    except socket.timeout:  # noqa: UP041
        raise FetchError(f"no complete answer within {timeout:.3g} s") from None
    except (OSError, http.client.HTTPException, ValueError) as err:
        raise FetchError(one_line(err, 200) or type(err).__name__) from None
    finally:
        conn.close()


def at_once(fn: Callable[[T], R], items: Sequence[T]) -> list[R]:
    """fn(item) for every item, each in its own thread, results in order: a 32-node job's 33 metrics
    endpoints are read in the time of the slowest, not of all of them one after another. FN says its
    failures in what it returns (an exception it raises is raised here)."""
    if len(items) <= 1:
        return [fn(item) for item in items]
    from concurrent.futures import ThreadPoolExecutor  # only where there is more than one to read

    with ThreadPoolExecutor(max_workers=min(len(items), 64)) as pool:
        return list(pool.map(fn, items))
