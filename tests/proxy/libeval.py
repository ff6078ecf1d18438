"""What prometheus_client and starlette's Router would cost the proxy per request, against its hand-written
metrics (proxy/metrics.py) and route table (proxy/app.py). Neither library is a dependency: run with them
importable, e.g. `pip install --target DIR prometheus-client==0.26.0 starlette==1.10.0` and
`PYTHONPATH=DIR .venv/bin/python -m tests.proxy.libeval`."""

from __future__ import annotations

import asyncio
import time
import timeit
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from starlette.routing import Route, Router

from proxy.metrics import BUCKETS, Metrics

URL = "http://10.0.0.1:8000"
STATS = {"num_cached_tokens": 100, "num_lmcache_cached_tokens": 50}
PATHS = {"/v1/chat/completions": "POST", "/v1/completions": "POST", "/v1/models": "GET"}
PATHS |= {"/health": "GET", "/metrics": "GET"}


def ours() -> tuple[Callable[[], None], Callable[[], bytes]]:
    """One streamed request's updates, as relay.py makes them; and a scrape."""
    m = Metrics()

    def one() -> None:
        m.requests["/v1/chat/completions"] += 1
        m.in_flight += 1
        m.prefill_seconds.observe(0.012)
        m.prefill_answer(URL, 900, STATS)
        m.decode_first_byte_seconds.observe(0.03)
        m.decode_seconds.observe(0.4)
        m.stream_chunks += 80
        m.stream_bytes += 16000
        m.in_flight -= 1

    return one, lambda: m.render(SimpleNamespace(all=[]))  # type: ignore[arg-type]


def theirs() -> tuple[Callable[[], None], Callable[[], bytes]]:
    """The same with prometheus_client (one registry per proxy, as tests start many)."""
    r = CollectorRegistry()
    requests = Counter("proxy_requests_total", "-", ["endpoint"], registry=r)
    in_flight = Gauge("proxy_in_flight", "-", registry=r)
    prefill, first, decode = (
        Histogram(f"proxy_{n}_seconds", "-", buckets=BUCKETS, registry=r)
        for n in ("prefill", "first", "decode")
    )
    prompt = Counter("proxy_prefill_prompt_tokens_total", "-", ["prefill"], registry=r)
    reports = Counter("proxy_prefill_cache_reports_total", "-", ["prefill"], registry=r)
    cached = Counter("proxy_prefill_cached_tokens_total", "-", ["prefill", "stat"], registry=r)
    chunks = Counter("proxy_stream_chunks_total", "-", registry=r)
    size = Counter("proxy_stream_bytes_total", "-", registry=r)

    def one() -> None:
        requests.labels("/v1/chat/completions").inc()
        in_flight.inc()
        prefill.observe(0.012)
        prompt.labels(URL).inc(900)
        reports.labels(URL).inc()
        for stat, value in STATS.items():
            cached.labels(URL, stat).inc(value)
        first.observe(0.03)
        decode.observe(0.4)
        chunks.inc(80)
        size.inc(16000)
        in_flight.dec()

    return one, lambda: generate_latest(r)


def per_call_us(fn: Callable[[], Any], number: int) -> float:
    return min(timeit.repeat(fn, number=number, repeat=5)) / number * 1e6


async def _endpoint(scope: Any, receive: Any, send: Any) -> None:
    return None


class _App:
    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        return None


ROUTES = {path: (method, _endpoint) for path, method in PATHS.items()}
ROUTER = Router([Route(path, _App(), methods=[method]) for path, method in PATHS.items()])


async def table_route(scope: Any, receive: Any, send: Any) -> None:
    """proxy/app.py's dispatch."""
    route = ROUTES.get(scope["path"])
    if route is not None and route[0] == scope["method"]:
        await route[1](scope, receive, send)


async def route_us(app: Any, number: int) -> float:
    scope = {"type": "http", "method": "POST", "path": "/v1/chat/completions", "root_path": "", "headers": []}
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(number):
            await app(dict(scope), None, None)
        best = min(best, (time.perf_counter() - start) / number * 1e6)
    return best


def main() -> None:
    (a, render_a), (b, render_b) = ours(), theirs()
    for _ in range(100):
        a(), b()
    print(f"one request's metric updates: hand-written {per_call_us(a, 50_000):.1f} us, ", end="")
    print(f"prometheus_client {per_call_us(b, 50_000):.1f} us")
    print(f"a scrape: hand-written {per_call_us(render_a, 500):.0f} us, ", end="")
    print(f"prometheus_client {per_call_us(render_b, 500):.0f} us")
    table, router = asyncio.run(route_us(table_route, 50_000)), asyncio.run(route_us(ROUTER, 50_000))
    print(f"routing one request: route table {table:.1f} us, starlette Router {router:.1f} us")


if __name__ == "__main__":
    main()
