"""With PROXY_API_KEY set, the proxy is no open relay: clients need the key, and it goes only where
an engine asks for it (completions, /v1/models), never to a bootstrap server, a log or a page."""

from __future__ import annotations

import logging

import pytest

from proxy import inbound
from tests.proxy.harness import running

pytestmark = pytest.mark.anyio

KEY = "sk-very-secret-0123"
CHAT = "/v1/chat/completions"
BODY = {"model": "fake-model", "messages": [{"role": "user", "content": "hello"}]}
GOOD = {"Authorization": f"Bearer {KEY}"}


@pytest.mark.parametrize(
    ("method", "path", "headers", "status"),
    [
        ("POST", CHAT, {}, 401),
        ("POST", CHAT, {"Authorization": "Bearer wrong-key"}, 401),
        ("POST", CHAT, {"Authorization": f"Bearer {KEY}x"}, 401),
        ("POST", CHAT, {"Authorization": f"Bearer {KEY[:-1]}"}, 401),
        ("POST", CHAT, {"Authorization": f"Basic {KEY}"}, 401),
        ("POST", CHAT, {"Authorization": KEY}, 401),
        ("POST", CHAT, {"Authorization": "Bearer"}, 401),
        ("POST", CHAT, {"X-Api-Key": KEY}, 401),
        ("POST", "/v1/completions", {}, 401),
        ("GET", "/v1/models", {}, 401),
        ("POST", "/health", {}, 401),  # only GET /health and GET /metrics are open
        ("GET", "/v1/embeddings", {}, 401),  # unknown paths too: nothing is said without the key
        ("POST", CHAT, GOOD, 200),
        ("POST", CHAT, {"Authorization": f"bearer {KEY}"}, 200),  # the scheme is case-insensitive
        ("GET", "/v1/models", GOOD, 200),
        ("GET", "/v1/embeddings", GOOD, 404),
        ("GET", "/health", {}, 200),
        ("GET", "/metrics", {}, 200),
    ],
)
async def test_the_key_is_required_except_for_health_and_metrics(method, path, headers, status):
    async with running(1, 1, api_key=KEY) as c:  # the fakes answer 400 to a leg without the key
        body = BODY if path.startswith("/v1/") and method == "POST" else None
        if path == "/v1/completions":
            body = {"model": "fake-model", "prompt": "hello"}
        response = await c.client.request(method, path, json=body, headers=headers)
        assert response.status_code == status, response.text
        if status == 401:
            assert response.json() == {
                "error": {
                    "message": "client leg: missing or wrong API key (send Authorization: Bearer <key>)",
                    "type": "unauthorized",
                    "code": 401,
                }
            }
            assert response.headers["www-authenticate"] == "Bearer"
            assert c.served("prefill") == c.served("decode") == []
            assert all(seen.path != "/v1/models" for e in c.decode for seen in e.control)
            assert (await c.metrics())['proxy_errors_total{leg="client",kind="unauthorized"}'] == 1


async def test_the_key_goes_to_engines_never_to_bootstrap_logs_or_pages(caplog):
    caplog.set_level(logging.DEBUG, logger="proxy")
    async with running(2, 1, api_key=KEY) as c:
        assert (await c.client.post(CHAT, json={**BODY, "stream": True}, headers=GOOD)).status_code == 200
        c.decode[0].fail = (500, b'{"error": "boom"}')
        assert (await c.client.post(CHAT, json=BODY, headers=GOOD)).status_code == 500
        assert (await c.client.post(CHAT, json=BODY)).status_code == 401
        assert (await c.client.get("/v1/models", headers=GOOD)).status_code == 200
        pages = (await c.client.get("/health")).text + (await c.client.get("/metrics")).text
        control = [seen for e in c.prefill + c.decode for seen in e.control]
    assert KEY not in pages and KEY not in caplog.text
    assert "API key set (clients must send it)" in caplog.text
    assert {s.path for s in control} >= {"/health", "/query", "/v1/models"}
    for seen in control:  # completions legs carry it: the fakes' contract check requires that
        expected = f"Bearer {KEY}" if seen.path == "/v1/models" else None
        assert seen.headers.get("authorization") == expected, seen.path


async def test_without_a_key_nothing_is_asked_and_nothing_is_sent():
    async with running(1, 1) as c:
        response = await c.client.post(CHAT, json=BODY, headers={"Authorization": "Bearer mine"})
        assert response.status_code == 200
        assert "authorization" not in c.prefill[0].seen[0].headers
        assert "authorization" not in c.decode[0].seen[0].headers


def test_the_comparison_is_constant_time_on_bytes(monkeypatch):
    compared = []

    def spy(a, b):
        compared.append((a, b))
        return a == b

    monkeypatch.setattr(inbound.hmac, "compare_digest", spy)
    assert inbound.authorized([(b"authorization", b"Bearer k1")], b"k1")
    assert not inbound.authorized([(b"authorization", b"Bearer k2")], b"k1")
    assert not inbound.authorized([(b"x-other", b"Bearer k1")], b"k1")
    assert compared == [(b"k1", b"k1"), (b"k2", b"k1")]
