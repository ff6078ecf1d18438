"""Failures on either leg and on the client side, over real loopback HTTP where streaming matters."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from tests.proxy.harness import WAIT, running, until

pytestmark = pytest.mark.anyio

CHAT = "/v1/chat/completions"
BODY = {"model": "fake-model", "messages": [{"role": "user", "content": "hello"}]}
STREAM = {**BODY, "stream": True}


def error_of(text: str) -> dict:
    return json.loads(text)["error"]


@pytest.mark.parametrize(
    ("status", "body", "stream", "http"),
    [
        (400, b'{"error": {"message": "prompt too long"}}', False, False),
        (400, b'{"error": {"message": "min_tokens"}}', True, False),
        (500, b'{"error": "engine"}', False, False),
        (503, b"busy", True, False),
        (500, b'{"error": "engine"}', True, True),
    ],
)
async def test_prefill_failure_is_returned_at_once_and_no_decode_leg(status, body, stream, http):
    async with running(2, 1, http=http, timeouts={"decode_first_byte": 30.0}) as c:
        for engine in c.prefill:
            engine.fail = (status, body)
        start = time.monotonic()
        response = await c.client.post(CHAT, json={**BODY, "stream": stream})
        assert time.monotonic() - start < 1.0  # sequential dispatch: nothing waits on the decode side
        assert (response.status_code, response.content) == (status, body)
        assert response.headers["content-type"] == "application/json"
        assert c.served("prefill") and c.served("decode") == []
        metrics = await c.metrics()
        assert metrics['proxy_errors_total{leg="prefill",kind="upstream_status"}'] == 1


async def test_prefill_stopping_early_ends_the_request_without_decode():
    async with running(1, 1) as c:
        c.prefill[0].finish_reason = "stop"  # vLLM then drops the transfer: a decode leg would hang
        response = await c.client.post(CHAT, json=BODY)
        assert response.status_code == 502
        assert error_of(response.text)["type"] == "prefill_finish"
        assert c.served("decode") == []


async def test_decode_failure_status_is_returned():
    async with running(1, 1) as c:
        c.decode[0].fail = (400, b'{"error": {"message": "bad"}}')
        response = await c.client.post(CHAT, json=STREAM)
        assert (response.status_code, response.content) == (400, b'{"error": {"message": "bad"}}')


async def test_stream_is_relayed_as_it_comes():
    async with running(1, 1, http=True) as c:
        c.decode[0].stall_after = 1
        async with c.client.stream("POST", CHAT, json=STREAM) as response:
            chunks = response.aiter_raw()
            assert await chunks.__anext__() == c.decode[0].sent[0]  # while the decode still holds the rest
            c.decode[0].released.set()
            rest = b"".join([chunk async for chunk in chunks])
        assert rest == b"".join(c.decode[0].sent[1:])


async def test_decode_dying_mid_stream_ends_with_an_sse_error_event():
    async with running(1, 1, http=True) as c:
        c.decode[0].die_after = 2
        response = await c.client.post(CHAT, json=STREAM)
        assert response.status_code == 200
        relayed, _, last = response.content.rpartition(b"data: ")
        assert relayed == b"".join(c.decode[0].sent)  # both chunks, then no [DONE]
        assert last.endswith(b"\n\n")
        assert error_of(last) == {
            "message": error_of(last)["message"],
            "type": "upstream_broken",
            "code": 502,
        }
        assert (await c.metrics())['proxy_errors_total{leg="decode",kind="upstream_broken"}'] == 1


async def test_decode_dying_before_a_whole_answer_is_a_502():
    async with running(1, 1, http=True) as c:
        c.decode[0].die_after = 0
        response = await c.client.post(CHAT, json=BODY)
        assert response.status_code == 502
        assert error_of(response.text)["type"] == "upstream_broken"


async def test_decode_first_byte_deadline():
    async with running(1, 1, http=True, timeouts={"decode_first_byte": 0.2}) as c:
        c.decode[0].stall = True  # e.g. the KV never arrives
        response = await c.client.post(CHAT, json=STREAM)
        assert response.status_code == 504
        assert "no first decode byte within 0.2 s" in error_of(response.text)["message"]
        await asyncio.wait_for(c.decode[0].disconnected.wait(), WAIT)  # the upstream request was closed


async def test_decode_idle_deadline():
    async with running(1, 1, http=True, timeouts={"decode_idle": 0.2}) as c:
        c.decode[0].stall_after = 1
        response = await c.client.post(CHAT, json=STREAM)
        assert response.status_code == 200
        first, _, last = response.content.rpartition(b"data: ")
        assert first == c.decode[0].sent[0]
        assert error_of(last)["code"] == 504 and "no decode chunk within 0.2 s" in error_of(last)["message"]
        await asyncio.wait_for(c.decode[0].disconnected.wait(), WAIT)


async def test_client_disconnect_mid_stream_closes_the_decode_request():
    async with running(1, 1, http=True) as c:
        c.decode[0].chunks = None  # streams until the proxy goes away
        async with c.client.stream("POST", CHAT, json=STREAM) as response:
            await response.aiter_raw().__anext__()
        await asyncio.wait_for(c.decode[0].disconnected.wait(), WAIT)
        await until_metric(c, 'proxy_errors_total{leg="decode",kind="client_disconnect"}', 1)
        assert (await c.metrics())["proxy_in_flight"] == 0


async def test_client_disconnect_during_prefill_closes_it_and_skips_decode():
    async with running(1, 1, http=True) as c:
        c.prefill[0].stall = True
        request = asyncio.ensure_future(c.client.post(CHAT, json=BODY))
        await until(lambda: c.prefill[0].seen, "the prefill leg")
        request.cancel()
        await asyncio.wait_for(c.prefill[0].disconnected.wait(), WAIT)
        await until_metric(c, 'proxy_errors_total{leg="prefill",kind="client_disconnect"}', 1)
        assert c.served("decode") == []


async def test_no_healthy_decode_means_no_prefill_either():
    async with running(1, 1) as c:
        c.decode[0].healthy = False
        await c.wait_health(1, 0)
        response = await c.client.post(CHAT, json=BODY)
        assert response.status_code == 503
        assert error_of(response.text) == {
            "message": "decode leg: no healthy decode engine",
            "type": "no_backend",
            "code": 503,
        }
        assert c.served("prefill") == []


async def test_refused_connection_fails_over_and_leaves_rotation():
    # Health checks too rare to notice: only the refused connection can take the engine out.
    async with running(2, 1, health_interval=600.0) as c:
        await c.stop(c.prefill[0])
        for i in range(8):
            response = await c.client.post(CHAT, json=BODY, headers={"X-Session-ID": f"s{i}"})
            assert response.status_code == 200
        assert c.served("prefill") == ["prefill1"] * 8
        status, doc = await c.health()
        assert (status, doc["prefill"]) == (200, {"healthy": 1, "total": 2})
        assert "connection refused" in doc["backends"][0]["problem"]


async def until_metric(c, name: str, value: float) -> None:
    deadline = time.monotonic() + WAIT
    while (await c.metrics()).get(name) != value:
        assert time.monotonic() < deadline, f"{name} never reached {value}"
        await asyncio.sleep(0.005)


async def test_upstream_pool_is_bounded_by_max_concurrency():
    async with running(1, 1, http=True, max_concurrency=1, timeouts={"pool": 0.2}) as c:
        c.decode[0].stall = True
        first = asyncio.ensure_future(c.client.post(CHAT, json=BODY))
        await until(lambda: c.served("decode"), "first decode leg")
        response = await c.client.post(CHAT, json=BODY)  # its decode leg finds no free connection
        assert response.status_code == 503 and error_of(response.text)["type"] == "pool_exhausted"
        c.decode[0].released.set()
        assert (await first).status_code == 200


async def test_request_body_size_is_bounded():
    async with running(1, 1, limits={"body_bytes": 100}) as c:
        response = await c.client.post(
            CHAT, json={**BODY, "messages": [{"role": "user", "content": "x" * 200}]}
        )
        assert (response.status_code, error_of(response.text)["type"]) == (413, "too_large")
        assert c.served("prefill") == []
