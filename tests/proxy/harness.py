"""Fake engines and the proxy in the test's event loop: in process (an injected transport) or over HTTP."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import socket
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import uvicorn

from proxy.app import App
from proxy.config import Config, Limits, Prefill, Timeouts
from proxy.server import protocol_for
from tests.proxy.fakes import FakeBootstrap, FakeEngine, World

LOOPBACK = "127.0.0.1"
WAIT = 10.0  # upper bound for anything a test polls for; reached only when the proxy is broken


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self):  # many servers share pytest's thread: leave its signal handlers alone
        yield


class Server:
    """One uvicorn server on a loopback port, which it keeps across restarts."""

    def __init__(self, app: Any, *, lifespan: str = "off", http: Any = "auto") -> None:
        self.app, self.lifespan, self.http = app, lifespan, http
        # Bound now, on a port the OS picks, and held until the first start: a port only looked up here
        # was once taken by another process before the server bound it (CI: Address already in use).
        self._sock: socket.socket | None = _bound(0)
        self.port = int(self._sock.getsockname()[1])
        self._server: _Server | None = None
        self._task: asyncio.Task | None = None

    async def start(self) -> None:
        sock, self._sock = self._sock or _bound(self.port), None  # a restart binds the same port again
        config = uvicorn.Config(
            self.app,
            http=self.http,
            lifespan=self.lifespan,
            log_level="critical",
            access_log=False,
            timeout_graceful_shutdown=1,
        )
        self._server = _Server(config)
        self._task = asyncio.get_running_loop().create_task(self._server.serve(sockets=[sock]))
        await until(lambda: self._server.started or self._task.done(), "server start")
        if self._task.done():
            self._task.result()

    async def stop(self) -> None:
        if self._sock is not None:  # never started
            self._sock.close()
            self._sock = None
        if self._server is not None:
            # Fakes have no lifespan to run, so they need not wait for open connections.
            self._server.should_exit, self._server.force_exit = True, self.lifespan == "off"
            await self._task
            self._server = None


def _bound(port: int) -> socket.socket:
    # IPPROTO_TCP explicitly: asyncio sets TCP_NODELAY only on sockets that say so, and without it every
    # keep-alive response waits ~40 ms for a delayed ACK.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((LOOPBACK, port))
    return sock


async def until(condition: Any, what: str) -> None:
    """Polls a condition (a plain callable) until it holds; fails the test after WAIT seconds."""
    deadline = time.monotonic() + WAIT
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.005)


@dataclass
class Cluster:
    world: World
    config: Config
    client: httpx.AsyncClient
    servers: dict[str, list[Server]]
    proxy: Server | None = None  # over HTTP only

    def client_connections(self) -> int:
        """Client connections the proxy's server holds now (over HTTP only)."""
        assert self.proxy is not None and self.proxy._server is not None
        return len(self.proxy._server.server_state.connections)

    @property
    def prefill(self) -> list[FakeEngine]:
        return self.world.prefill

    @property
    def decode(self) -> list[FakeEngine]:
        return self.world.decode

    async def health(self) -> tuple[int, dict]:
        response = await self.client.get("/health")
        return response.status_code, response.json()

    async def wait_health(self, prefill: int, decode: int) -> dict:
        deadline = time.monotonic() + WAIT
        while True:
            _, doc = await self.health()
            if (doc["prefill"]["healthy"], doc["decode"]["healthy"]) == (prefill, decode):
                return doc
            if time.monotonic() > deadline:
                raise AssertionError(f"health never reached {prefill}P/{decode}D: {doc}")
            await asyncio.sleep(0.005)

    async def metrics(self) -> dict[str, float]:
        text = (await self.client.get("/metrics")).text
        samples = (line.rsplit(" ", 1) for line in text.splitlines() if line and not line.startswith("#"))
        return {name: float(value) for name, value in samples}

    async def stop(self, engine: FakeEngine) -> None:
        engine.up = False
        for server in self.servers[engine.name]:
            await server.stop()

    async def start(self, engine: FakeEngine) -> None:
        for server in self.servers[engine.name]:
            await server.start()
        engine.up = True

    def served(self, role: str) -> list[str]:
        """Names of the engines of a role, once per completion each received, in engine order."""
        return [e.name for e in getattr(self, role) for _ in e.seen]


class Network(httpx.AsyncBaseTransport):
    """In-process stand-in for the network: requests reach the fake app at their host:port, and a
    stopped engine refuses the connection."""

    def __init__(self) -> None:
        self.hosts: dict[str, tuple[FakeEngine, httpx.ASGITransport]] = {}

    def add(self, netloc: str, engine: FakeEngine, app: Any) -> None:
        self.hosts[netloc] = (engine, httpx.ASGITransport(app))

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        engine, transport = self.hosts[request.url.netloc.decode()]
        if not engine.up:
            raise httpx.ConnectError("connection refused", request=request)
        return await transport.handle_async_request(request)


def _fakes(world: World, prefill: int, decode: int, http: bool, net: Network) -> dict[str, list[Server]]:
    """The engines; over HTTP each gets loopback ports, in process a host name and vLLM's ports."""
    servers: dict[str, list[Server]] = {}
    for role, count in (("prefill", prefill), ("decode", decode)):
        for i in range(count):
            engine = FakeEngine(world, role, i)
            getattr(world, role).append(engine)
            apps = [engine, FakeBootstrap(engine)] if role == "prefill" else [engine]
            if http:
                servers[engine.name] = [Server(app) for app in apps]
                host, ports = LOOPBACK, [s.port for s in servers[engine.name]]
            else:
                servers[engine.name], host, ports = [], engine.name, [8000, 8998][: len(apps)]
                for app, port in zip(apps, ports, strict=True):
                    net.add(f"{host}:{port}", engine, app)
            engine.url = f"http://{host}:{ports[0]}"
            engine.bootstrap_addr = f"http://{host}:{ports[-1]}" if role == "prefill" else ""
            engine.up = False
    return servers


@contextlib.asynccontextmanager
async def running(
    prefill: int = 2,
    decode: int = 1,
    *,
    http: bool = False,
    api_key: str | None = None,
    up: bool = True,
    timeouts: dict | None = None,
    limits: dict | None = None,
    **options: Any,
) -> AsyncIterator[Cluster]:
    """Fakes (started unless up=False) and the proxy in front of them, in process or over loopback HTTP
    (http=True: streaming, disconnects, timeouts, served by the proxy's own uvicorn protocol). On a
    clean exit, asserts that no fake saw a contract violation."""
    world, net = World(api_key=api_key), Network()
    servers = _fakes(world, prefill, decode, http, net)
    config = Config(
        prefill=tuple(Prefill(e.url, int(e.bootstrap_addr.rsplit(":", 1)[1])) for e in world.prefill),
        decode=tuple(e.url for e in world.decode),
        timeouts=dataclasses.replace(Timeouts(health=1.0), **(timeouts or {})),
        limits=Limits(**(limits or {})),
        api_key=api_key,
        **{"health_interval": 0.02, **options},
    )
    app = App(config, transport=None if http else net)
    proxy = Server(app, lifespan="on", http=protocol_for(config, app.refused)) if http else None
    # verify=False: plain HTTP only, and it spares loading the CA certificates per test.
    base_url = f"http://{LOOPBACK}:{proxy.port}" if proxy else "http://proxy"
    transport = None if proxy else httpx.ASGITransport(app)
    client = httpx.AsyncClient(
        base_url=base_url, transport=transport, timeout=WAIT, verify=False, trust_env=False
    )
    cluster = Cluster(world, config, client, servers, proxy)
    try:
        if up:
            await asyncio.gather(*(cluster.start(e) for e in world.prefill + world.decode))
        await (proxy.start() if proxy else app.startup())
        if up:
            await cluster.wait_health(prefill, decode)
        yield cluster
        assert world.violations == [], "the proxy broke the PD contract"
    finally:
        for engine in world.prefill + world.decode:
            engine.released.set()
        await client.aclose()
        stops = [s.stop() for group in servers.values() for s in group]
        await asyncio.gather(proxy.stop() if proxy else app.shutdown(), *stops)
