"""The PD request contract (docs/upstream-facts.md#mooncake-pd) as tables: each change to a good leg and the
rule it breaks."""

from __future__ import annotations

import pytest

from sim.contract import Violation, bootstrap_addr_problem, check_decode_request, check_prefill_request

CHAT, COMPLETIONS = "/v1/chat/completions", "/v1/completions"
XFER = "xfer-" + "ab" * 16
BOOT = "http://10.0.0.1:8998"
ENGINES = {BOOT: "engine-a", "http://10.0.0.2:8998": "engine-b"}


class _Drop:
    def __repr__(self) -> str:
        return "DROP"


DROP = _Drop()  # a change that removes the key


def prefill_leg(endpoint: str = CHAT, **changes) -> dict:
    """What a correct proxy sends to a prefill (docs/upstream-facts.md#mooncake-pd), with `changes` applied
    (DROP removes a key)."""
    body = {
        "model": "m",
        "stream": False,
        "max_tokens": 1,
        "min_tokens": 1,
        "ignore_eos": True,
        "kv_transfer_params": {"do_remote_decode": True, "do_remote_prefill": False, "transfer_id": XFER},
    }
    body.update({"messages": [{"role": "user", "content": "hi"}]} if endpoint == CHAT else {"prompt": "hi"})
    return _apply(body, changes)


def decode_leg(endpoint: str = CHAT, **changes) -> dict:
    body = {
        "model": "m",
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": 64,
        "kv_transfer_params": {
            "do_remote_decode": False,
            "do_remote_prefill": True,
            "transfer_id": XFER,
            "remote_engine_id": "engine-a",
            "remote_bootstrap_addr": BOOT,
        },
    }
    body.update({"messages": [{"role": "user", "content": "hi"}]} if endpoint == CHAT else {"prompt": "hi"})
    return _apply(body, changes)


def _apply(body: dict, changes: dict) -> dict:
    params = changes.pop("kv", {})
    for key, value in changes.items():
        body.pop(key) if value is DROP else body.__setitem__(key, value)
    kv = body.get("kv_transfer_params")
    for key, value in params.items():
        kv.pop(key) if value is DROP else kv.__setitem__(key, value)
    return body


def rules(violations: list[Violation]) -> set[tuple[str, bool]]:
    return {(v.rule, v.rejects) for v in violations}


@pytest.mark.parametrize("endpoint", [CHAT, COMPLETIONS])
def test_correct_legs_have_no_violation(endpoint):
    assert check_prefill_request(prefill_leg(endpoint), endpoint=endpoint) == []
    assert check_decode_request(decode_leg(endpoint), endpoint=endpoint, engines=ENGINES) == []


def test_optional_prefill_keys_are_allowed():
    body = prefill_leg(max_completion_tokens=1, kv={"cached_token_stats": True})
    assert check_prefill_request(body, endpoint=CHAT) == []


PREFILL_CASES = [
    # (changes, expected (rule, rejects) set) -- rejects: vLLM 400 or the transfer cannot work
    ({"kv_transfer_params": DROP}, {("prefill-kv-params", True)}),
    ({"kv_transfer_params": []}, {("prefill-kv-params", True)}),
    ({"kv": {"transfer_id": DROP}}, {("prefill-transfer-id", True)}),
    ({"kv": {"transfer_id": 7}}, {("prefill-transfer-id", True)}),
    ({"kv": {"transfer_id": "req-1"}}, {("prefill-transfer-id", False)}),
    ({"kv": {"do_remote_decode": False}}, {("prefill-do-remote-decode", True)}),
    ({"kv": {"do_remote_decode": DROP}}, {("prefill-do-remote-decode", True)}),
    ({"kv": {"do_remote_prefill": True}}, {("prefill-do-remote-prefill", True)}),
    ({"kv": {"do_remote_prefill": DROP}}, {("prefill-do-remote-prefill", False)}),
    ({"kv": {"remote_engine_id": "x"}}, {("prefill-kv-params-extra", False)}),
    ({"stream": True}, {("prefill-stream", True)}),
    ({"stream": DROP}, {("prefill-stream", False)}),
    ({"stream": "maybe"}, {("body-stream", True)}),
    ({"stream": "no"}, set()),  # vLLM's pydantic reads it as false
    ({"stream_options": {"include_usage": True}}, {("stream-options", True)}),
    ({"max_tokens": 2}, {("prefill-max-tokens", True)}),
    ({"max_tokens": DROP}, {("prefill-max-tokens", True)}),
    ({"max_tokens": True}, {("prefill-max-tokens", True)}),  # vLLM reads it as 1; the proxy sends 1
    ({"max_completion_tokens": 16}, {("prefill-max-completion-tokens", True)}),
    ({"min_tokens": 2}, {("prefill-min-tokens", True), ("body-min-tokens", True)}),
    ({"min_tokens": DROP}, {("prefill-min-tokens", False)}),
    ({"min_tokens": 0}, {("prefill-min-tokens", False)}),
    ({"stop": ["\n"]}, {("prefill-stop", False)}),
    ({"stop": "END"}, {("prefill-stop", False)}),
    ({"stop_token_ids": [2]}, {("prefill-stop-token-ids", False)}),
    ({"ignore_eos": False}, {("prefill-ignore-eos", False)}),
    ({"ignore_eos": DROP}, {("prefill-ignore-eos", False)}),
    ({"min_completion_tokens": 8}, {("prefill-min-completion-tokens", False)}),
    ({"n": 2}, {("prefill-n", False)}),
    ({"n": 0}, {("body-n", True)}),
    ({"n": None, "max_completion_tokens": None}, set()),
    ({"messages": []}, {("body-messages", True)}),
]


@pytest.mark.parametrize("changes, expected", PREFILL_CASES, ids=lambda v: repr(v)[:60])
def test_prefill_leg_rules(changes, expected):
    assert rules(check_prefill_request(prefill_leg(**changes), endpoint=CHAT)) == expected


def test_prefill_on_completions_needs_a_prompt():
    assert rules(check_prefill_request(prefill_leg(COMPLETIONS, prompt=""), endpoint=COMPLETIONS)) == {
        ("body-prompt", True)
    }


def test_old_contract_is_named_in_the_missing_transfer_id_message():
    body = prefill_leg(kv={"transfer_id": DROP, "remote_host": "h", "remote_port": 1})
    [violation] = [v for v in check_prefill_request(body, endpoint=CHAT) if v.rule == "prefill-transfer-id"]
    assert violation.rejects and "Missing transfer_id" in violation.message and "0.15" in violation.message


def test_vllm_router_style_prefill_leg_is_accepted_but_flagged():
    """vllm-router keeps stop strings and sends ignore_eos false (docs/upstream-facts.md#routers): accepted,
    hazardous."""
    body = prefill_leg(stop=["</s>"], ignore_eos=False)
    assert rules(check_prefill_request(body, endpoint=CHAT)) == {
        ("prefill-stop", False),
        ("prefill-ignore-eos", False),
    }


DECODE_CASES = [
    ({"kv_transfer_params": DROP}, {("decode-kv-params", False)}),
    ({"kv_transfer_params": "x"}, {("decode-kv-params", True)}),
    ({"kv": {"do_remote_prefill": False}}, {("decode-do-remote-prefill", False)}),
    ({"kv": {"do_remote_prefill": DROP}}, {("decode-do-remote-prefill", False)}),
    ({"kv": {"do_remote_decode": True}}, {("decode-do-remote-decode", True)}),
    ({"kv": {"do_remote_decode": DROP}}, {("decode-do-remote-decode", False)}),
    ({"kv": {"transfer_id": DROP}}, {("decode-transfer-id", True)}),
    ({"kv": {"transfer_id": "abc"}}, {("decode-transfer-id", False)}),
    ({"kv": {"remote_engine_id": DROP}}, {("decode-remote-engine-id", True)}),
    ({"kv": {"remote_engine_id": "engine-b"}}, {("decode-engine-mismatch", True)}),
    ({"kv": {"remote_bootstrap_addr": DROP}}, {("decode-bootstrap-addr", True)}),
    ({"kv": {"remote_bootstrap_addr": "10.0.0.1:8998"}}, {("decode-bootstrap-addr", True)}),
    ({"kv": {"remote_bootstrap_addr": "https://10.0.0.1:8998"}}, {("decode-bootstrap-addr", True)}),
    ({"kv": {"remote_bootstrap_addr": "http://10.0.0.1"}}, {("decode-bootstrap-addr", True)}),
    ({"kv": {"remote_bootstrap_addr": "http://10.0.0.9:8998"}}, {("decode-bootstrap-unknown", True)}),
    ({"kv": {"remote_bootstrap_addr": "http://10.0.0.2:8998"}}, {("decode-engine-mismatch", True)}),
    ({"kv": {"remote_bootstrap_addr": BOOT + "/"}}, set()),
    ({"kv": {"remote_bootstrap_addr": "http://10.0.0.2:8998", "remote_engine_id": "engine-b"}}, set()),
    ({"kv": {"remote_host": "10.0.0.1"}}, {("decode-kv-params-extra", False)}),
    ({"stream": False, "stream_options": DROP}, set()),
    ({"stream": False}, {("stream-options", True)}),
    ({"min_tokens": 100}, {("body-min-tokens", True)}),
    ({"max_tokens": 0}, {("body-max-tokens", True)}),
]


@pytest.mark.parametrize("changes, expected", DECODE_CASES, ids=lambda v: repr(v)[:60])
def test_decode_leg_rules(changes, expected):
    assert rules(check_decode_request(decode_leg(**changes), endpoint=CHAT, engines=ENGINES)) == expected


def test_decode_with_old_contract_only_names_the_old_contract():
    body = decode_leg(kv={"transfer_id": DROP, "remote_bootstrap_addr": DROP, "remote_host": "h"})
    messages = [v.message for v in check_decode_request(body, endpoint=CHAT, engines=ENGINES) if v.rejects]
    assert any("old <= 0.15 contract" in m for m in messages)


def test_non_object_body_is_one_rejection():
    assert rules(check_prefill_request([], endpoint=CHAT)) == {("body", True)}
    assert rules(check_decode_request("x", endpoint=COMPLETIONS, engines={})) == {("body", True)}


def test_unknown_endpoint_is_a_programming_error():
    with pytest.raises(ValueError, match="endpoint must be one of"):
        check_prefill_request(prefill_leg(), endpoint="/v1/embeddings")


@pytest.mark.parametrize(
    "addr, ok",
    [
        ("http://h:1", True),
        ("http://[::1]:8998", True),
        ("http://h:1/", True),
        ("http://h", False),
        ("http://h:1/query", False),
        ("tcp://h:1", False),
        ("http://h:99999", False),
        ("http://:1", False),
    ],
)
def test_bootstrap_addr(addr, ok):
    assert (bootstrap_addr_problem(addr) is None) is ok
