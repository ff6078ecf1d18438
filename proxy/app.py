"""The raw ASGI application: routes, lifespan (clients, health checks), /health, /metrics, /v1/models."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Awaitable, Callable

import httpx
import msgspec

from proxy import inbound
from proxy.asgi import JSON, Message, Receive, Reply, Send
from proxy.backends import Backends
from proxy.config import Config
from proxy.errors import BadAnswer, ProxyError, Unauthorized, classify, describe, envelope
from proxy.relay import fail, relay
from proxy.runtime import Clients, Runtime, read_whole

log = logging.getLogger("proxy")
Handler = Callable[[Runtime, Message, Receive, Send], Awaitable[None]]
MODELS_TIMEOUT = 30.0  # a deadline for /v1/models: a busy engine's API server may answer slowly
_MODELS_READ = httpx.Timeout(MODELS_TIMEOUT, connect=5.0)  # the control client's own is the health one
# Open without the API key: the job's health barrier and metrics scrape do not carry it, and neither
# says more than engine addresses and load (vLLM leaves its own /health and /metrics open too).
OPEN = frozenset({("GET", "/health"), ("GET", "/metrics")})


class App:
    """The proxy. Its upstream clients live from lifespan startup to shutdown; `transport` replaces
    their network (tests route to in-process fake engines)."""

    def __init__(self, config: Config, transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.config = config
        self._transport = transport
        self._key = config.api_key.encode() if config.api_key else None
        self.runtime: Runtime | None = None
        self._checks: asyncio.Task[None] | None = None

    async def __call__(self, scope: Message, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            await self._http(scope, receive, send)
        elif scope["type"] == "lifespan":
            await self._lifespan(receive, send)

    async def _http(self, scope: Message, receive: Receive, send: Send) -> None:
        assert self.runtime is not None, "requests arrive only after lifespan startup"
        if self._key is not None and (scope["method"], scope["path"]) not in OPEN:
            if not inbound.authorized(scope["headers"], self._key):  # nothing reaches an engine
                refusal = Unauthorized("missing or wrong API key (send Authorization: Bearer <key>)")
                return await fail(self.runtime, Reply(send, uuid.uuid4().hex.encode()), "client", refusal)
        route = ROUTES.get(scope["path"])
        if route is None or route[0] != scope["method"]:
            status, kind = (404, "not_found") if route is None else (405, "method_not_allowed")
            reply = Reply(send, uuid.uuid4().hex.encode())
            return await reply.whole(
                status, envelope(status, kind, f"{scope['method']} {scope['path']:.200}"), JSON
            )
        await route[1](self.runtime, scope, receive, send)

    def refused(self, kind: str, message: str) -> None:
        """A client the server protocol turned away (a head too large or too slow, too many
        connections): counted and logged like the app's own refusals."""
        if self.runtime is None:
            return
        self.runtime.metrics.errors["client", kind] += 1
        more = self.runtime.throttle.allow(("client", kind))
        if more is not None:
            log.warning("client refused: %s%s", message, more)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await self.startup()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.shutdown()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def startup(self) -> None:
        """Serves at once: engines not up yet are simply unhealthy until a check finds them."""
        clients = Clients.create(self.config, self._transport)
        self.runtime = Runtime(self.config, clients, Backends.from_config(self.config))
        self._checks = asyncio.get_running_loop().create_task(
            self.runtime.backends.check_forever(
                clients.control, self.config.health_interval, self.config.timeouts.health
            )
        )
        c = self.config
        log.info(
            "prefill %s; decode %s; policy %s; API key %s",
            ", ".join(f"{p.url} (bootstrap {p.bootstrap_addr})" for p in c.prefill),
            ", ".join(c.decode),
            c.policy,
            "set (clients must send it)" if c.api_key else "not set (anyone who reaches the proxy is served)",
        )

    async def shutdown(self) -> None:
        if self._checks is not None:
            self._checks.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._checks
        if self.runtime is not None:
            await self.runtime.clients.aclose()


async def health(rt: Runtime, scope: Message, receive: Receive, send: Send) -> None:
    """200 only when both roles have a healthy engine; the counts let a launcher wait for all of them."""
    b = rt.backends
    ok = b.prefill.healthy > 0 and b.decode.healthy > 0
    doc = {
        "status": "healthy" if ok else "unhealthy",
        "prefill": {"healthy": b.prefill.healthy, "total": len(b.prefill.backends)},
        "decode": {"healthy": b.decode.healthy, "total": len(b.decode.backends)},
        "backends": [
            {
                "role": x.role,
                "url": x.url,
                "healthy": x.healthy,
                "outstanding": x.outstanding,
                "engine_ids": list(x.engine_ids),
                "problem": x.problem,
            }
            for x in b.all
        ],
    }
    await Reply(send, uuid.uuid4().hex.encode()).whole(200 if ok else 503, msgspec.json.encode(doc), JSON)


async def metrics(rt: Runtime, scope: Message, receive: Receive, send: Send) -> None:
    body = rt.metrics.render(rt.backends)
    await Reply(send, uuid.uuid4().hex.encode()).whole(200, body, b"text/plain; version=0.0.4; charset=utf-8")


async def models(rt: Runtime, scope: Message, receive: Receive, send: Send) -> None:
    """The model list of a healthy decode engine, as it answered."""
    reply = Reply(send, uuid.uuid4().hex.encode())
    try:
        backend = rt.backends.decode.least_loaded()
        async with asyncio.timeout(MODELS_TIMEOUT):
            status, content, content_type = await _models(rt, backend.url)
    except TimeoutError:
        problem: BaseException = BadAnswer(f"decode {backend.url} sent no models within {MODELS_TIMEOUT:g} s")
    except (ProxyError, httpx.HTTPError) as exc:
        problem = exc
    else:
        return await reply.whole(status, content, content_type)
    status, kind = classify(problem)
    await reply.whole(status, envelope(status, kind, describe(problem)), JSON)


async def _models(rt: Runtime, url: str) -> tuple[int, bytes, bytes]:
    who = f"decode {url}"
    control, auth = rt.clients.control, rt.clients.auth
    async with control.stream("GET", url + "/v1/models", headers=auth, timeout=_MODELS_READ) as response:
        content = await read_whole(response, rt.config.limits.answer_bytes, who)
    if not (200 <= response.status_code < 300 or 400 <= response.status_code < 600):
        raise BadAnswer(f"{who} answered HTTP {response.status_code}")
    value = response.headers.get("content-type", "")
    content_type = value.encode("latin-1") if value.isascii() and value.isprintable() else JSON
    return response.status_code, content, content_type or JSON


# A dict, not starlette's Router (1.10.0): routing a request took ~4x as long (its path regexes and scope
# copies: ~3 -> ~15 us, tests/proxy/libeval.py), and its plain-text 404/405 would need our envelope anyway.
ROUTES: dict[str, tuple[str, Handler]] = {
    "/v1/chat/completions": ("POST", relay),
    "/v1/completions": ("POST", relay),
    "/v1/models": ("GET", models),
    "/health": ("GET", health),
    "/metrics": ("GET", metrics),
}
