"""One completion request: prefill leg, then decode leg, decode bytes relayed to the client."""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx
import msgspec

from proxy import inbound, mooncake, validate
from proxy.asgi import JSON, SSE, Header, Message, Receive, Reply, Send, read_body
from proxy.backends import Backend, Pick, Pool, affinity_key, set_down
from proxy.errors import (
    NOT_DELIVERED,
    BadAnswer,
    BadRequest,
    ClientGone,
    ClientTimeout,
    NoBackend,
    PrefillUnusable,
    ProxyError,
    UpstreamStatus,
    classify,
    describe,
    envelope,
    sse_error,
)
from proxy.guard import Guard
from proxy.runtime import Runtime, read_whole

log = logging.getLogger("proxy")
T = TypeVar("T")
_PRINTABLE = re.compile(r"[ -~]{1,200}")  # an engine's content-type, as a response header may carry it


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
    reply = Reply(send, inbound.request_id(headers.get(b"x-request-id")))
    try:
        call = await _read_call(rt, scope, receive, headers, reply.request_id)
    except (BadRequest, ClientGone, ClientTimeout) as exc:  # TooLarge is a BadRequest
        return await fail(rt, reply, "client", exc)
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
        await fail(rt, reply, call.leg, error)


async def _read_call(
    rt: Runtime, scope: Message, receive: Receive, headers: dict[bytes, bytes], request_id: bytes
) -> Call:
    """The request as vLLM would accept it, or BadRequest before any engine sees it."""
    config = rt.config
    inbound.declared_length(scope["headers"], config.limits.body_bytes)
    raw = await read_body(receive, config.limits.body_bytes, config.timeouts.body)
    body = inbound.parse_object(raw, config.limits.json_depth)
    validate.check(body, scope["path"])
    key = None
    if config.policy == "affinity":
        key = affinity_key(body, headers.get(config.session_header.encode()), config.affinity_chars)
    return Call(
        path=scope["path"],
        body=body,
        stream=validate.streams(body),
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
    # A deadline for the whole leg (nothing touches it): a per-read timeout let a prefill dripping a
    # byte a second hold the client for as long as it dripped.
    guard.expect_within(rt.config.timeouts.prefill, "prefill answer")
    prefill = await _with_failover(rt.backends.prefill, call.key, lambda p: _prefill(rt, call, p))
    call.leg = "decode"
    await _with_failover(rt.backends.decode, None, lambda d: _decode(rt, call, reply, guard, prefill, d))


async def _with_failover(pool: Pool, key: bytes | None, run: Callable[[Pick], Awaitable[T]]) -> T:
    """Runs a leg on the chosen engine. One that refuses the connection never saw the request: it
    leaves rotation at once and the next choice gets the request."""
    tried: list[Backend] = []
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
    who = f"prefill {pick.backend.url}"
    start = time.perf_counter()
    response = await rt.clients.prefill.post(pick.backend.url + call.path, body, _headers(call, pick))
    try:
        content = await read_whole(response, rt.config.limits.answer_bytes, who)
    finally:
        await response.aclose()
    call.prefill_seconds = time.perf_counter() - start
    rt.metrics.prefill_seconds.observe(call.prefill_seconds)
    if not 200 <= response.status_code < 300:
        raise _refusal(response, content, who)
    answer = _json_object(content, who)
    reason = mooncake.prefill_finish_reason(answer)
    if reason is None:
        raise BadAnswer(f"{who} answered without choices[0].finish_reason")
    if reason != "length":
        raise PrefillUnusable(
            f"{who} finished by {reason!r:.40}, not by the length cap, so vLLM keeps no KV "
            "to transfer and a decode would wait for the Mooncake abort timeout"
        )
    usage = answer.get("usage")
    prompt_tokens = usage.get("prompt_tokens") if isinstance(usage, dict) else None
    rt.metrics.prefill_answer(pick.backend.url, prompt_tokens, mooncake.cached_token_stats(answer))
    return pick


def _json_object(content: bytes, who: str) -> dict[str, Any]:
    """A 2xx prefill answer is the proxy's only sign that the KV is kept: anything but a JSON object
    (a proxy's HTML page, a truncated body) is a failure, not a success without statistics."""
    try:
        answer = msgspec.json.decode(content)
    except (ValueError, RecursionError):
        raise BadAnswer(f"{who} answered 2xx with a body that is not JSON") from None
    if not isinstance(answer, dict):
        raise BadAnswer(f"{who} answered 2xx with JSON that is not an object")
    return answer


def _refusal(response: httpx.Response, content: bytes, who: str) -> ProxyError:
    """An engine's 4xx/5xx goes to the client as it is; any other status is no answer at all."""
    if 400 <= response.status_code < 600:
        return UpstreamStatus(response.status_code, content, _content_type(response.headers, JSON), who)
    return BadAnswer(f"{who} answered HTTP {response.status_code}")


async def _decode(rt: Runtime, call: Call, reply: Reply, guard: Guard, prefill: Pick, decode: Pick) -> None:
    body = mooncake.decode_body(
        call.body,
        transfer_id=call.transfer_id,
        engine_id=prefill.engine_id,
        bootstrap_addr=prefill.backend.bootstrap_addr or "",
    )
    content = msgspec.json.encode(body)
    who, limit, t = f"decode {decode.backend.url}", rt.config.limits.answer_bytes, rt.config.timeouts
    start = time.perf_counter()
    # Server-Timing lets a benchmark split added latency into prefill and the proxy's own work.
    timing = b"prefill;dur=%.3f, proxy;dur=%.3f" % (
        1000 * call.prefill_seconds,
        1000 * (start - call.received - call.prefill_seconds),
    )
    if call.stream:
        guard.expect_within(t.decode_first_byte, "first decode byte")
    else:  # a deadline for the whole answer, as for the prefill
        guard.expect_within(t.decode_total, "decode answer")
    response = await rt.clients.decode.post(
        decode.backend.url + call.path,
        content,
        _headers(call, decode),
        rt.stream_timeout if call.stream else None,
    )
    try:
        if not 200 <= response.status_code < 300:
            raise _refusal(response, await read_whole(response, limit, who), who)
        if call.stream:
            await _stream(rt, response, reply, guard, start, [(b"server-timing", timing)])
        else:  # vLLM sends a non-streamed answer in one piece when it is done
            data = await read_whole(response, limit, who)
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
    rt: Runtime, response: httpx.Response, reply: Reply, guard: Guard, start: float, headers: list[Header]
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
    return value.encode("latin-1") if value and _PRINTABLE.fullmatch(value) else default


async def fail(rt: Runtime, reply: Reply, leg: str, exc: BaseException) -> None:
    """Count, log (at a bounded rate), and tell the client in the one envelope (or as an SSE event if
    streaming)."""
    if reply.finished:  # e.g. the disconnect watcher waking as the response completes
        return
    status, kind = classify(exc)
    rt.metrics.errors[leg, kind] += 1
    _log(rt, reply.request_id, leg, kind, exc)
    if isinstance(exc, ClientGone):
        return
    message = f"{leg} leg: {describe(exc)}"
    if reply.started:
        await reply.end(sse_error(status, kind, message))
    elif isinstance(exc, UpstreamStatus):
        await reply.whole(exc.status, exc.body, exc.content_type)
    else:
        headers = exc.headers if isinstance(exc, ProxyError) else ()
        await reply.whole(status, envelope(status, kind, message), JSON, headers)


def _log(rt: Runtime, request_id: bytes, leg: str, kind: str, exc: BaseException) -> None:
    more = rt.throttle.allow((leg, kind))
    if more is None:
        return
    rid = request_id.decode("latin-1")
    if isinstance(exc, ClientGone):
        log.info("request %s: %s during the %s leg%s", rid, describe(exc), leg, more)
        return
    # A traceback only helps with the proxy's own bugs, and only when asked for.
    log.warning(
        "request %s: %s leg failed: %s%s",
        rid,
        leg,
        describe(exc),
        more,
        exc_info=kind == "internal" and log.isEnabledFor(logging.DEBUG),
    )
