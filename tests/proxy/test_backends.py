"""Engine choice (affinity, least-loaded) and health checks, against in-process fake transports."""

from __future__ import annotations

import asyncio
import collections
import json

import httpx
import pytest

from proxy.backends import SLOW_CHECKS, Backend, Pool, affinity_key, check
from proxy.errors import NoBackend

pytestmark = pytest.mark.anyio


def pool(n: int, role: str = "prefill", **state) -> Pool:
    return Pool(
        [Backend(role, f"http://{role}{i}:8000", healthy=True, engine_ids=("e",), **state) for i in range(n)]
    )


def test_least_loaded_prefers_fewest_outstanding_and_spreads_ties():
    p = pool(3)
    p.backends[0].outstanding, p.backends[1].outstanding = 2, 1
    assert p.least_loaded() is p.backends[2]
    p.backends[2].outstanding = 1
    assert {p.least_loaded().url for _ in range(4)} == {p.backends[1].url, p.backends[2].url}


def test_least_loaded_skips_unhealthy_and_excluded():
    p = pool(3)
    p.backends[0].healthy = False
    assert p.least_loaded(exclude=[p.backends[1]]) is p.backends[2]
    with pytest.raises(NoBackend, match="no healthy prefill engine"):
        p.least_loaded(exclude=p.backends[1:])


def test_same_key_same_home_and_keys_spread():
    p = pool(4)
    homes = {affinity: p.pick(affinity).backend for affinity in (b"s:%d" % i for i in range(200))}
    assert all(p.pick(key).backend is home for key, home in homes.items())
    assert min(collections.Counter(b.url for b in homes.values()).values()) > 20


def test_unhealthy_home_falls_back_to_least_loaded_and_comes_back():
    p = pool(3)
    home = p.pick(b"s:abc").backend
    others = [b for b in p.backends if b is not home]
    others[0].outstanding = 5
    home.healthy = False
    assert p.pick(b"s:abc").backend is others[1]
    home.healthy = True
    assert p.pick(b"s:abc").backend is home


def test_without_key_least_loaded():
    p = pool(2)
    p.backends[0].outstanding = 1
    assert p.pick(None).backend is p.backends[1]


def test_data_parallel_rank_follows_the_key():
    p = Pool([Backend("prefill", "http://p:1", healthy=True, engine_ids=("e_dp0", "e_dp1", "e_dp2"))])
    ranks = {key: p.pick(key).dp_rank for key in (b"s:%d" % i for i in range(60))}
    assert set(ranks.values()) == {0, 1, 2}
    assert all(p.pick(k).engine_id == f"e_dp{r}" for k, r in ranks.items())


@pytest.mark.parametrize(
    ("body", "session", "chars", "expected"),
    [
        ({"messages": [{"role": "user", "content": "hello"}]}, b"abc", 10, b"s:abc"),
        (
            {"messages": [{"role": "system", "content": "sys"}, {"role": "user", "content": "hello"}]},
            None,
            100,
            b"p:system\x1esys\x1euser\x1ehello",
        ),
        (
            {"messages": [{"role": "user", "content": [{"type": "text", "text": "look"}]}]},
            None,
            100,
            b"p:user\x1elook",
        ),
        ({"messages": [{"role": "system", "content": "0123456789"}]}, None, 8, b"p:system\x1e0"),
        ({"prompt": "once upon a time"}, None, 4, b"p:once"),
        ({"prompt": [1, 22, 333]}, None, 100, b"p:1\x1e22\x1e333"),
        ({"prompt": ["first", "second"]}, None, 100, b"p:first\x1esecond"),
        ({"prompt": "x"}, b"", 100, b"p:x"),
    ],
)
def test_affinity_key(body, session, chars, expected):
    assert affinity_key(body, session, chars) == expected


def test_prompts_sharing_the_leading_chars_share_a_key():
    head = "You are a coding agent. " * 10
    a = affinity_key({"messages": [{"role": "system", "content": head + "task A"}]}, None, 200)
    b = affinity_key({"messages": [{"role": "system", "content": head + "task B"}]}, None, 200)
    assert a == b
    assert a != affinity_key({"messages": [{"role": "system", "content": "other"}]}, None, 200)


def engine_host(
    health: int = 200, query: object = None, query_status: int = 200, query_body: bytes | None = None
) -> httpx.AsyncClient:
    """An engine and its bootstrap server behind a mock transport; answers are streamed, as on a network
    (a preloaded httpx.Response could not be read in pieces)."""

    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/health":
            return httpx.Response(health)
        if request.url.path == "/query":
            body = json.dumps(query).encode() if query_body is None else query_body
            return httpx.Response(query_status, stream=httpx.ByteStream(body))
        raise AssertionError(request.url)

    return httpx.AsyncClient(transport=httpx.MockTransport(answer), verify=False)  # no TLS: skip CA loading


async def test_prefill_check_reads_engine_ids_each_time():
    backend = Backend("prefill", "http://p:8000", "http://p:8998")
    async with engine_host(query={"0": {"engine_id": "old"}}) as client:
        await check(client, backend, 1.0)
    assert (backend.healthy, backend.engine_ids, backend.problem) == (True, ("old",), "")
    async with engine_host(query={"0": {"engine_id": "new"}}) as client:
        await check(client, backend, 1.0)
    assert backend.engine_ids == ("new",)


@pytest.mark.parametrize(
    ("host", "problem"),
    [
        ({"health": 503}, "/health answered HTTP 503"),
        ({"query_status": 404}, "bootstrap /query answered HTTP 404"),
        ({"query": {"0": {}}}, "no usable engine_id for dp rank 0"),
        ({"query": "not an object"}, "not a non-empty object"),
    ],
)
async def test_prefill_check_failures(host, problem):
    backend = Backend("prefill", "http://p:8000", "http://p:8998", healthy=True)
    async with engine_host(**host) as client:
        await check(client, backend, 1.0)
    assert not backend.healthy
    assert problem in backend.problem


async def test_decode_check_needs_no_bootstrap_and_connect_errors_mark_down():
    backend = Backend("decode", "http://d:8000")
    async with engine_host() as client:
        await check(client, backend, 1.0)
    assert backend.healthy

    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    async with httpx.AsyncClient(transport=httpx.MockTransport(refuse), verify=False) as client:
        await check(client, backend, 1.0)
    assert (backend.healthy, backend.problem) == (False, "ConnectError: connection refused")


async def test_a_healthy_engine_leaves_rotation_only_after_slow_checks_in_a_row():
    """A busy engine answering one check late keeps serving; SLOW_CHECKS late answers in a row eject it, and
    an engine never seen healthy is not waited for."""

    async def late(request: httpx.Request) -> httpx.Response:
        await asyncio.sleep(1)
        return httpx.Response(200)

    backend = Backend("decode", "http://d:8000", healthy=True)
    async with httpx.AsyncClient(transport=httpx.MockTransport(late), verify=False) as client:
        for _ in range(SLOW_CHECKS - 1):
            await check(client, backend, 0.01)
            assert backend.healthy
        async with engine_host() as fine:
            await check(fine, backend, 1.0)  # an answer in time starts the count again
        for _ in range(SLOW_CHECKS - 1):
            await check(client, backend, 0.01)
        assert backend.healthy
        await check(client, backend, 0.01)
        assert not backend.healthy
        assert backend.problem == f"no health answer within 0.01 s ({SLOW_CHECKS} checks in a row)"
        starting = Backend("decode", "http://e:8000")
        await check(client, starting, 0.01)
        assert not starting.healthy


async def test_a_check_meeting_a_connection_the_engine_closed_asks_once_more_before_calling_it_down():
    """A kept-alive connection the engine closed as the check was written into it is no sign of a dead engine
    (it ejected the only decode of a CI run); the same disconnect twice in a row is."""
    answers: list[str] = []

    def engine(outcomes: list[str]):
        def answer(request: httpx.Request) -> httpx.Response:
            answers.append(outcome := outcomes.pop(0))
            if outcome == "closed":
                raise httpx.RemoteProtocolError(
                    "Server disconnected without sending a response.", request=request
                )
            return httpx.Response(200)

        return httpx.AsyncClient(transport=httpx.MockTransport(answer), verify=False)

    backend = Backend("decode", "http://d:8000", healthy=True)
    async with engine(["closed", "ok"]) as client:
        await check(client, backend, 1.0)
    assert (backend.healthy, answers) == (True, ["closed", "ok"])
    async with engine(["closed", "closed", "ok"]) as client:
        await check(client, backend, 1.0)
    assert (backend.healthy, backend.problem) == (
        False,
        "RemoteProtocolError: Server disconnected without sending a response.",
    )
