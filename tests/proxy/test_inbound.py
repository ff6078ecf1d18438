"""Hostile request bodies: a 400 or 413 in the one envelope, never a 500, a traceback or a log flood."""

from __future__ import annotations

import json
import logging

import pytest

from proxy.errors import BadRequest, TooLarge
from proxy.inbound import declared_length, parse_object, request_id
from tests.proxy.harness import running

pytestmark = pytest.mark.anyio

CHAT = "/v1/chat/completions"
DEEP = b"[" * 100_000 + b"]" * 100_000


def nested(levels: int) -> bytes:
    """An object `levels` deep: {"a": {"a": ... 1}}."""
    return b'{"a":' * levels + b"1" + b"}" * levels


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"\xff\xfe{}", "not JSON"),
        (b'{"a": "\xff"}', "not JSON: 'utf-8' codec can't decode"),
        (b'{"messages": "\xed\xa0\x80"}', "not JSON"),  # a UTF-8-encoded surrogate
        (b'{"a": "\\ud800"}', "not JSON"),  # a lone surrogate escape
        (b"{not json", "not JSON"),
        (b'{"model": "m", "messages": [', "not JSON"),  # truncated
        (b"", "not JSON"),
        (b'{"n": 1' + b"0" * 5000 + b"}", "not JSON"),  # an integer msgspec will not hold
        (DEEP, "nested deeper than 128 levels"),
        (b'{"a": ' + DEEP + b"}", "nested deeper than 128 levels"),
        (nested(129), "nested deeper than 128 levels"),
        (b"[" + b"[]," * 200 + b"[[" * 64 + b"]]" * 64 + b"]", "must be a JSON object, not an array"),
        (b"[1, 2]", "must be a JSON object, not an array"),
        (b'"text"', "must be a JSON object, not a string"),
        (b"42", "must be a JSON object, not a number"),
        (b"null", "must be a JSON object, not null"),
        (b"true", "must be a JSON object, not a boolean"),
    ],
    ids=lambda v: v[:24] if isinstance(v, bytes) else None,
)
def test_refused_bodies(raw, message):
    with pytest.raises(BadRequest, match=message):
        parse_object(raw, 128)


@pytest.mark.parametrize(
    ("raw", "depth"),
    [
        (nested(128), 128),
        (b'{"s": "' + b"[" * 1000 + b'"}', 128),  # brackets in strings are text, not nesting
        (b'{"s": "\\"' + b"{" * 300 + b'\\"", "t": [[1]]}', 3),
        (b'{"m": [' + b",".join([b'{"role": "user", "content": [{"type": "text"}]}'] * 500) + b"]}", 5),
        (json.dumps({"a": [[[[{"b": [1, {"c": []}]}]]]]}).encode(), 9),
    ],
    ids=["128-levels", "brackets-in-a-string", "escaped-quotes", "500-messages", "mixed"],
)
def test_accepted_bodies(raw, depth):
    assert parse_object(raw, depth) == json.loads(raw)


def test_depth_counts_the_top_object():
    assert parse_object(nested(3), 4) and parse_object(b'{"a": [[]]}', 3)
    with pytest.raises(BadRequest, match="deeper than 3"):
        parse_object(b'{"a": [[[]]]}', 3)


@pytest.mark.parametrize(
    ("value", "kept"),
    [
        (b"client-rid-7", True),
        (b"a" * 128, True),
        (b"a" * 129, False),
        (b"with space", False),
        (b"caf\xc3\xa9", False),
        (b"", False),
        (None, False),
    ],
)
def test_request_id(value, kept):
    rid = request_id(value)
    assert (rid == value) is kept
    assert 1 <= len(rid) <= 128


def test_declared_length():
    declared_length([(b"content-length", b"100")], 100)
    with pytest.raises(TooLarge, match="101 bytes is over the limit of 100"):
        declared_length([(b"content-length", b"101")], 100)


BAD = {
    "invalid-utf8": (b"\xff" * 10, 400, "invalid_request"),
    "deep": (b"[" * 2000 + b"]" * 2000, 400, "invalid_request"),
    "array": (b"[1]", 400, "invalid_request"),
    "string": (b'"hi"', 400, "invalid_request"),
    "truncated": (b'{"messages": [', 400, "invalid_request"),
    "huge": (b'{"prompt": "' + b"x" * 5000 + b'"}', 413, "too_large"),
}


@pytest.mark.parametrize("http", [False, True], ids=["in-process", "http"])
async def test_bad_bodies_get_the_envelope_one_log_line_and_a_count(http, caplog):
    caplog.set_level(logging.DEBUG, logger="proxy")
    async with running(1, 1, http=http, limits={"body_bytes": 4096}) as c:
        for raw, status, kind in BAD.values():
            for _ in range(10):
                response = await c.client.post(CHAT, content=raw)
                assert response.status_code == status
                error = response.json()["error"]
                assert (error["type"], error["code"]) == (kind, status)
                assert error["message"].startswith("client leg: request body")
        metrics = await c.metrics()
        assert c.served("prefill") == c.served("decode") == []
    assert metrics['proxy_errors_total{leg="client",kind="invalid_request"}'] == 50
    assert metrics['proxy_errors_total{leg="client",kind="too_large"}'] == 10
    assert "Traceback" not in caplog.text
    failures = [r for r in caplog.records if "client leg failed" in r.getMessage()]
    assert len(failures) == 2  # one per kind: the other 58 are counted, not written


async def test_a_declared_length_over_the_limit_is_refused_unread():
    async with running(1, 1, http=True, limits={"body_bytes": 100}) as c:
        response = await c.client.post(CHAT, content=b"{}", headers={"Content-Length": "2"})
        assert response.status_code == 400  # within the limit: read (and refused as incomplete)
        async with c.client.stream(
            "POST", CHAT, content=b"x" * 5000, headers={"Content-Length": "5000"}
        ) as response:
            assert response.status_code == 413
            assert response.headers["connection"] == "close"
