"""The leg rewrites, table-driven, and checked against the simulator's contract rules."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.mooncake import (
    cached_token_stats,
    decode_body,
    engine_ids,
    new_transfer_id,
    prefill_body,
    prefill_finish_reason,
)
from sim.contract import check_decode_request, check_prefill_request

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
COMPLETION = {"model": "m", "prompt": "hi"}
XFER = "xfer-" + "ab" * 16
PREFILL_PARAMS = {
    "do_remote_decode": True,
    "do_remote_prefill": False,
    "transfer_id": XFER,
    "cached_token_stats": True,
}


@pytest.mark.parametrize(
    ("client", "changed", "removed"),
    [
        ({}, {"stream": False, "max_tokens": 1, "min_tokens": 1, "ignore_eos": True, "n": 1}, ()),
        ({"stream": True, "stream_options": {"include_usage": True}}, {"stream": False}, ("stream_options",)),
        ({"max_tokens": 512, "min_tokens": 64}, {"max_tokens": 1, "min_tokens": 1}, ()),
        ({"max_completion_tokens": 512}, {"max_completion_tokens": 1, "max_tokens": 1}, ()),
        ({"min_completion_tokens": 8}, {}, ("min_completion_tokens",)),
        ({"stop": ["\n", "END"], "stop_token_ids": [2, 7]}, {}, ("stop", "stop_token_ids")),
        ({"ignore_eos": False, "n": 4}, {"ignore_eos": True, "n": 1}, ()),
        (
            {"temperature": 0.7, "tools": [{"type": "function"}]},
            {"temperature": 0.7, "tools": [{"type": "function"}]},
            (),
        ),
        ({"kv_transfer_params": {"do_remote_prefill": True}}, {"kv_transfer_params": PREFILL_PARAMS}, ()),
    ],
    ids=[
        "plain",
        "stream",
        "min_tokens>1",
        "max_completion_tokens",
        "min_completion_tokens",
        "stop-lists",
        "ignore_eos-and-n",
        "other-fields-kept",
        "client-kv-params-replaced",
    ],
)
@pytest.mark.parametrize(
    ("endpoint", "base"), [("/v1/chat/completions", CHAT), ("/v1/completions", COMPLETION)]
)
def test_prefill_body(endpoint, base, client, changed, removed):
    request = {**base, **client}
    body = prefill_body(request, XFER)
    assert body == {
        **{k: v for k, v in request.items() if k not in removed},
        "stream": False,
        "max_tokens": 1,
        "min_tokens": 1,
        "ignore_eos": True,
        "n": 1,
        "kv_transfer_params": PREFILL_PARAMS,
        **changed,
    }
    assert "max_completion_tokens" not in body or body["max_completion_tokens"] == 1
    assert check_prefill_request(body, endpoint=endpoint) == []
    assert request == {**base, **client}, "the client's body is not modified"


@pytest.mark.parametrize(
    "client",
    [
        {},
        {"stream": True, "stream_options": {"include_usage": True}},
        {"stop": ["x"], "min_tokens": 9, "max_tokens": 99},
        {"kv_transfer_params": {"do_remote_decode": True}},
    ],
    ids=["plain", "stream", "client-limits-kept", "client-kv-params-replaced"],
)
def test_decode_body(client):
    request = {**CHAT, **client}
    addr = "http://10.0.0.7:8998"
    body = decode_body(request, transfer_id=XFER, engine_id="eng-1", bootstrap_addr=addr)
    params = {
        "do_remote_decode": False,
        "do_remote_prefill": True,
        "transfer_id": XFER,
        "remote_engine_id": "eng-1",
        "remote_bootstrap_addr": addr,
    }
    assert body == {**request, "kv_transfer_params": params}
    assert check_decode_request(body, endpoint="/v1/chat/completions", engines={addr: "eng-1"}) == []


def test_transfer_ids_are_fresh_uuid4_hex():
    ids = {new_transfer_id() for _ in range(100)}
    assert len(ids) == 100
    assert all(re.fullmatch(r"xfer-[0-9a-f]{32}", i) for i in ids)


_scalars = st.one_of(st.none(), st.booleans(), st.integers(-5, 10_000), st.text(max_size=5))
_client_fields = st.fixed_dictionaries(
    {},
    optional={
        "stream": st.booleans(),
        "stream_options": st.just({"include_usage": True}),
        "max_tokens": st.integers(1, 10_000),
        "max_completion_tokens": st.integers(1, 10_000),
        "min_tokens": st.integers(0, 10_000),
        "min_completion_tokens": st.integers(0, 100),
        "stop": st.lists(st.text(min_size=1, max_size=3), max_size=3),
        "stop_token_ids": st.lists(st.integers(0, 9)),
        "ignore_eos": st.booleans(),
        "n": st.integers(1, 8),
        "temperature": st.floats(0, 2),
        "extra": _scalars,
    },
)


@settings(max_examples=60, deadline=None)  # a shared, loaded CI machine must not turn slowness into failure
@given(client=_client_fields, chat=st.booleans())
def test_any_valid_client_request_gives_a_clean_prefill_leg(client, chat):
    endpoint, base = ("/v1/chat/completions", CHAT) if chat else ("/v1/completions", COMPLETION)
    assert check_prefill_request(prefill_body({**base, **client}, XFER), endpoint=endpoint) == []


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ({"0": {"engine_id": "e0", "worker_addr": {"0": {"0": "tcp://1.2.3.4:5"}}}}, ("e0",)),
        ({"1": {"engine_id": "e_dp1"}, "0": {"engine_id": "e_dp0"}}, ("e_dp0", "e_dp1")),
    ],
)
def test_engine_ids(query, expected):
    assert engine_ids(query) == expected


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ({}, "non-empty object"),
        ([], "non-empty object"),
        ({"0": {"worker_addr": {}}}, "dp rank 0"),
        ({"0": {"engine_id": ""}}, "dp rank 0"),
        ({"1": {"engine_id": "e"}}, "dp rank 0"),
        ({"0": {"engine_id": "e"}, "2": {"engine_id": "f"}}, "dp rank 1"),
    ],
)
def test_engine_ids_rejects(query, message):
    with pytest.raises(ValueError, match=message):
        engine_ids(query)


@pytest.mark.parametrize(
    ("reply", "reason", "stats"),
    [
        (
            {
                "choices": [{"finish_reason": "length"}],
                "kv_transfer_params": {"cached_token_stats": {"a": 1}},
            },
            "length",
            {"a": 1},
        ),
        ({"choices": [{"finish_reason": "stop"}], "kv_transfer_params": None}, "stop", {}),
        ({"choices": []}, None, {}),
        (None, None, {}),
        ("text", None, {}),
    ],
)
def test_prefill_answer_fields(reply, reason, stats):
    assert prefill_finish_reason(reply) == reason
    assert cached_token_stats(reply) == stats
