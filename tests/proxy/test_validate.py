"""The request checks run before the prefill leg: what vLLM refuses is refused (and nothing more),
so that no prefill pins KV for a decode that will never run."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from proxy import validate
from proxy.errors import BadRequest
from proxy.mooncake import decode_body
from sim.contract import check_decode_request
from tests.proxy.harness import running
from tests.proxy.vllm_cases import CASES, CHAT, COMPLETIONS, body

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize(("endpoint", "fields", "refusal"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_refuses_what_vllm_refuses(endpoint, fields, refusal):
    request = body(endpoint, fields)
    if refusal is None:
        validate.check(request, endpoint)
    else:
        with pytest.raises(BadRequest) as caught:
            validate.check(request, endpoint)
        assert refusal in str(caught.value)


NO = validate._NO  # pydantic refuses the value


@pytest.mark.parametrize(
    ("value", "as_int", "as_bool"),
    [
        (True, 1, True),
        (0, 0, False),
        (1.0, 1, True),
        (2.5, NO, NO),
        (float("nan"), NO, NO),
        ("12", 12, NO),
        (" -3 ", -3, NO),
        ("+4", 4, NO),
        ("1_000", 1000, NO),
        ("7.00", 7, NO),
        ("9" * 400 + ".0", int("9" * 400), NO),  # read without a float on the way
        ("1e3", NO, NO),
        ("0x10", NO, NO),
        ("", NO, NO),
        ("TRUE", NO, True),
        ("Off", NO, False),
        (" true", NO, NO),
        ([], NO, NO),
        (None, NO, None),
    ],
)
def test_lax_coercion(value, as_int, as_bool):
    """pydantic's python-mode lax reading, which vLLM's FastAPI applies to a parsed body."""
    assert validate.lax_int(value) is as_int if as_int is NO else validate.lax_int(value) == as_int
    assert validate.lax_bool(value) is as_bool


@pytest.mark.parametrize(
    ("fields", "streams"),
    [
        ({"stream": True}, True),
        ({"stream": "yes"}, True),
        ({"stream": 1}, True),
        ({"stream": "0"}, False),
        ({}, False),
    ],
)
def test_the_proxy_streams_when_vllm_does(fields, streams):
    assert validate.streams(body(CHAT, fields)) is streams


REFUSED_AFTER_PREFILL = {
    # each passes the prefill leg (which rewrites the field) and would be refused by the decode
    "max_tokens-0": (CHAT, {"max_tokens": 0}, "max_tokens must be at least 1, got 0."),
    "min_tokens-over-max": (CHAT, {"min_tokens": 9, "max_tokens": 4}, "min_tokens must be less than"),
    "n-0": (COMPLETIONS, {"n": 0}, "n must be at least 1, got 0."),
    "stop-empty": (CHAT, {"stop": [""]}, "stop cannot contain an empty string."),
    "stream-options-unstreamed": (CHAT, {"stream_options": {"include_usage": True}}, "Stream options"),
    "greedy-n": (CHAT, {"n": 4, "temperature": 0}, "n must be 1 when using greedy sampling, got 4."),
    "prompt-logprobs-streamed": (COMPLETIONS, {"prompt_logprobs": 2, "stream": True}, "`prompt_logprobs`"),
}


@pytest.mark.parametrize(
    ("endpoint", "fields", "message"), REFUSED_AFTER_PREFILL.values(), ids=REFUSED_AFTER_PREFILL.keys()
)
async def test_a_request_the_decode_would_refuse_never_reaches_a_prefill(endpoint, fields, message):
    async with running(1, 1) as c:
        response = await c.client.post(endpoint, json=body(endpoint, {"model": "fake-model", **fields}))
        assert response.status_code == 400
        error = response.json()["error"]
        assert (error["type"], error["code"]) == ("invalid_request", 400)
        assert error["message"] == f"client leg: {validate_message(endpoint, fields)}"
        assert message in error["message"]
        assert c.served("prefill") == c.served("decode") == []


def validate_message(endpoint: str, fields: dict) -> str:
    with pytest.raises(BadRequest) as caught:
        validate.check(body(endpoint, fields), endpoint)
    return str(caught.value)


# Values a client may put in the fields the prefill leg rewrites: hostile, lax-valid and plain ones.
_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 40),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(["yes", "no", "maybe", "5", " 7 ", "1e3", "abc", "", "0", "-1", "1.0", "1__0"]),
    st.lists(st.one_of(st.integers(-1, 3), st.text(max_size=3)), max_size=3),
    st.dictionaries(st.sampled_from(["include_usage", "x"]), st.one_of(st.booleans(), st.text(max_size=3))),
)
_FIELDS = ("stream", "stream_options", "max_tokens", "max_completion_tokens", "min_tokens", "n", "stop")
_FIELDS += ("stop_token_ids", "ignore_eos", "temperature", "prompt_logprobs", "use_beam_search", "messages")


@settings(max_examples=400, deadline=None, derandomize=True)  # the same examples on every CI run
@example(endpoint=CHAT, fields={"min_tokens": False, "max_tokens": "yes"})  # a rule met an earlier one's _NO
@given(
    endpoint=st.sampled_from([CHAT, COMPLETIONS]),
    fields=st.dictionaries(st.sampled_from(_FIELDS), _VALUES, max_size=4),
)
def test_what_the_simulated_decode_refuses_the_proxy_refuses_before_any_prefill(endpoint, fields):
    """The decode leg is the client's body plus the proxy's kv_transfer_params: whatever the decode would
    refuse must be refused by the proxy first, or the prefill keeps the request's KV for a transfer nobody
    pulls (until VLLM_MOONCAKE_ABORT_REQUEST_TIMEOUT, 480 s). `"stream": "yes"` and `"max_tokens": "5"`
    were refused by the simulated decode after the proxy had run their prefill."""
    request = body(endpoint, fields)
    engines = {"http://p:8998": "e"}
    leg = decode_body(request, transfer_id="xfer-0", engine_id="e", bootstrap_addr="http://p:8998")
    refused = [v for v in check_decode_request(leg, endpoint=endpoint, engines=engines) if v.rejects]
    if refused:
        with pytest.raises(BadRequest):
            validate.check(request, endpoint)
