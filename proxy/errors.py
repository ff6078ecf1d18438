"""Failures the proxy reports: one exception → (status, kind) table and one error envelope."""

from __future__ import annotations

import httpx
import msgspec


class ProxyError(Exception):
    """A failure that knows its own HTTP status and metric kind."""

    status = 500
    kind = "internal"
    headers: tuple[tuple[bytes, bytes], ...] = ()  # sent with the error answer


class BadRequest(ProxyError):
    status, kind = 400, "invalid_request"


_CLOSE = ((b"connection", b"close"),)  # the rest of the request is not worth reading


class TooLarge(BadRequest):
    status, kind, headers = 413, "too_large", _CLOSE


class Unauthorized(ProxyError):
    """No or a wrong API key while one is configured."""

    status, kind, headers = 401, "unauthorized", ((b"www-authenticate", b"Bearer"),)


class ClientTimeout(ProxyError):
    """The client did not send its whole request body in time."""

    status, kind, headers = 408, "client_timeout", _CLOSE


class NoBackend(ProxyError):
    status, kind = 503, "no_backend"


class Expired(ProxyError):
    """A deadline passed: the prefill leg, a decode's first byte, idle gap or whole answer."""

    status, kind = 504, "timeout"


class ClientGone(ProxyError):
    status, kind = 499, "client_disconnect"  # nginx's code: nobody is left to read it


class PrefillUnusable(ProxyError):
    """A 2xx prefill answer after which the KV will not be kept, so a decode leg would hang."""

    status, kind = 502, "prefill_finish"


class BadAnswer(ProxyError):
    """An engine answer the proxy cannot use: not JSON where JSON is due, too large, an odd status."""

    status, kind = 502, "bad_answer"


class UpstreamStatus(ProxyError):
    """An engine answered non-2xx: the client gets that status and body unchanged."""

    kind = "upstream_status"

    def __init__(self, status: int, body: bytes, content_type: bytes, who: str = "engine") -> None:
        super().__init__(f"{who} answered HTTP {status}")  # for the log; the client gets the body as is
        self.status, self.body, self.content_type = status, body, content_type


# First match wins: ConnectTimeout is also a TimeoutException, and every httpx failure an HTTPError.
FAILURES: tuple[tuple[type[BaseException], int, str], ...] = (
    (httpx.ConnectError, 502, "connect"),
    (httpx.ConnectTimeout, 502, "connect"),
    (httpx.PoolTimeout, 503, "pool_exhausted"),
    (httpx.TimeoutException, 504, "timeout"),
    (httpx.HTTPError, 502, "upstream_broken"),
)

# The request never reached the engine: safe to send it to another one.
NOT_DELIVERED = (httpx.ConnectError, httpx.ConnectTimeout)


def classify(exc: BaseException) -> tuple[int, str]:
    if isinstance(exc, ProxyError):
        return exc.status, exc.kind
    for kind_of, status, kind in FAILURES:
        if isinstance(exc, kind_of):
            return status, kind
    return 500, "internal"


def describe(exc: BaseException) -> str:
    """One line for logs and clients; httpx messages name the URL but never headers."""
    text = " ".join(str(exc).split())
    if isinstance(exc, ProxyError) and text:  # the proxy's own messages say it all
        return text
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def envelope(status: int, kind: str, message: str) -> bytes:
    """The one error body, in the OpenAI/vLLM shape clients already parse."""
    return msgspec.json.encode({"error": {"message": message, "type": kind, "code": status}})


def sse_error(status: int, kind: str, message: str) -> bytes:
    """The same envelope as a final server-sent event, for failures after streaming began."""
    return b"data: " + envelope(status, kind, message) + b"\n\n"
