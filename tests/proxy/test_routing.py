"""Which engine serves a request, health as the job's barrier sees it, engine ids, metrics."""

from __future__ import annotations

import asyncio
import collections
import uuid

import pytest

from tests.proxy.harness import running, until

pytestmark = pytest.mark.anyio

CHAT = "/v1/chat/completions"


def body(content: str = "hello", **fields) -> dict:
    return {"model": "fake-model", "messages": [{"role": "user", "content": content}], **fields}


async def test_health_counts_per_role():
    async with running(2, 1) as c:
        status, doc = await c.health()
        assert status == 200
        assert {k: doc[k] for k in ("status", "prefill", "decode")} == {
            "status": "healthy",
            "prefill": {"healthy": 2, "total": 2},
            "decode": {"healthy": 1, "total": 1},
        }
        c.prefill[0].healthy = False
        doc = await c.wait_health(1, 1)
        assert doc["status"] == "healthy"
        assert doc["backends"][0]["problem"] == "/health answered HTTP 503"
        c.decode[0].healthy = False
        await c.wait_health(1, 0)
        status, doc = await c.health()
        assert (status, doc["status"], doc["decode"]) == (503, "unhealthy", {"healthy": 0, "total": 1})


async def test_serves_before_any_engine_is_up_and_picks_them_up():
    async with running(2, 1, http=True, up=False) as c:
        status, doc = await c.health()
        assert (status, doc["prefill"], doc["decode"]) == (
            503,
            {"healthy": 0, "total": 2},
            {"healthy": 0, "total": 1},
        )
        assert (await c.client.post(CHAT, json=body())).status_code == 503
        await c.start(c.decode[0])
        await c.start(c.prefill[1])
        await c.wait_health(1, 1)
        assert (await c.client.post(CHAT, json=body())).status_code == 200
        await c.start(c.prefill[0])
        await c.wait_health(2, 1)


async def engine_id_used(c, session: str) -> tuple[str, str]:
    """(prefill that served the session, engine id the decode was told)."""
    rid = f"{session}-{uuid.uuid4().hex}"
    response = await c.client.post(CHAT, json=body(), headers={"X-Session-ID": session, "X-Request-Id": rid})
    assert response.status_code == 200
    served = next(p.name for p in c.prefill if p.seen and p.seen[-1].headers["x-request-id"] == rid)
    return served, c.decode[0].seen[-1].body["kv_transfer_params"]["remote_engine_id"]


async def test_prefill_restart_with_a_new_engine_id():
    async with running(2, 1, http=True) as c:
        p0 = c.prefill[0]
        session = "s0"
        while (await engine_id_used(c, session))[0] != "prefill0":
            session += "0"
        await c.stop(p0)
        await c.wait_health(1, 1)
        assert await engine_id_used(c, session) == ("prefill1", "prefill1-engine-g1")
        p0.generation += 1
        await c.start(p0)
        await c.wait_health(2, 1)
        # The fakes' contract check compares against the live /query: a stale id is a violation.
        assert await engine_id_used(c, session) == ("prefill0", "prefill0-engine-g2")


async def test_engine_id_change_caught_even_without_a_missed_health_check():
    async with running(1, 1) as c:
        c.prefill[0].generation += 1  # restarted between two checks
        await until(lambda: c.world.prefill[0].engine_id == "prefill0-engine-g2", "new id")
        await until_engine_ids(c, ["prefill0-engine-g2"])
        assert (await engine_id_used(c, "s"))[1] == "prefill0-engine-g2"


async def until_engine_ids(c, ids: list[str]) -> None:
    for _ in range(1000):
        _, doc = await c.health()
        if doc["backends"][0]["engine_ids"] == ids:
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"engine ids stayed {doc['backends'][0]['engine_ids']}")


async def test_data_parallel_prefill_ranks():
    async with running(1, 1) as c:
        c.prefill[0].dp = 2
        await until_engine_ids(c, ["prefill0-engine-g1_dp0", "prefill0-engine-g1_dp1"])
        for s in range(8):  # the fakes check the rank header and that decode names that rank's engine
            assert (
                await c.client.post(CHAT, json=body(), headers={"X-Session-ID": f"s{s}"})
            ).status_code == 200
        ranks = {seen.headers["x-data-parallel-rank"] for seen in c.prefill[0].seen}
        assert ranks == {"0", "1"}


async def test_sessions_stick_to_one_prefill_and_spread():
    async with running(2, 1) as c:
        for turn in range(3):
            for s in range(12):
                headers = {"X-Session-ID": f"session-{s}", "X-Request-Id": f"session-{s}-turn-{turn}"}
                response = await c.client.post(CHAT, json=body(f"turn {turn}"), headers=headers)
                assert response.status_code == 200
        homes = collections.defaultdict(set)
        for p in c.prefill:
            for seen in p.seen:
                homes[seen.headers["x-request-id"].split("-turn-")[0]].add(p.name)
        assert all(len(names) == 1 for names in homes.values())
        assert {n for names in homes.values() for n in names} == {"prefill0", "prefill1"}


async def test_shared_prompt_prefix_sticks_without_a_session_header():
    async with running(2, 1, affinity_chars=64) as c:
        prefix = "You are a careful coding agent working in a large repository. " * 2
        for tail in ("fix the bug", "write tests", "refactor"):
            assert (await c.client.post(CHAT, json=body(prefix + tail))).status_code == 200
        assert len(set(c.served("prefill"))) == 1


async def test_home_prefill_down_then_back():
    async with running(2, 1) as c:
        await c.client.post(CHAT, json=body(), headers={"X-Session-ID": "s"})
        (home,) = [p for p in c.prefill if p.seen]
        (other,) = [p for p in c.prefill if not p.seen]
        home.healthy = False
        await c.wait_health(1, 1)
        await c.client.post(CHAT, json=body(), headers={"X-Session-ID": "s"})
        assert len(other.seen) == 1
        home.healthy = True
        await c.wait_health(2, 1)
        await c.client.post(CHAT, json=body(), headers={"X-Session-ID": "s"})
        assert (len(home.seen), len(other.seen)) == (2, 1)


async def test_decode_is_least_outstanding():
    async with running(1, 2) as c:
        for d in c.decode:
            d.stall = True
        first = asyncio.ensure_future(c.client.post(CHAT, json=body()))
        await until(lambda: c.served("decode"), "first decode leg")
        second = asyncio.ensure_future(c.client.post(CHAT, json=body()))
        await until(lambda: len(c.served("decode")) == 2, "second decode leg")
        assert sorted(c.served("decode")) == ["decode0", "decode1"]
        for d in c.decode:
            d.released.set()
        assert [r.status_code for r in await asyncio.gather(first, second)] == [200, 200]


async def test_least_loaded_prefill_policy():
    async with running(2, 1, policy="least-loaded") as c:
        for p in c.prefill:
            p.stall = True
        requests = [asyncio.ensure_future(c.client.post(CHAT, json=body())) for _ in range(2)]
        await until(lambda: len(c.served("prefill")) == 2, "two prefill legs")
        assert c.served("prefill") == ["prefill0", "prefill1"]
        for p in c.prefill:
            p.released.set()
        assert [r.status_code for r in await asyncio.gather(*requests)] == [200, 200]


async def test_metrics():
    async with running(2, 1) as c:
        for _ in range(3):
            await c.client.post(CHAT, json=body(stream=True), headers={"X-Session-ID": "one"})
        await c.client.post("/v1/completions", json={"model": "fake-model", "prompt": "hi"})
        answered = {p.url: len(p.seen) for p in c.prefill}
        for p in c.prefill:
            p.fail = (500, b"{}")
        await c.client.post(CHAT, json=body())
        m = await c.metrics()
    assert m['proxy_requests_total{endpoint="/v1/chat/completions"}'] == 4
    assert m['proxy_requests_total{endpoint="/v1/completions"}'] == 1
    assert m['proxy_errors_total{leg="prefill",kind="upstream_status"}'] == 1
    assert m["proxy_prefill_seconds_count"] == 5
    assert m["proxy_decode_first_byte_seconds_count"] == m["proxy_decode_seconds_count"] == 4
    for url, n in answered.items():  # what the fake prefills reported, per prefill
        cached = 'proxy_prefill_cached_tokens_total{prefill="%s",stat="num_%s_cached_tokens"}'
        assert m.get(cached % (url, "lmcache"), 0) == 48 * n
        assert m.get(cached % (url, "vllm"), 0) == 16 * n
        assert m.get(f'proxy_prefill_prompt_tokens_total{{prefill="{url}"}}', 0) == 64 * n
        assert m[f'proxy_backend_healthy{{role="prefill",url="{url}"}}'] == 1
    assert m["proxy_stream_chunks_total"] >= 3 and m["proxy_stream_bytes_total"] > 0  # ASGI buffers chunks
    assert m["proxy_in_flight"] == 0
