"""Requests through the proxy over real HTTP: both legs per the contract, bytes relayed unchanged."""

from __future__ import annotations

import re

import pytest

from tests.proxy.harness import running

pytestmark = pytest.mark.anyio

CHAT = ("/v1/chat/completions", {"model": "fake-model", "messages": [{"role": "user", "content": "hello"}]})
COMPLETIONS = ("/v1/completions", {"model": "fake-model", "prompt": "hello"})
CLIENT_FIELDS = {
    "plain": {},
    "min_tokens>1": {"min_tokens": 5, "max_tokens": 64},
    "stop-lists": {"stop": ["\n\n", "END"], "stop_token_ids": [7, 9]},
    "max_completion_tokens": {"max_completion_tokens": 32, "min_completion_tokens": 2},
    "n>1-ignore_eos-false": {"n": 2, "ignore_eos": False, "temperature": 0.5},
}


@pytest.mark.parametrize("fields", CLIENT_FIELDS.values(), ids=CLIENT_FIELDS.keys())
@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
@pytest.mark.parametrize(("endpoint", "base"), [CHAT, COMPLETIONS], ids=["chat", "completions"])
async def test_both_legs(endpoint, base, stream, fields):
    request = {**base, **fields, "stream": stream}
    if stream:
        request["stream_options"] = {"include_usage": True}
    async with running(2, 1) as c:
        response = await c.client.post(endpoint, json=request, headers={"X-Request-Id": "client-rid-7"})
        assert response.status_code == 200, response.text
        assert response.content == b"".join(c.decode[0].sent), "decode bytes relayed unchanged"
        assert response.headers["content-type"] == ("text/event-stream" if stream else "application/json")
        assert response.headers["x-request-id"] == "client-rid-7"
        assert re.fullmatch(r"prefill;dur=[\d.]+, proxy;dur=[\d.]+", response.headers["server-timing"])
        ((prefill_leg, decode_leg),) = [(p.seen[0], c.decode[0].seen[0]) for p in c.prefill if p.seen]
    assert prefill_leg.path == decode_leg.path == endpoint
    assert prefill_leg.headers["x-request-id"] == decode_leg.headers["x-request-id"] == "client-rid-7"
    assert "x-data-parallel-rank" not in prefill_leg.headers  # no data parallelism here
    assert decode_leg.body == {**request, "kv_transfer_params": decode_leg.body["kv_transfer_params"]}
    transfer = prefill_leg.body["kv_transfer_params"]["transfer_id"]
    assert re.fullmatch(r"xfer-[0-9a-f]{32}", transfer)
    assert decode_leg.body["kv_transfer_params"]["transfer_id"] == transfer
    assert prefill_leg.body["min_tokens"] == 1 and "stop" not in prefill_leg.body


async def test_request_id_minted_when_the_client_sends_none():
    async with running(1, 1) as c:
        response = await c.client.post(CHAT[0], json=CHAT[1])
        rid = response.headers["x-request-id"]
        assert re.fullmatch(r"[0-9a-f]{32}", rid)
        assert (
            c.prefill[0].seen[0].headers["x-request-id"] == c.decode[0].seen[0].headers["x-request-id"] == rid
        )


async def test_models_come_from_a_decode():
    async with running(1, 1) as c:
        response = await c.client.get("/v1/models")
        assert response.status_code == 200
        assert response.json()["data"][0]["id"] == "fake-model"


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "kind"),
    [
        ("POST", CHAT[0], b"{not json", 400, "invalid_request"),
        ("POST", CHAT[0], b"[1, 2]", 400, "invalid_request"),
        ("POST", "/v1/embeddings", b"{}", 404, "not_found"),
        ("GET", CHAT[0], b"", 405, "method_not_allowed"),
    ],
)
async def test_bad_requests_get_the_error_envelope(method, path, body, status, kind):
    async with running(1, 1) as c:
        response = await c.client.request(method, path, content=body)
        assert response.status_code == status
        assert response.json()["error"]["type"] == kind
        assert response.json()["error"]["code"] == status
        assert c.served("prefill") == c.served("decode") == []
