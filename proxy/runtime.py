"""What a running proxy holds: its config, upstream clients, engine state and metrics."""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field

import httpx

from proxy.backends import Backends
from proxy.config import Config
from proxy.metrics import Metrics

# The proxy forwards engine bytes as they arrive under its own headers: compressed bytes would reach
# the client unlabelled, so engines are asked not to compress.
_BASE_HEADERS = {"content-type": "application/json", "accept-encoding": "identity"}


@dataclass
class Clients:
    """One pool per role, so data traffic can never starve the health checks of connections."""

    prefill: httpx.AsyncClient
    decode: httpx.AsyncClient
    control: httpx.AsyncClient

    @classmethod
    def create(cls, config: Config, transport: httpx.AsyncBaseTransport | None = None) -> Clients:
        """`transport` replaces the network (tests route requests to in-process fake engines)."""
        t = config.timeouts
        headers = dict(_BASE_HEADERS)
        if config.api_key:
            headers["authorization"] = f"Bearer {config.api_key}"
        # Every in-flight request holds at most one connection per role.
        n = config.max_concurrency
        data = httpx.Limits(max_connections=n, max_keepalive_connections=n)
        control = httpx.Limits(max_connections=4 * len(config.prefill) + 2 * len(config.decode) + 8)
        # Loading CA certificates takes ~50 ms: once for all three clients, never for a test transport.
        tls = ssl.create_default_context() if transport is None else True

        def client(limits: httpx.Limits, timeout: httpx.Timeout) -> httpx.AsyncClient:
            return httpx.AsyncClient(
                limits=limits,
                timeout=timeout,
                headers=headers,
                verify=tls,
                trust_env=False,
                transport=transport,
            )

        return cls(
            prefill=client(data, httpx.Timeout(t.prefill, connect=t.connect, pool=t.pool)),
            decode=client(data, httpx.Timeout(t.decode_total, connect=t.connect, pool=t.pool)),
            control=client(control, httpx.Timeout(t.health, pool=t.health)),
        )

    async def aclose(self) -> None:
        for c in (self.prefill, self.decode, self.control):
            await c.aclose()


@dataclass
class Runtime:
    config: Config
    clients: Clients
    backends: Backends
    metrics: Metrics = field(default_factory=Metrics)
    stream_timeout: httpx.Timeout = field(init=False)

    def __post_init__(self) -> None:
        # A streamed decode is bounded by the guard's first-byte and idle deadlines; this per-read
        # timeout only backs them up.
        t = self.config.timeouts
        backstop = 2 * max(t.decode_first_byte, t.decode_idle)
        self.stream_timeout = httpx.Timeout(backstop, connect=t.connect, pool=t.pool)
