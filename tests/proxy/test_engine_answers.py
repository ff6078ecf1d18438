"""Engines (or whatever answers on their ports) are bounded and checked: a prefill answer that is not
one is a 502 naming the engine, and every wait on an engine is a deadline, not a per-read timeout."""

from __future__ import annotations

import asyncio
import time

import pytest

from proxy.backends import SLOW_CHECKS
from tests.proxy.harness import WAIT, running, until

pytestmark = pytest.mark.anyio

CHAT = "/v1/chat/completions"
BODY = {"model": "fake-model", "messages": [{"role": "user", "content": "hello"}]}

PREFILL_ANSWERS = {
    "html": ((200, b"<html>bad gateway</html>"), "answered 2xx with a body that is not JSON"),
    "truncated": ((200, b'{"choices": [{"finish_reason": "len'), "answered 2xx with a body that is not JSON"),
    "empty": ((200, b""), "answered 2xx with a body that is not JSON"),
    "no-content": ((204, b""), "answered 2xx with a body that is not JSON"),
    "array": ((200, b'[{"finish_reason": "length"}]'), "answered 2xx with JSON that is not an object"),
    "number": ((200, b"1"), "answered 2xx with JSON that is not an object"),
    "no-choices": ((200, b'{"id": "cmpl-1"}'), "answered without choices[0].finish_reason"),
    "null-finish": (
        (200, b'{"choices": [{"finish_reason": null}]}'),
        "answered without choices[0].finish_reason",
    ),
    "redirect": ((302, b""), "answered HTTP 302"),
    "too-large": ((200, b'{"choices": [], "pad": "' + b"x" * 5000 + b'"}'), "answered more than 4096 bytes"),
    "too-large-error": ((500, b"x" * 5000), "answered more than 4096 bytes"),
}


@pytest.mark.parametrize(("answer", "problem"), PREFILL_ANSWERS.values(), ids=PREFILL_ANSWERS.keys())
async def test_a_prefill_answer_that_is_not_one_is_a_502_and_no_decode(answer, problem):
    async with running(1, 1, limits={"answer_bytes": 4096}) as c:
        c.prefill[0].fail = answer
        response = await c.client.post(CHAT, json=BODY)
        assert response.status_code == 502, response.text
        error = response.json()["error"]
        assert (error["type"], error["code"]) == ("bad_answer", 502)
        assert error["message"] == f"prefill leg: prefill {c.prefill[0].url} {problem}"
        assert c.served("decode") == []
        assert (await c.metrics())['proxy_errors_total{leg="prefill",kind="bad_answer"}'] == 1


async def test_a_decode_answer_over_the_limit_is_a_502():
    async with running(1, 1, limits={"answer_bytes": 4096}) as c:
        c.decode[0].fail = (200, b"x" * 5000)
        response = await c.client.post(CHAT, json=BODY)
        assert response.status_code == 502
        assert response.json()["error"]["message"].endswith("answered more than 4096 bytes")


async def test_the_prefill_timeout_is_a_deadline_for_the_whole_leg():
    """A prefill dripping its answer a byte at a time used to hold the client for as long as it dripped
    (each byte reset a per-read timeout: 25 s with --prefill-timeout 3)."""
    async with running(1, 1, http=True, timeouts={"prefill": 0.3}) as c:
        c.prefill[0].drip = 0.05  # its ~80-byte answer would take 4 s
        start = time.monotonic()
        response = await c.client.post(CHAT, json=BODY)
        elapsed = time.monotonic() - start
        assert response.status_code == 504
        assert response.json()["error"]["message"] == "prefill leg: no prefill answer within 0.3 s"
        assert 0.3 <= elapsed < 2.0
        await asyncio.wait_for(c.prefill[0].disconnected.wait(), WAIT)  # the prefill request was closed
        assert c.served("decode") == []


async def test_a_non_streamed_decode_has_a_deadline_for_the_whole_answer():
    async with running(1, 1, http=True, timeouts={"decode_total": 0.3}) as c:
        c.decode[0].drip = 0.05
        start = time.monotonic()
        response = await c.client.post(CHAT, json=BODY)
        assert response.status_code == 504
        assert response.json()["error"]["message"] == "decode leg: no decode answer within 0.3 s"
        assert time.monotonic() - start < 2.0
        await asyncio.wait_for(c.decode[0].disconnected.wait(), WAIT)


@pytest.mark.parametrize("where", ["query", "health"])
async def test_a_dripping_check_answer_holds_up_no_other_check(where):
    """Each check is a deadline of its own: one engine answering forever must not freeze the health of
    the others (all checks of a round are awaited together)."""
    async with running(2, 1, http=True, timeouts={"health": 0.3}) as c:
        setattr(c.prefill[0], f"{where}_drip", True)
        if where == "query":  # its engine ids cannot be read: out of rotation after SLOW_CHECKS, saying why
            doc = await c.wait_health(1, 1)
            want = f"no health answer within 0.3 s ({SLOW_CHECKS} checks in a row)"
            assert doc["backends"][0]["problem"] == want
        c.decode[0].healthy = False  # the other checks go on: this change is seen
        await c.wait_health(1 if where == "query" else 2, 0)
        await until(lambda: len([s for s in c.prefill[1].control if s.path == "/query"]) > 3, "more checks")
