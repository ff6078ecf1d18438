"""Runtime state of the engines: health, engine ids, load, and which one serves a request."""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import httpx
import msgspec

from proxy.config import Config
from proxy.errors import NoBackend, describe
from proxy.mooncake import engine_ids

log = logging.getLogger("proxy")
QUERY_BYTES = 1 << 20  # a bootstrap /query answer: ~200 bytes per data-parallel rank
# A healthy engine leaves rotation after this many health checks in a row got no answer in time: a busy
# CPU engine answered one check late and its only decode was ejected, failing requests that it would have
# served (make bench-proxy, real engines). A definite failure (refused, an error status) ejects at once.
SLOW_CHECKS = 3
# A kept-alive connection the engine closed as the check was written into it ends like this: a health check
# (a GET, safe to repeat) that meets it asks again before it calls the engine down.
_STALE = (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)


@dataclass(eq=False)
class Backend:
    role: str
    url: str
    bootstrap_addr: str | None = None  # prefill only
    healthy: bool = False
    outstanding: int = 0
    engine_ids: tuple[str, ...] = ()
    problem: str = "not checked yet"
    slow_checks: int = 0  # health checks in a row without an answer in time


@dataclass(frozen=True)
class Pick:
    backend: Backend
    dp_rank: int = 0

    @property
    def engine_id(self) -> str:
        return self.backend.engine_ids[self.dp_rank]


class Pool:
    """The engines of one role; unhealthy ones are out of rotation until a check brings them back."""

    def __init__(self, backends: Sequence[Backend]) -> None:
        self.backends = tuple(backends)
        self._turn = itertools.count()

    @property
    def healthy(self) -> int:
        return sum(b.healthy for b in self.backends)

    def least_loaded(self, exclude: Iterable[Backend] = ()) -> Backend:
        """Fewest outstanding requests; ties rotate so an idle pool still spreads requests."""
        skip = set(exclude)
        n = len(self.backends)
        start = next(self._turn) % n
        ready = [b for b in self.backends[start:] + self.backends[:start] if b.healthy and b not in skip]
        if not ready:
            raise NoBackend(f"no healthy {self.backends[0].role} engine")
        return min(ready, key=lambda b: b.outstanding)

    def pick(self, key: bytes | None, exclude: Iterable[Backend] = ()) -> Pick:
        """With a key, the key's home engine (hashed over every configured engine, so homes do not
        move while another is down), else or when home is unhealthy the least-loaded one. The same
        hash picks the data-parallel rank, so a session also stays on one rank's prefix cache."""
        skip = set(exclude)
        n = len(self.backends)
        h = (
            int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "little")
            if key
            else next(self._turn)
        )
        home = self.backends[h % n]
        backend = home if key and home.healthy and home not in skip else self.least_loaded(skip)
        return Pick(backend, (h // n) % max(1, len(backend.engine_ids)))


def affinity_key(body: Mapping[str, Any], session: bytes | None, chars: int) -> bytes:
    """The session header when the client sent one, else the leading characters of the prompt."""
    if session:
        return b"s:" + session
    return b"p:" + _prompt_prefix(body, chars).encode("utf-8", "surrogatepass")


def _prompt_prefix(body: Mapping[str, Any], chars: int) -> str:
    if "messages" in body:
        parts = _texts(body["messages"], chars)
    else:
        parts = _texts(body.get("prompt"), chars)
    return "\x1e".join(parts)[:chars]


def _texts(value: Any, budget: int) -> list[str]:
    """Strings in document order (message contents, prompt, token ids as text) until budget is spent."""
    out: list[str] = []
    stack = [value]
    while stack and budget > 0:
        item = stack.pop()
        if isinstance(item, str):
            out.append(item[:budget])
            budget -= len(out[-1])
        elif isinstance(item, int):
            out.append(str(item))
            budget -= len(out[-1]) + 1
        elif isinstance(item, list):
            stack.extend(reversed(item))
        elif isinstance(item, dict):
            stack.extend(reversed([item[k] for k in ("role", "content", "text") if k in item]))
    return out


@dataclass
class Backends:
    """Both pools plus the periodic checks that keep health and engine ids current."""

    prefill: Pool
    decode: Pool

    @classmethod
    def from_config(cls, config: Config) -> Backends:
        prefill = [Backend("prefill", p.url, p.bootstrap_addr) for p in config.prefill]
        return cls(Pool(prefill), Pool([Backend("decode", url) for url in config.decode]))

    @property
    def all(self) -> tuple[Backend, ...]:
        return self.prefill.backends + self.decode.backends

    async def check_forever(self, client: httpx.AsyncClient, interval: float, deadline: float) -> None:
        """Every engine at once, the first round at startup (so nothing waits `interval` to start).
        Each check has a deadline, so one engine that answers slowly cannot hold up the others'."""
        while True:
            await asyncio.gather(*(check(client, b, deadline) for b in self.all))
            await asyncio.sleep(interval)


async def check(client: httpx.AsyncClient, backend: Backend, deadline: float) -> None:
    """One health check; for a prefill also its engine ids, asked every time because a restarted
    engine has a new id and a decode told the old one waits for the Mooncake abort timeout."""
    try:
        async with asyncio.timeout(deadline):
            try:
                problem, ids = await _ask(client, backend)
            except _STALE:  # once, on a new connection: an engine that is gone refuses that one
                problem, ids = await _ask(client, backend)
    except TimeoutError:
        backend.slow_checks += 1
        problem = f"no health answer within {deadline:g} s"
        if backend.healthy and backend.slow_checks < SLOW_CHECKS:
            log.info("%s %s: %s (%d of %d in a row)", backend.role, backend.url, problem, backend.slow_checks,
                     SLOW_CHECKS)  # fmt: skip
            return
        problem += f" ({backend.slow_checks} checks in a row)" if backend.slow_checks > 1 else ""
    except Exception as exc:  # whatever an engine answers, the check loop must live on
        problem = describe(exc)
    if problem:
        set_down(backend, problem)
    else:
        set_up(backend, ids)


async def _ask(client: httpx.AsyncClient, backend: Backend) -> tuple[str, tuple[str, ...]]:
    """(problem, engine ids): /health by its status alone (its body is not read), then /query."""
    async with client.stream("GET", backend.url + "/health") as response:
        if response.status_code != 200:
            return f"/health answered HTTP {response.status_code}", ()
    if backend.bootstrap_addr is None:
        return "", ()
    async with client.stream("GET", backend.bootstrap_addr + "/query") as response:
        if response.status_code != 200:
            return f"bootstrap /query answered HTTP {response.status_code}", ()
        content = await _read_capped(response, QUERY_BYTES)
    try:
        return "", engine_ids(msgspec.json.decode(content))
    except (ValueError, RecursionError) as exc:  # msgspec.DecodeError is a ValueError
        return f"bootstrap /query: {' '.join(str(exc).split())}", ()


async def _read_capped(response: httpx.Response, limit: int) -> bytes:
    chunks, size = [], 0
    async for chunk in response.aiter_raw():
        size += len(chunk)
        if size > limit:
            raise ValueError(f"bootstrap /query answered more than {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def set_up(backend: Backend, ids: tuple[str, ...]) -> None:
    if not backend.healthy or ids != backend.engine_ids:
        suffix = f" engine ids {list(ids)}" if backend.bootstrap_addr else ""
        was = "engine ids changed" if backend.healthy else "healthy"
        log.info("%s %s %s%s", backend.role, backend.url, was, suffix)
    backend.healthy, backend.engine_ids, backend.problem, backend.slow_checks = True, ids, "", 0


def set_down(backend: Backend, problem: str) -> None:
    """Out of rotation until a check succeeds again; logged once per change of cause."""
    if backend.healthy or problem != backend.problem:
        log.warning("%s %s unhealthy: %s", backend.role, backend.url, problem)
    backend.healthy, backend.problem = False, problem
