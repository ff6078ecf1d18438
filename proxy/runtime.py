"""What a running proxy holds: its config, upstream clients, engine state and metrics."""

from __future__ import annotations

import logging
import ssl
from collections.abc import Iterable
from dataclasses import dataclass, field

import httpx

from proxy.backends import Backends
from proxy.config import Config
from proxy.errors import BadAnswer
from proxy.logs import Throttle
from proxy.metrics import Metrics

try:
    from proxy.transport import FastTransport
except ImportError:  # no httptools: httpx's own transport, same behaviour at a higher CPU cost
    FastTransport = None  # type: ignore[assignment,misc]

# The proxy forwards engine bytes as they arrive under its own headers: compressed bytes would reach
# the client unlabelled, so engines are asked not to compress.
_BASE_HEADERS = {"content-type": "application/json", "accept-encoding": "identity"}
Header = tuple[bytes, bytes]
Timeout = dict[str, float | None]  # httpx's request extension: connect, read, write, pool


@dataclass
class Upstream:
    """The engines of one role as a leg talks to them: one request built per leg and handed to the
    transport. httpx's client layer around it (URL merging, cookie jar, redirects, auth, hooks) does
    nothing the proxy needs and was a tenth of its py-spy samples under load."""

    transport: httpx.AsyncBaseTransport
    headers: tuple[Header, ...]
    timeout: Timeout
    _urls: dict[str, httpx.URL] = field(default_factory=dict)  # engine URL + endpoint, parsed once

    async def post(
        self, url: str, body: bytes, headers: Iterable[Header], timeout: Timeout | None = None
    ) -> httpx.Response:
        """The response once its head arrived; its body is read (or closed) by the caller."""
        parsed = self._urls.get(url)
        if parsed is None:
            parsed = self._urls[url] = httpx.URL(url)
        request = httpx.Request(
            "POST",
            parsed,
            content=body,
            headers=[*self.headers, *headers],
            extensions={"timeout": timeout or self.timeout},
        )
        response = await self.transport.handle_async_request(request)
        response.request = request
        return response


async def read_whole(response: httpx.Response, limit: int, who: str) -> bytes:
    """An engine answer read whole, or BadAnswer once it passes `limit` bytes (httpx's aread() would
    hold whatever an engine, or whatever answers in its place, sends)."""
    chunks, size = [], 0
    async for chunk in response.stream:  # type: ignore[union-attr]
        size += len(chunk)
        if size > limit:
            raise BadAnswer(f"{who} answered more than {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


@dataclass
class Clients:
    """One pool per role, so data traffic can never starve the health checks of connections. The
    control client (health checks, bootstrap /query, /v1/models) carries no API key: `auth` is added
    where an engine asks for it (/v1/models), so the key never reaches a bootstrap server."""

    prefill: Upstream
    decode: Upstream
    control: httpx.AsyncClient
    auth: dict[str, str] = field(default_factory=dict, repr=False)

    @classmethod
    def create(cls, config: Config, transport: httpx.AsyncBaseTransport | None = None) -> Clients:
        """`transport` replaces the network (tests route requests to in-process fake engines)."""
        t = config.timeouts
        auth = {"authorization": f"Bearer {config.api_key}"} if config.api_key else {}
        raw = tuple((k.encode(), v.encode("latin-1")) for k, v in {**_BASE_HEADERS, **auth}.items())
        # httpx's own transport loads CA certificates (~50 ms): once for all three pools, and only when
        # it is the one used (ours loads them at the first https engine, a test's never).
        tls = ssl.create_default_context() if transport is None and FastTransport is None else None
        if transport is None and FastTransport is None:  # a slower proxy must say so: numbers change
            logging.getLogger("proxy").warning(
                "httptools is not installed: httpx's own transport serves (same answers, ~5x the CPU)"
            )

        def network(connections: int) -> httpx.AsyncBaseTransport:
            if transport is not None:
                return transport
            if FastTransport is not None:
                return FastTransport(max_connections=connections)
            limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
            return httpx.AsyncHTTPTransport(limits=limits, verify=tls or True, trust_env=False)

        # Every in-flight request holds at most one connection per role.
        n = config.max_concurrency
        prefill = httpx.Timeout(t.prefill, connect=t.connect, pool=t.pool)
        decode = httpx.Timeout(t.decode_total, connect=t.connect, pool=t.pool)
        return cls(
            prefill=Upstream(network(n), raw, prefill.as_dict()),
            decode=Upstream(network(n), raw, decode.as_dict()),
            control=httpx.AsyncClient(
                timeout=httpx.Timeout(t.health, pool=t.health),
                headers=_BASE_HEADERS,
                trust_env=False,
                transport=network(4 * len(config.prefill) + 2 * len(config.decode) + 8),
            ),
            auth=auth,
        )

    async def aclose(self) -> None:
        await self.control.aclose()
        for upstream in (self.prefill, self.decode):
            await upstream.transport.aclose()


@dataclass
class Runtime:
    config: Config
    clients: Clients
    backends: Backends
    metrics: Metrics = field(default_factory=Metrics)
    throttle: Throttle = field(default_factory=Throttle)  # failure log lines, one per kind per interval
    stream_timeout: Timeout = field(init=False)

    def __post_init__(self) -> None:
        # A streamed decode is bounded by the guard's first-byte and idle deadlines; this per-read
        # timeout only backs them up.
        t = self.config.timeouts
        backstop = 2 * max(t.decode_first_byte, t.decode_idle)
        self.stream_timeout = httpx.Timeout(backstop, connect=t.connect, pool=t.pool).as_dict()
