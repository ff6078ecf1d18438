"""SGLang PD transfer (Mooncake backend), simulated: the prefill's bootstrap server and the decode's side.

Real SGLang (sglang/srt/disaggregation/common/conn.py, CommonKVBootstrapServer): the prefill runs an HTTP
bootstrap server on --disaggregation-bootstrap-port with `GET /health` ("OK") and `/route`: PUT registers a
prefill rank, GET with prefill_dp_rank/prefill_cp_rank/target_tp_rank/target_pp_rank answers the prefill's
parallel info (all four -1) or one rank's {"rank_ip", "rank_port"}. A request is identified on both sides by
its `bootstrap_room`; the decode fetches the parallel info, tells the prefill rank where to write (ZMQ) and
waits; the prefill waits for that (bootstrapping), computes, pushes the KV (RDMA/TCP) and only then
finishes its request.

Simulated: the same /health and /route, plus sim-only `POST /sim/kv/<room>` (the decode announces itself:
the ZMQ message) and `GET /sim/kv/<room>` (the decode takes the KV: the Mooncake write, as a pull, like the
vLLM sim). `Rooms` is the prefill's table, `Receiver` the decode's side.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs

import httpx
import msgspec

from sim.metrics import Metrics
from sim.mooncake import PullFailed, poll_kv

ROUTE_KEYS = ("prefill_dp_rank", "prefill_cp_rank", "target_tp_rank", "target_pp_rank")


@dataclass
class Room:
    registered: asyncio.Event = field(default_factory=asyncio.Event)  # a decode announced itself
    pulled: asyncio.Event = field(default_factory=asyncio.Event)
    state: str = "waiting"  # waiting | ready | pulled | failed
    tokens: int = 0
    decode: str = ""
    owned: bool = False  # a prefill request works on it (not swept)
    deadline: float = 0.0


@dataclass
class Rooms:
    """Prefill-side table of bootstrap rooms; entries nobody works on expire after `keep_s`."""

    keep_s: float
    metrics: Metrics
    rooms: dict[int, Room] = field(default_factory=dict)

    def _room(self, room: int) -> Room:
        if room not in self.rooms:
            self.rooms[room] = Room(deadline=time.monotonic() + self.keep_s)
        return self.rooms[room]

    def register(self, room: int, decode: str) -> tuple[int, dict[str, Any]]:
        entry = self._room(room)
        if entry.decode and entry.decode != decode:  # a room is one request: a second receiver is refused
            return 409, {"error": f"bootstrap room {room} already has a receiver ({entry.decode})"}
        entry.decode = decode
        entry.registered.set()
        return 200, {"bootstrap_room": room}

    def begin(self, room: int) -> Room:
        entry = self._room(room)
        entry.owned = True
        return entry

    def ready(self, room: int, tokens: int) -> None:
        entry = self._room(room)
        entry.state, entry.tokens = "ready", tokens
        self.metrics.inc("sim_kv_transfers", fate="kept")

    def fail(self, room: int) -> None:
        """The prefill's request ended without finishing the transfer (timeout, client gone)."""
        entry = self.rooms.get(room)
        if entry is None:
            return
        if entry.state == "pulled":  # the decode has it already: nothing left to tell
            del self.rooms[room]
            return
        entry.state, entry.owned = "failed", False  # kept a while, so the decode's pull ends at once
        entry.deadline = time.monotonic() + self.keep_s

    def close(self, room: int) -> None:
        entry = self.rooms.get(room)
        if entry is not None and entry.state == "pulled":
            del self.rooms[room]

    def pull(self, room: int) -> tuple[int, dict[str, Any]]:
        """200 once; 409 while bootstrapping or prefilling; 410 if the prefill gave it up; 404 unknown."""
        entry = self.rooms.get(room)
        if entry is None or entry.state == "pulled":
            return 404, {"error": f"no KV for bootstrap room {room}"}
        if entry.state == "failed":
            return 410, {"error": f"the prefill aborted bootstrap room {room}"}
        if entry.state != "ready":
            return 409, {"error": f"bootstrap room {room} still prefilling"}
        entry.state = "pulled"
        entry.pulled.set()
        self.metrics.inc("sim_kv_transfers", fate="pulled")
        return 200, {"bootstrap_room": room, "num_tokens": entry.tokens}

    def expire(self) -> None:
        now = time.monotonic()
        for room in [r for r, e in self.rooms.items() if not e.owned and e.deadline <= now]:
            if self.rooms.pop(room).state == "ready":
                self.metrics.inc("sim_kv_transfers", fate="expired")


def prefill_info(*, tp: int, pp: int, page_size: int, http_port: int) -> dict[str, Any]:
    """GET /route with all four ranks -1: PrefillServerInfo."""
    return {
        "attn_tp_size": tp,
        "attn_cp_size": 1,
        "dp_size": 1,
        "pp_size": pp,
        "page_size": page_size,
        "kv_cache_dtype": "auto",
        "follow_bootstrap_room": True,
        "enable_dsa_cache_layer_split": False,
        "prefill_http_port": http_port,
    }


def rank_table(*, host: str, base_port: int, tp: int, pp: int) -> dict[tuple[int, int, int, int], dict]:
    """Each prefill rank's PrefillRankInfo, as its PUT /route registered it (ZMQ ports: not bound here)."""
    return {
        (0, 0, t, p): {"rank_ip": host, "rank_port": base_port + 1 + t * pp + p}
        for t in range(tp)
        for p in range(pp)
    }


def bootstrap_app(rooms: Rooms, info: dict[str, Any], ranks: dict[tuple[int, int, int, int], dict]):
    """ASGI app of the prefill's bootstrap server."""
    info_body = msgspec.json.encode(info)

    async def app(scope, receive, send):
        if scope["type"] != "http":
            return
        path, method = scope["path"], scope["method"]
        if path == "/health" and method == "GET":
            return await _reply(send, 200, b"OK", b"text/plain; charset=utf-8")
        if path == "/route":
            if method == "GET":
                return await _route_get(send, parse_qs(scope.get("query_string", b"").decode()))
            if method == "PUT":
                return await _route_put(receive, send)
            return await _reply(send, 405, b"Method not allowed")
        if path.startswith("/sim/kv/"):
            try:
                room = int(path.removeprefix("/sim/kv/"))
            except ValueError:
                return await _reply(send, 400, b'{"error":"bootstrap room must be an integer"}')
            if method == "POST":
                body = await _body(receive)
                status, answer = rooms.register(room, str(body.get("decode", "")))
            else:
                status, answer = rooms.pull(room)
            return await _reply(send, status, msgspec.json.encode(answer))
        return await _reply(send, 404, b"404: Not Found", b"text/plain; charset=utf-8")

    async def _route_get(send, query: dict[str, list[str]]):
        values = [query.get(k, [""])[0] for k in ROUTE_KEYS]
        if not all(values):
            return await _reply(send, 400, b"Missing inputs for bootstrap server.", b"text/plain")
        try:
            key = tuple(int(v) for v in values)
        except ValueError:
            return await _reply(send, 400, b"Bootstrap ranks must be integers.", b"text/plain")
        if key == (-1, -1, -1, -1):
            return await _reply(send, 200, info_body)
        if key not in ranks:
            dp, cp, tp, pp = key
            text = f"Bootstrap info not found for dp_rank={dp} cp_rank={cp} tp_rank={tp} pp_rank={pp}"
            return await _reply(send, 404, text.encode(), b"text/plain")
        return await _reply(send, 200, msgspec.json.encode(ranks[key]))

    async def _route_put(receive, send):
        body = await _body(receive)
        try:
            key = (
                int(body.get("attn_dp_rank", 0)),
                int(body.get("attn_cp_rank", 0)),
                int(body["attn_tp_rank"]),
                int(body["pp_rank"]),
            )
            ranks[key] = {"rank_ip": str(body["rank_ip"]), "rank_port": int(body["rank_port"])}
        except (KeyError, TypeError, ValueError) as exc:
            return await _reply(send, 400, f"bad registration: {exc!r}".encode(), b"text/plain")
        return await _reply(send, 200, b"OK", b"text/plain")

    return app


async def _body(receive) -> dict[str, Any]:
    chunks = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            break
    try:
        value = json.loads(b"".join(chunks) or b"{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


async def _reply(send, status: int, body: bytes, ctype: bytes = b"application/json") -> None:
    headers = [(b"content-type", ctype), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class Receiver:
    """Decode side: the prefill's parallel info (cached per bootstrap address, as the real decode's
    prefill_info_table), the announcement for a room, and the wait for its KV."""

    def __init__(self, client: httpx.AsyncClient, *, wait_s: float, me: str) -> None:
        self.client, self.wait_s, self.me = client, wait_s, me
        self.infos: dict[str, dict[str, Any]] = {}

    async def bootstrap(self, addr: str, room: int) -> None:
        """Fetches the prefill's parallel info and rank 0, then announces this decode for `room`; raises
        PullFailed("bootstrap") when the bootstrap server cannot be used."""
        base = f"http://{addr}"
        try:
            if addr not in self.infos:
                everything = dict.fromkeys(ROUTE_KEYS, "-1")
                reply = await self.client.get(f"{base}/route", params=everything, timeout=5.0)
                reply.raise_for_status()
                info = reply.json()
                rank0 = dict.fromkeys(ROUTE_KEYS, "0")
                (await self.client.get(f"{base}/route", params=rank0, timeout=5.0)).raise_for_status()
                self.infos[addr] = info
            reply = await self.client.post(f"{base}/sim/kv/{room}", json={"decode": self.me}, timeout=5.0)
            if reply.status_code != 200:
                raise PullFailed("bootstrap", f"bootstrap server {addr} refused room {room}: {reply.text}")
        except (httpx.HTTPError, ValueError) as exc:
            self.infos.pop(addr, None)
            message = (
                f"Could not fetch prefill parallel info from bootstrap_addr: {addr} ({type(exc).__name__})"
            )
            raise PullFailed("bootstrap", message) from None

    async def receive(self, addr: str, room: int) -> int:
        """Prompt tokens of `room`'s KV, once the prefill has it; PullFailed after wait_s."""
        body = await poll_kv(
            self.client,
            f"http://{addr}/sim/kv/{room}",
            None,
            wait_s=self.wait_s,
            what=f"KV of bootstrap room {room}",
            source=addr,
            final=frozenset({410}),
        )
        return int(body["num_tokens"])
