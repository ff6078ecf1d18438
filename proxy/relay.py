"""One completion request: prefill leg, then decode leg, decode bytes relayed to the client."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx
import msgspec

from proxy import mooncake
from proxy.asgi import JSON, SSE, Message, Receive, Reply, Send, read_body
from proxy.backends import Pick, Pool, affinity_key, set_down
from proxy.errors import (
    NOT_DELIVERED,
    BadRequest,
    ClientGone,
    NoBackend,
    PrefillUnusable,
    UpstreamStatus,
    classify,
    describe,
    envelope,
    sse_error,
)
from proxy.guard import Guard
from proxy.runtime import Runtime

log = logging.getLogger("proxy")
T = TypeVar("T")
MAX_BODY = 64 << 20  # far above a 256k-token prompt as JSON; bounds memory per request


@dataclass
class Call:
    path: str
    body: dict[str, Any]
    stream: bool
    request_id: bytes
    transfer_id: str
    key: bytes | None
    received: float  # perf_counter when the body was parsed
    leg: str = "prefill"
    prefill_seconds: float = 0.0


async def relay(rt: Runtime, scope: Message, receive: Receive, send: Send) -> None:
    rt.metrics.requests[scope["path"]] += 1
    headers = dict(scope["headers"])
    reply = Reply(send, headers.get(b"x-request-id") or uuid.uuid4().hex.encode())
    try:
        call = await _read_call(rt, scope, receive, headers, reply.request_id)
    except (BadRequest, ClientGone) as exc:  # TooLarge is a BadRequest
        return await _fail(rt, reply, "client", exc)
    rt.metrics.in_flight += 1
    guard = Guard(receive)
    error: BaseException | None = None
    try:
        await _exchange(rt, call, reply, guard)
    except asyncio.CancelledError:
        if guard.reason is None:
            raise
        guard.settle()
        error = guard.reason
    except Exception as exc:
        error = exc
    finally:
        guard.close()
        rt.metrics.in_flight -= 1
    if error is not None:
        await _fail(rt, reply, call.leg, error)


async def _read_call(rt: Runtime, scope: Message, receive: Receive, headers: dict, request_id: bytes) -> Call:
    raw = await read_body(receive, MAX_BODY)
    try:
        body = msgspec.json.decode(raw)
    except msgspec.DecodeError as exc:
        raise BadRequest(f"request body is not JSON: {exc}") from None
    if not isinstance(body, dict):
        raise BadRequest("request body must be a JSON object")
    config = rt.config
    key = None
    if config.policy == "affinity":
        key = affinity_key(body, headers.get(config.session_header.encode()), config.affinity_chars)
    return Call(
        path=scope["path"],
        body=body,
        stream=body.get("stream") is True,
        request_id=request_id,
        transfer_id=mooncake.new_transfer_id(),
        key=key,
        received=time.perf_counter(),
    )


async def _exchange(rt: Runtime, call: Call, reply: Reply, guard: Guard) -> None:
    # Without a decode engine the prefill would only pin KV blocks until the Mooncake abort timeout.
    if not rt.backends.decode.healthy:
        call.leg = "decode"
        raise NoBackend("no healthy decode engine")
    prefill = await _with_failover(rt.backends.prefill, call.key, lambda p: _prefill(rt, call, p))
    call.leg = "decode"
    await _with_failover(rt.backends.decode, None, lambda d: _decode(rt, call, reply, guard, prefill, d))


async def _with_failover(pool: Pool, key: bytes | None, run: Callable[[Pick], Awaitable[T]]) -> T:
    """Runs a leg on the chosen engine. One that refuses the connection never saw the request: it
    leaves rotation at once and the next choice gets the request."""
    tried = []
    while True:
        pick = pool.pick(key, tried)
        pick.backend.outstanding += 1
        try:
            return await run(pick)
        except NOT_DELIVERED as exc:
            set_down(pick.backend, describe(exc))
            tried.append(pick.backend)
            if not any(b.healthy and b not in tried for b in pool.backends):
                raise
        finally:
            pick.backend.outstanding -= 1


def _headers(call: Call, pick: Pick) -> list[tuple[bytes, bytes]]:
    headers = [(b"x-request-id", call.request_id)]
    if len(pick.backend.engine_ids) > 1:  # only with data parallelism
        headers.append((b"x-data-parallel-rank", b"%d" % pick.dp_rank))
    return headers


async def _prefill(rt: Runtime, call: Call, pick: Pick) -> Pick:
    body = msgspec.json.encode(mooncake.prefill_body(call.body, call.transfer_id))
    start = time.perf_counter()
    response = await rt.clients.prefill.post(pick.backend.url + call.path, body, _headers(call, pick))
    try:
        content = await response.aread()
    finally:
        await response.aclose()
    call.prefill_seconds = time.perf_counter() - start
    rt.metrics.prefill_seconds.observe(call.prefill_seconds)
    if not 200 <= response.status_code < 300:
        raise UpstreamStatus(response.status_code, content, _content_type(response.headers, JSON))
    try:
        answer = msgspec.json.decode(content)
    except msgspec.DecodeError:
        answer = None  # the answer is only read for statistics and the finish check
    reason = mooncake.prefill_finish_reason(answer)
    if reason not in (None, "length"):
        raise PrefillUnusable(
            f"prefill finished by {reason!r}, not by the length cap, so vLLM keeps no KV "
            "to transfer and a decode would wait for the Mooncake abort timeout"
        )
    usage = answer.get("usage") if isinstance(answer, dict) else None
    prompt_tokens = usage.get("prompt_tokens") if isinstance(usage, dict) else None
    rt.metrics.prefill_answer(pick.backend.url, prompt_tokens, mooncake.cached_token_stats(answer))
    return pick


async def _decode(rt: Runtime, call: Call, reply: Reply, guard: Guard, prefill: Pick, decode: Pick) -> None:
    body = mooncake.decode_body(
        call.body,
        transfer_id=call.transfer_id,
        engine_id=prefill.engine_id,
        bootstrap_addr=prefill.backend.bootstrap_addr or "",
    )
    content = msgspec.json.encode(body)
    start = time.perf_counter()
    # Server-Timing lets a benchmark split added latency into prefill and the proxy's own work.
    timing = b"prefill;dur=%.3f, proxy;dur=%.3f" % (
        1000 * call.prefill_seconds,
        1000 * (start - call.received - call.prefill_seconds),
    )
    if call.stream:
        guard.expect_within(rt.config.timeouts.decode_first_byte, "first decode byte")
    response = await rt.clients.decode.post(
        decode.backend.url + call.path,
        content,
        _headers(call, decode),
        rt.stream_timeout if call.stream else None,
    )
    try:
        if not 200 <= response.status_code < 300:
            raise UpstreamStatus(
                response.status_code, await response.aread(), _content_type(response.headers, JSON)
            )
        if call.stream:
            await _stream(rt, response, reply, guard, start, [(b"server-timing", timing)])
        else:  # vLLM sends a non-streamed answer in one piece when it is done
            data = await response.aread()
            rt.metrics.decode_first_byte_seconds.observe(time.perf_counter() - start)
            await reply.whole(
                response.status_code,
                data,
                _content_type(response.headers, JSON),
                [(b"server-timing", timing)],
            )
    finally:
        await response.aclose()
        rt.metrics.decode_seconds.observe(time.perf_counter() - start)


async def _stream(
    rt: Runtime, response: httpx.Response, reply: Reply, guard: Guard, start: float, headers: list
) -> None:
    await reply.start(response.status_code, SSE, headers)
    chunks = size = 0
    try:
        async for chunk in response.stream:  # type: ignore[union-attr]  # the bytes as they come
            if chunks:
                guard.touch()
            else:
                rt.metrics.decode_first_byte_seconds.observe(time.perf_counter() - start)
                guard.expect_within(rt.config.timeouts.decode_idle, "decode chunk")
            chunks += 1
            size += len(chunk)
            await reply.chunk(chunk)
        await reply.end()
    finally:
        rt.metrics.stream_chunks += chunks
        rt.metrics.stream_bytes += size


def _content_type(headers: Any, default: bytes) -> bytes:
    value = headers.get("content-type")
    return value.encode("latin-1") if value else default


async def _fail(rt: Runtime, reply: Reply, leg: str, exc: BaseException) -> None:
    """Count, log one line, and tell the client in the one envelope (or as an SSE event if streaming)."""
    if reply.finished:  # e.g. the disconnect watcher waking as the response completes
        return
    status, kind = classify(exc)
    rt.metrics.errors[leg, kind] += 1
    rid = reply.request_id.decode("latin-1")
    if isinstance(exc, ClientGone):
        log.info("request %s: %s during the %s leg", rid, describe(exc), leg)
        return
    # A traceback only helps with the proxy's own bugs, and only when asked for.
    log.warning(
        "request %s: %s leg failed: %s",
        rid,
        leg,
        describe(exc),
        exc_info=kind == "internal" and log.isEnabledFor(logging.DEBUG),
    )
    message = f"{leg} leg: {describe(exc)}"
    if reply.started:
        await reply.end(sse_error(status, kind, message))
    elif isinstance(exc, UpstreamStatus):
        await reply.whole(exc.status, exc.body, exc.content_type)
    else:
        await reply.whole(status, envelope(status, kind, message), JSON)
