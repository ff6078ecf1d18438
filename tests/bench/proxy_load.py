"""The load generator of the proxy benchmark: streaming chat requests at a fixed concurrency over raw
asyncio HTTP/1.1 keep-alive connections (one per concurrent stream), so that the client costs a few
microseconds per SSE chunk and is never what limits a run."""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections import Counter
from dataclasses import dataclass, field

from tests.bench.proxy_stack import MODEL, self_cpu

DONE = b"data: [DONE]\n\n"
ERROR_EVENT = b'data: {"error"'
CONNECT_AT_ONCE = 128  # below any listen backlog, so no SYN is dropped while connections open


@dataclass(frozen=True)
class Workload:
    """Token counts per request: prompt words (one simulator token each) and max_tokens."""

    prompt_min: int = 256
    prompt_max: int = 1536
    output_min: int = 32
    output_max: int = 128
    seed: int = 1


def build_requests(
    work: Workload, count: int, host: str, *, model: str = MODEL, extra: dict | None = None
) -> list[bytes]:
    """`count` distinct streaming chat requests, as bytes on the wire (same set for every target,
    only the Host header differs; the engines and both routers ignore it). `extra`: more body fields
    (a real engine's `ignore_eos`, so every answer is as long as asked)."""
    rng = random.Random(work.seed)
    vocab = [f"{rng.choice('abcdefghijklmnopqrstuvwxyz')}{n:x}" for n in range(4096)]
    words = rng.choices(vocab, k=work.prompt_max * 64)
    system = "You are a coding agent. Answer with the smallest correct patch and explain it briefly."
    out = []
    for i in range(count):
        length = rng.randint(work.prompt_min, work.prompt_max) - len(system.split()) - 3
        start = rng.randrange(len(words) - length)
        body = {
            "model": model,
            "messages": [
                {"role": "system", "content": system},
                {"role": "user", "content": f"task {i}: " + " ".join(words[start : start + length])},
            ],
            "max_tokens": rng.randint(work.output_min, work.output_max),
            "stream": True,
            "stream_options": {"include_usage": True},
            **(extra or {}),
        }
        data = json.dumps(body, separators=(",", ":")).encode()
        head = (
            f"POST /v1/chat/completions HTTP/1.1\r\nhost: {host}\r\ncontent-type: application/json\r\n"
            f"accept: text/event-stream\r\ncontent-length: {len(data)}\r\n\r\n"
        ).encode()
        out.append(head + data)
    return out


def _server_timing(head: bytes) -> tuple[float, float] | None:
    """`server-timing: prefill;dur=X, proxy;dur=Y` (our proxy's split of its added latency)."""
    at = head.find(b"\r\nserver-timing:")
    if at < 0:
        return None
    end = head.find(b"\r\n", at + 2)
    try:
        parts = head[at + 17 : end if end > 0 else None].split(b",")
        durations = dict(part.strip().split(b";dur=", 1) for part in parts)
        return float(durations[b"prefill"]), float(durations[b"proxy"])
    except (KeyError, ValueError):
        return None


class Conn(asyncio.Protocol):
    """One keep-alive connection carrying one request at a time; de-chunks the response body."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.dead = False
        self._fut: asyncio.Future | None = None
        self._buf = bytearray()
        self._head = True
        self._chunked = False
        self._length = 0
        self.status = 0
        self.close = False
        self.parts: list[bytes] = []
        self.first = 0.0
        self.timing: tuple[float, float] | None = None  # our proxy's Server-Timing: prefill, proxy (ms)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self.dead = True
        if self._fut is not None and not self._fut.done():
            self._fut.set_exception(ConnectionError(f"connection lost: {exc}"))

    def request(self, data: bytes) -> asyncio.Future:
        assert self.transport is not None
        self._buf.clear()
        self._head, self.status, self.close, self.parts, self.first = True, 0, False, [], 0.0
        self.timing = None
        self._fut = asyncio.get_running_loop().create_future()
        self.transport.write(data)
        return self._fut

    def data_received(self, data: bytes) -> None:
        if self._fut is None or self._fut.done():
            return  # nothing asked: a late byte of a response already judged
        buf = self._buf
        buf += data
        if self._head:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = bytes(buf[:end]).lower()
            del buf[: end + 4]
            self._head = False
            self.status = int(head[9:12])
            self.close = b"\r\nconnection: close" in head
            self._chunked = b"\r\ntransfer-encoding: chunked" in head
            self.timing = _server_timing(head)
            at = head.find(b"\r\ncontent-length:")
            if at >= 0:
                stop = head.find(b"\r\n", at + 2)
                self._length = int(head[at + 17 : stop if stop >= 0 else None])
            else:
                self._length = 0
        if self._chunked:
            self._dechunk(buf)
        elif len(buf) >= self._length:
            self.parts.append(bytes(buf[: self._length]))
            self.first = self.first or time.perf_counter()
            self._fut.set_result(None)

    def _dechunk(self, buf: bytearray) -> None:
        pos = 0
        while True:
            eol = buf.find(b"\r\n", pos)
            if eol < 0:
                break
            size = int(buf[pos:eol].split(b";", 1)[0], 16)
            if size == 0:
                if len(buf) >= eol + 4:  # no trailers: the last chunk, then an empty line
                    assert self._fut is not None
                    self._fut.set_result(None)
                break
            end = eol + 2 + size
            if len(buf) < end + 2:
                break
            if not self.first:
                self.first = time.perf_counter()  # first SSE event: role + first token from the sim
            self.parts.append(bytes(buf[eol + 2 : end]))
            pos = end + 2
        if pos:
            del buf[:pos]


@dataclass
class Result:
    """One run: a target at one concurrency."""

    target: str
    concurrency: int
    requests: int
    wall: float = 0.0
    client_cpu: float = 0.0
    ok: int = 0
    # Seconds, successful requests after the first wave: the `concurrency` requests sent at once at the
    # start measure a thundering herd and connection set-up, not routing; theirs are kept apart.
    ttft: list[float] = field(default_factory=list)
    e2e: list[float] = field(default_factory=list)
    first_wave_ttft: list[float] = field(default_factory=list)
    server_timing: list[tuple[float, float]] = field(default_factory=list)  # after the first wave
    events: int = 0  # SSE `data:` events received in successful streams ([DONE] included)
    errors: Counter[str] = field(default_factory=Counter)
    error_sample: str = ""


async def _connect(host: str, port: int, gate: asyncio.Semaphore) -> Conn:
    async with gate:
        _, conn = await asyncio.get_running_loop().create_connection(Conn, host, port)
    return conn


async def run(
    target: str, addrs: list[tuple[str, int]], requests: list[bytes], concurrency: int, timeout: float
) -> Result:
    """Sends every request with `concurrency` streams open at once, stream i to addrs[i % len(addrs)];
    counts, never raises for a request."""
    result = Result(target, concurrency, len(requests))
    gate = asyncio.Semaphore(CONNECT_AT_ONCE)
    where = [addrs[i % len(addrs)] for i in range(concurrency)]
    conns = await asyncio.gather(*(_connect(*addr, gate) for addr in where))
    queue = iter(range(len(requests)))
    cpu0, t0 = self_cpu(), time.perf_counter()
    tasks = [
        asyncio.ensure_future(_worker(c, addr, gate, requests, queue, result))
        for c, addr in zip(conns, where, strict=True)
    ]
    done, pending = await asyncio.wait(tasks, timeout=timeout)
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    result.wall = time.perf_counter() - t0
    result.client_cpu = self_cpu() - cpu0
    for task in done:
        if task.exception() is not None:
            result.errors[f"client bug: {task.exception()!r}"] += 1
    missing = len(requests) - result.ok - sum(result.errors.values())
    if missing:
        result.errors[f"no answer within {timeout:g} s"] += missing
    for c in conns:
        if c.transport is not None:
            c.transport.close()
    return result


async def _worker(conn, addr, gate, requests, queue, result: Result) -> None:
    for i in queue:
        if conn is None or conn.dead:
            try:
                conn = await _connect(*addr, gate)
            except OSError as exc:
                result.errors[f"connect: {type(exc).__name__}"] += 1
                conn = None
                continue
        start = time.perf_counter()
        try:
            await conn.request(requests[i])
        except ConnectionError:
            result.errors["connection lost"] += 1
            conn = None
            continue
        end = time.perf_counter()
        body = b"".join(conn.parts)
        if conn.status != 200:
            _error(result, f"HTTP {conn.status}", body)
        elif not body.endswith(DONE) or ERROR_EVENT in body:
            _error(result, "stream ended in error", body)
        else:
            result.ok += 1
            result.events += body.count(b"data: ")
            if i < result.concurrency:
                result.first_wave_ttft.append(conn.first - start)
            else:
                result.ttft.append(conn.first - start)
                result.e2e.append(end - start)
                if conn.timing is not None:
                    result.server_timing.append(conn.timing)
        if conn.close:
            assert conn.transport is not None
            conn.transport.close()
            conn = None


def _error(result: Result, kind: str, body: bytes) -> None:
    result.errors[kind] += 1
    if not result.error_sample:
        result.error_sample = body[-300:].decode("utf-8", "replace")
