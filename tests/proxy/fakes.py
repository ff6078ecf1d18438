"""Strict fake vLLM prefill/decode engines and Mooncake bootstrap servers that record what they get."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sim.contract import Violation, check_decode_request, check_prefill_request

ENDPOINTS = ("/v1/chat/completions", "/v1/completions")


@dataclass
class Seen:
    path: str
    headers: dict[str, str]
    body: Any


@dataclass
class World:
    """What every fake shares: the engines, the contract's bookkeeping, and every violation seen."""

    api_key: str | None = None
    prefill: list[FakeEngine] = field(default_factory=list)
    decode: list[FakeEngine] = field(default_factory=list)
    violations: list[Violation] = field(default_factory=list)
    answered: dict[str, Answered] = field(default_factory=dict)  # by transfer_id, each 2xx prefill

    def engines(self, transfer: Answered | None) -> dict[str, str]:
        """What the decode-side contract check compares against: what each live /query reports now, for
        the prefill that served the transfer the id of the data-parallel rank that served it."""
        live = {p.bootstrap_addr: p for p in self.prefill if p.up}
        ids = {addr: p.engine_ids[0] for addr, p in live.items()}
        if transfer is not None and transfer.bootstrap_addr in live:
            ids[transfer.bootstrap_addr] = live[transfer.bootstrap_addr].engine_ids[transfer.dp_rank]
        return ids

    def check(self, engine: FakeEngine, seen: Seen) -> list[Violation]:
        found = self._headers(seen.headers)
        if engine.role == "prefill":
            found += check_prefill_request(seen.body, endpoint=seen.path) + self._dp_rank(
                engine, seen.headers
            )
        else:
            transfer = self.answered.get((seen.body.get("kv_transfer_params") or {}).get("transfer_id"))
            found += check_decode_request(seen.body, endpoint=seen.path, engines=self.engines(transfer))
            found += self._after_prefill(seen, transfer)
        self.violations += found
        return found

    def _headers(self, headers: Mapping[str, str]) -> list[Violation]:
        found = []
        if not headers.get("x-request-id"):
            found.append(Violation("x-request-id", "no X-Request-Id header", True))
        auth = headers.get("authorization")
        expected = f"Bearer {self.api_key}" if self.api_key else None
        if auth != expected:
            found.append(Violation("authorization", f"Authorization {auth!r}, expected {expected!r}", True))
        return found

    def _dp_rank(self, engine: FakeEngine, headers: Mapping[str, str]) -> list[Violation]:
        rank = headers.get("x-data-parallel-rank")
        if engine.dp == 1:
            return [] if rank is None else [Violation("dp-rank", "X-data-parallel-rank without DP", False)]
        if rank is None or not rank.isdigit() or int(rank) >= engine.dp:
            return [Violation("dp-rank", f"X-data-parallel-rank {rank!r} for {engine.dp} ranks", True)]
        return []

    def _after_prefill(self, seen: Seen, transfer: Answered | None) -> list[Violation]:
        """Sequential dispatch: a decode leg only for a transfer whose prefill already answered 2xx."""
        if transfer is None:
            return [Violation("decode-before-prefill", "decode leg for a transfer not prefilled", True)]
        if transfer.request_id != seen.headers.get("x-request-id"):
            return [Violation("request-id-differs", "legs carry different X-Request-Id values", False)]
        return []


@dataclass(frozen=True)
class Answered:
    request_id: str
    bootstrap_addr: str
    dp_rank: int


class FakeEngine:
    """One vLLM engine as an ASGI app. Knobs say how it misbehaves; `seen` records every completion."""

    def __init__(self, world: World, role: str, index: int) -> None:
        self.world, self.role, self.name = world, role, f"{role}{index}"
        self.generation = 1
        self.dp = 1  # data-parallel ranks behind this engine's API server
        self.up = True  # False while its server is stopped
        self.healthy = True
        self.url = self.bootstrap_addr = ""  # set when served
        self.seen: list[Seen] = []
        self.control: list[Seen] = []  # every other request: /health, /v1/models, and /query of its bootstrap
        self.sent: list[bytes] = []  # body bytes of the last completion answer
        self.fail: tuple[int, bytes] | None = None  # (status, body) answered instead, e.g. (200, b"junk")
        self.drip: float | None = None  # seconds between the bytes of a whole answer, sent one by one
        self.health_drip = self.query_drip = False  # /health, /query: a 200 whose body never ends
        self.query_body: bytes | None = None  # /query answers this instead
        self.finish_reason = "length"
        self.cache_stats = {"num_vllm_cached_tokens": 16, "num_lmcache_cached_tokens": 48}
        self.chunks: int | None = 3  # streamed chunks before [DONE]; None: until the client leaves
        self.pad = 0  # bytes added to each streamed chunk
        self.die_after: int | None = None  # drop the connection after this many chunks
        self.stall_after: int | None = None  # stop sending (stay connected) after this many chunks
        self.stall = False  # answer nothing until released or the client leaves
        self.released = asyncio.Event()
        self.disconnected = asyncio.Event()

    @property
    def engine_id(self) -> str:
        return f"{self.name}-engine-g{self.generation}"

    @property
    def engine_ids(self) -> list[str]:
        """Per data-parallel rank, as vLLM names them."""
        return [self.engine_id] if self.dp == 1 else [f"{self.engine_id}_dp{r}" for r in range(self.dp)]

    def query(self) -> dict:
        addr = {"0": {"0": "tcp://127.0.0.1:17000"}}
        return {
            str(rank): {"engine_id": eid, "worker_addr": addr} for rank, eid in enumerate(self.engine_ids)
        }

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        path = scope["path"]
        if path in ENDPOINTS and scope["method"] == "POST":
            return await self._completion(scope, receive, send)
        self.control.append(Seen(path, _headers(scope), None))
        if path == "/health" and self.health_drip:
            await _drip(send, receive)
        elif path == "/health":
            await _json(send, 200 if self.healthy else 503, {})
        elif path == "/v1/models" and scope["method"] == "GET":
            await _json(send, 200, {"object": "list", "data": [{"id": "fake-model", "object": "model"}]})
        else:
            await _json(send, 404, {"error": {"message": f"{scope['method']} {path}"}})

    async def _completion(self, scope: dict, receive: Any, send: Any) -> None:
        raw = b""
        while True:
            message = await receive()
            raw += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers = _headers(scope)
        seen = Seen(scope["path"], headers, json.loads(raw))
        self.seen.append(seen)
        found = self.world.check(self, seen)
        if any(v.rejects for v in found):  # as real vLLM: a 400 naming the broken rules
            return await _json(send, 400, {"error": {"message": "; ".join(v.message for v in found)}})
        watcher = asyncio.get_running_loop().create_task(self._watch(receive))
        try:
            if self.stall:
                await self._until_released()
            if self.fail is not None:
                await _send_all(send, self.fail[0], [self.fail[1]], b"application/json")
            elif self.drip is not None:
                await self._drip_answer(send)
            elif self.role == "prefill":
                await self._prefill_answer(seen, send)
            else:
                await self._decode_answer(seen, send)
        finally:
            watcher.cancel()

    async def _watch(self, receive: Any) -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        self.disconnected.set()

    async def _until_released(self) -> None:
        gone = asyncio.ensure_future(self.disconnected.wait())
        released = asyncio.ensure_future(self.released.wait())
        await asyncio.wait((gone, released), return_when=asyncio.FIRST_COMPLETED)
        gone.cancel()
        released.cancel()

    async def _drip_answer(self, send: Any) -> None:
        """A valid-looking answer one byte at a time, until it is done or the client leaves."""
        body = json.dumps({"choices": [{"index": 0, "text": "x", "finish_reason": "length"}]}).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        for i in range(len(body)):
            if self.disconnected.is_set():
                return
            await send({"type": "http.response.body", "body": body[i : i + 1], "more_body": True})
            await asyncio.sleep(self.drip)
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _prefill_answer(self, seen: Seen, send: Any) -> None:
        answer: dict[str, Any] = {
            "id": "cmpl-prefill",
            "choices": [
                {
                    "index": 0,
                    "text": "x",
                    "message": {"role": "assistant", "content": "x"},
                    "finish_reason": self.finish_reason,
                }
            ],
            "usage": {"prompt_tokens": 64, "completion_tokens": 1, "total_tokens": 65},
        }
        if "cached_token_stats" in seen.body["kv_transfer_params"]:
            answer["kv_transfer_params"] = {"cached_token_stats": self.cache_stats}
        if self.finish_reason == "length":  # vLLM keeps the KV for transfer only then
            rank = int(seen.headers.get("x-data-parallel-rank", 0))
            transfer = Answered(seen.headers["x-request-id"], self.bootstrap_addr, rank)
            self.world.answered[seen.body["kv_transfer_params"]["transfer_id"]] = transfer
        await _send_all(send, 200, [json.dumps(answer).encode()], b"application/json")

    async def _decode_answer(self, seen: Seen, send: Any) -> None:
        if not seen.body.get("stream"):
            body = {
                "id": "cmpl-decode",
                "choices": [{"index": 0, "text": "decoded", "finish_reason": "stop"}],
            }
            self.sent = [json.dumps(body).encode()]
            if self.die_after is not None:  # headers and half an answer, then the connection drops
                await send({"type": "http.response.start", "status": 200, "headers": []})
                await send({"type": "http.response.body", "body": self.sent[0][:10], "more_body": True})
                raise ConnectionAbortedError("fake decode dies while answering")
            return await _send_all(send, 200, self.sent, b"application/json")
        self.sent = []
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"text/event-stream")],
            }
        )
        i = 0
        while not self.disconnected.is_set() and (self.chunks is None or i < self.chunks):
            if i == self.die_after:
                raise ConnectionAbortedError("fake decode dies mid-stream")  # server drops the connection
            if i == self.stall_after:
                await self._until_released()
            text = b"t%d" % i + b"x" * self.pad
            chunk = b'data: {"choices":[{"index":0,"delta":{"content":"%s"}}]}\n\n' % text
            self.sent.append(chunk)
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
            i += 1
            await asyncio.sleep(0.001 if self.chunks is None else 0)
        self.sent.append(b"data: [DONE]\n\n")
        await send({"type": "http.response.body", "body": self.sent[-1], "more_body": False})


class FakeBootstrap:
    """The Mooncake bootstrap server of one prefill engine: GET /query."""

    def __init__(self, engine: FakeEngine) -> None:
        self.engine = engine

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        engine = self.engine
        engine.control.append(Seen(scope["path"], _headers(scope), None))
        if scope["path"] != "/query":
            await _json(send, 404, {})
        elif engine.query_drip:
            await _drip(send, receive)
        elif engine.query_body is not None:
            await _send_all(send, 200, [engine.query_body], b"application/json")
        else:
            await _json(send, 200, engine.query())


def _headers(scope: dict) -> dict[str, str]:
    return {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}


async def _drip(send: Any, receive: Any) -> None:
    """A 200 whose JSON body never ends: a byte every 10 ms (each one resets a per-read timeout),
    until the client goes away."""
    gone = asyncio.ensure_future(_until_gone(receive))
    try:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"[", "more_body": True})
        while not gone.done():
            await send({"type": "http.response.body", "body": b" ", "more_body": True})
            await asyncio.sleep(0.01)
    finally:
        gone.cancel()


async def _until_gone(receive: Any) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


async def _json(send: Any, status: int, doc: Any) -> None:
    await _send_all(send, status, [json.dumps(doc).encode()], b"application/json")


async def _send_all(send: Any, status: int, parts: list[bytes], content_type: bytes) -> None:
    await send(
        {"type": "http.response.start", "status": status, "headers": [(b"content-type", content_type)]}
    )
    await send({"type": "http.response.body", "body": b"".join(parts), "more_body": False})
