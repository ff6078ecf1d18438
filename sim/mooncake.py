"""Mooncake PD transfer, simulated: the prefill's bootstrap server and the decode's pull.

Prefill side: `Transfers` remembers, per transfer_id, how many prompt tokens a finished prefill leg
kept for decode (only when it ended by the length cap) until pulled once or until
VLLM_MOONCAKE_ABORT_REQUEST_TIMEOUT passes. The bootstrap app answers `GET /query` in vLLM's shape and
the sim-only `GET /sim/kv/<transfer_id>?engine_id=` that stands in for the RDMA/TCP read.
Decode side: `Puller` resolves engine ids from /query (cached per address, like vLLM) and polls
/sim/kv until the transfer is there or the wait budget is spent.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs

import httpx
import msgspec

from sim.metrics import Metrics


def new_engine_id() -> str:
    """vLLM's default KVTransferConfig.engine_id: a fresh uuid4 per process."""
    return str(uuid.uuid4())


def query_payload(*, engine_id: str, host: str, base_port: int, tp: int, pp: int) -> dict[str, Any]:
    """`GET /query`: {dp_rank: {engine_id, worker_addr: {tp_rank: {pp_rank: tcp://ip:port}}}}."""
    workers = {
        str(t): {str(p): f"tcp://{host}:{base_port + 1 + t * pp + p}" for p in range(pp)} for t in range(tp)
    }
    return {"0": {"engine_id": engine_id, "worker_addr": workers}}


@dataclass
class _Entry:
    state: str  # pending | kept | dropped
    tokens: int = 0
    deadline: float = 0.0


@dataclass
class Transfers:
    """Prefill-side transfer table."""

    engine_id: str
    keep_s: float
    metrics: Metrics
    entries: dict[str, _Entry] = field(default_factory=dict)

    def begin(self, transfer_id: str) -> None:
        self.entries[transfer_id] = _Entry("pending")

    def finish(self, transfer_id: str, *, tokens: int, kept: bool) -> None:
        if kept:
            self.entries[transfer_id] = _Entry("kept", tokens, time.monotonic() + self.keep_s)
        else:
            self.entries[transfer_id] = _Entry("dropped", deadline=time.monotonic() + self.keep_s)
        self.metrics.inc("sim_kv_transfers", fate="kept" if kept else "dropped")

    def abort(self, transfer_id: str) -> None:
        self.entries.pop(transfer_id, None)

    def pull(self, transfer_id: str, engine_id: str) -> tuple[int, dict[str, Any]]:
        """(HTTP status, body) for one pull: 200 once; 409 pending; 404 unknown, dropped or expired."""
        self.expire()
        if engine_id != self.engine_id:
            return 404, {"error": f"engine {engine_id!r} is not this prefill ({self.engine_id!r})"}
        entry = self.entries.get(transfer_id)
        if entry is None or entry.state == "dropped":
            return 404, {"error": f"no KV kept for transfer {transfer_id!r}"}
        if entry.state == "pending":
            return 409, {"error": f"transfer {transfer_id!r} still prefilling"}
        del self.entries[transfer_id]
        self.metrics.inc("sim_kv_transfers", fate="pulled")
        return 200, {"transfer_id": transfer_id, "engine_id": self.engine_id, "num_tokens": entry.tokens}

    def expire(self) -> None:
        now = time.monotonic()
        for tid in [t for t, e in self.entries.items() if e.state != "pending" and e.deadline <= now]:
            if self.entries.pop(tid).state == "kept":
                self.metrics.inc("sim_kv_transfers", fate="expired")


def bootstrap_app(transfers: Transfers, query: dict[str, Any]):
    """ASGI app of the bootstrap server (one per prefill process)."""
    query_body = msgspec.json.encode(query)

    async def app(scope, receive, send):
        if scope["type"] != "http":
            return
        path = scope["path"]
        if scope["method"] == "GET" and path == "/query":
            return await _reply(send, 200, query_body)
        if scope["method"] == "GET" and path.startswith("/sim/kv/"):
            engine = parse_qs(scope.get("query_string", b"").decode()).get("engine_id", [""])[0]
            status, body = transfers.pull(path.removeprefix("/sim/kv/"), engine)
            return await _reply(send, status, msgspec.json.encode(body))
        return await _reply(send, 404, b'{"detail":"Not Found"}')

    return app


async def _reply(send, status: int, body: bytes) -> None:
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class PullFailed(Exception):
    """The decode could not load the transfer; `reason` labels the metric."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class Puller:
    """Decode side: engine ids from /query and pulls from /sim/kv."""

    def __init__(self, client: httpx.AsyncClient, *, wait_s: float) -> None:
        self.client = client
        self.wait_s = wait_s
        self.engines: dict[str, str] = {}

    async def engine_id(self, addr: str, *, refresh: bool = False) -> str | None:
        """The engine id `addr`/query reports (cached like vLLM; refresh re-asks), None if unreachable."""
        key = addr.rstrip("/")
        if refresh or key not in self.engines:
            try:
                reply = await self.client.get(f"{key}/query", timeout=5.0)
                self.engines[key] = reply.json()["0"]["engine_id"]
            except (httpx.HTTPError, ValueError, KeyError, TypeError):
                self.engines.pop(key, None)
                return None
        return self.engines[key]

    async def pull(self, addr: str, transfer_id: str, engine_id: str) -> int:
        """Prompt tokens kept for `transfer_id`; waits up to wait_s (the prefill may still be running)."""
        url = f"{addr.rstrip('/')}/sim/kv/{transfer_id}"
        what = f"KV for transfer {transfer_id}"
        body = await poll_kv(
            self.client, url, {"engine_id": engine_id}, wait_s=self.wait_s, what=what, source=addr
        )
        return int(body["num_tokens"])


async def poll_kv(
    client: httpx.AsyncClient,
    url: str,
    params: dict[str, str] | None,
    *,
    wait_s: float,
    what: str,
    source: str,
    final: frozenset[int] = frozenset(),
) -> dict[str, Any]:
    """GET `url` until it answers 200 (its JSON body) or `wait_s` is spent (PullFailed "timeout"): the sim's
    stand-in for waiting on a KV transfer. A status in `final` ends the wait at once (PullFailed "failed")."""
    deadline, pause, last = time.monotonic() + wait_s, 0.005, "never answered"
    while True:
        try:
            reply = await client.get(url, params=params, timeout=5.0)
            if reply.status_code == 200:
                return reply.json()
            last = reply.json().get("error", reply.text)
            if reply.status_code in final:
                raise PullFailed("failed", f"{what} failed at {source}: {last}")
        except (httpx.HTTPError, ValueError) as exc:
            last = f"{type(exc).__name__}: {exc}"
        if time.monotonic() + pause > deadline:
            raise PullFailed(
                "timeout", f"{what} not available from {source} after {wait_s:g} s (last: {last})"
            )
        await asyncio.sleep(pause)
        pause = min(pause * 2, 0.1)
