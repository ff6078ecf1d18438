"""Requests and what vLLM answers them, as data: test_validate.py checks the proxy's rules against it,
and check_vllm.py checks it against a real vLLM (run it where vLLM is installed).

A case is (id, endpoint, fields over a minimal valid body, None when vLLM serves it or a piece of the
message it refuses it with). DROP removes a field of the minimal body. Rules that depend on a server's
settings (max_model_len, VLLM_MAX_N_SEQUENCES, VLLM_MAX_STOP_STRINGS) are not here: the proxy leaves
them to the engines.
"""

from __future__ import annotations

from typing import Any

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
BASE = {
    CHAT: {"model": "m", "messages": [{"role": "user", "content": "hi"}]},
    COMPLETIONS: {"model": "m", "prompt": "hi"},
}
DROP = object()
BOTH = (CHAT, COMPLETIONS)
_NAMES = {CHAT: "chat", COMPLETIONS: "completions"}


def body(endpoint: str, fields: dict[str, Any]) -> dict[str, Any]:
    out = {**BASE[endpoint], **fields}
    return {k: v for k, v in out.items() if v is not DROP}


_BOTH: list[tuple[str, dict[str, Any], str | None]] = [
    # served: pydantic reads these as the field's type ("5" an int, "yes" a bool)
    ("plain", {}, None),
    ("model-null", {"model": None}, None),
    ("model-missing", {"model": DROP}, None),
    ("stream-true", {"stream": True}, None),
    ("stream-null", {"stream": None}, None),
    ("stream-text", {"stream": "true"}, None),
    ("stream-yes", {"stream": "yes"}, None),
    ("stream-one", {"stream": 1}, None),
    ("stream-text-false", {"stream": "false"}, None),
    ("stream-options", {"stream": True, "stream_options": {"include_usage": True}}, None),
    ("stream-options-lax", {"stream": True, "stream_options": {"include_usage": "on"}}, None),
    ("stream-options-empty-unstreamed", {"stream_options": {}}, None),
    ("stream-options-null", {"stream": False, "stream_options": None}, None),
    # the raw "false" is truthy where vLLM checks stream_options, before coercing stream
    ("stream-options-raw-truthy", {"stream": "false", "stream_options": {"include_usage": True}}, None),
    ("max-tokens", {"max_tokens": 5}, None),
    ("max-tokens-text", {"max_tokens": "5"}, None),
    ("max-tokens-float", {"max_tokens": 5.0}, None),
    ("max-tokens-text-float", {"max_tokens": "5.0"}, None),
    ("max-tokens-spaces", {"max_tokens": " 7 "}, None),
    ("max-tokens-true", {"max_tokens": True}, None),
    ("max-tokens-null", {"max_tokens": None}, None),
    ("min-tokens", {"min_tokens": 3, "max_tokens": 5}, None),
    ("min-tokens-text", {"min_tokens": "2", "max_tokens": "5"}, None),
    ("min-tokens-zero", {"min_tokens": 0}, None),
    ("n", {"n": 2}, None),
    ("n-text", {"n": "2"}, None),
    ("n-sampled", {"n": 2, "temperature": 0.7}, None),
    ("n-greedy-one", {"n": 1, "temperature": 0}, None),
    ("stop-text", {"stop": "\n"}, None),
    ("stop-list", {"stop": ["a", "b"]}, None),
    ("stop-empty-list", {"stop": []}, None),
    ("stop-null", {"stop": None}, None),
    ("stop-token-ids", {"stop_token_ids": [1, 2]}, None),
    ("stop-token-ids-text", {"stop_token_ids": ["3"]}, None),
    ("stop-token-ids-null", {"stop_token_ids": None}, None),
    ("ignore-eos", {"ignore_eos": True}, None),
    ("ignore-eos-text", {"ignore_eos": "no"}, None),
    ("prompt-logprobs-unstreamed", {"prompt_logprobs": 1}, None),
    ("prompt-logprobs-zero-streamed", {"prompt_logprobs": 0, "stream": True}, None),
    ("kv-transfer-params-junk", {"kv_transfer_params": "replaced by the proxy on both legs"}, None),
    ("min-completion-tokens-junk", {"min_completion_tokens": "an unknown field"}, None),
    ("unknown-field", {"whatever": [1, {"x": None}]}, None),
    # refused: the fields the legs rewrite, and the request's shape
    ("model-number", {"model": 5}, "model: Input should be a valid string"),
    ("stream-maybe", {"stream": "maybe"}, "stream: Input should be a valid boolean"),
    ("stream-two", {"stream": 2}, "stream: Input should be a valid boolean"),
    ("stream-list", {"stream": []}, "stream: Input should be a valid boolean"),
    ("stream-options-unstreamed", {"stream_options": {"include_usage": True}}, "Stream options can only"),
    ("stream-options-stream-false", {"stream": False, "stream_options": {"x": 1}}, "Stream options can only"),
    ("stream-options-text", {"stream": True, "stream_options": "x"}, "stream_options: Input should be"),
    (
        "stream-options-usage-maybe",
        {"stream": True, "stream_options": {"include_usage": "maybe"}},
        "stream_options.include_usage: Input should be a valid boolean",
    ),
    ("max-tokens-word", {"max_tokens": "abc"}, "max_tokens: Input should be a valid integer"),
    ("max-tokens-fraction", {"max_tokens": 5.5}, "max_tokens: Input should be a valid integer"),
    ("max-tokens-list", {"max_tokens": [5]}, "max_tokens: Input should be a valid integer"),
    ("max-tokens-exponent", {"max_tokens": "1e3"}, "max_tokens: Input should be a valid integer"),
    ("max-tokens-zero", {"max_tokens": 0}, "max_tokens must be at least 1, got 0."),
    ("max-tokens-negative", {"max_tokens": -3}, "max_tokens must be at least 1, got -3."),
    ("min-tokens-null", {"min_tokens": None}, "min_tokens: Input should be a valid integer"),
    ("min-tokens-word", {"min_tokens": "x"}, "min_tokens: Input should be a valid integer"),
    ("min-tokens-negative", {"min_tokens": -1}, "min_tokens must be greater than or equal to 0, got -1."),
    (
        "min-over-max",
        {"min_tokens": 10, "max_tokens": 5},
        "min_tokens must be less than or equal to max_tokens=5",
    ),
    ("n-zero", {"n": 0}, "n must be at least 1, got 0."),
    ("n-negative", {"n": -2}, "n must be at least 1, got -2."),
    ("n-word", {"n": "x"}, "n: Input should be a valid integer"),
    ("n-greedy", {"n": 2, "temperature": 0}, "n must be 1 when using greedy sampling, got 2."),
    ("n-greedy-text", {"n": 3, "temperature": "0"}, "n must be 1 when using greedy sampling, got 3."),
    ("n-nearly-greedy", {"n": 2, "temperature": 1e-6}, None),  # vLLM raises it to 0.01
    ("stop-number", {"stop": 5}, "stop: Input should be a valid string or list"),
    ("stop-list-number", {"stop": ["a", 1]}, "stop[1]: Input should be a valid string"),
    ("stop-empty-text", {"stop": ""}, "stop cannot contain an empty string."),
    ("stop-list-empty-text", {"stop": ["a", ""]}, "stop cannot contain an empty string."),
    ("stop-token-ids-text-list", {"stop_token_ids": "1"}, "stop_token_ids: Input should be a valid list"),
    (
        "stop-token-ids-word",
        {"stop_token_ids": [1, "x"]},
        "stop_token_ids[1]: Input should be a valid integer",
    ),
    (
        "stop-token-ids-fraction",
        {"stop_token_ids": [1.5]},
        "stop_token_ids[0]: Input should be a valid integer",
    ),
    ("ignore-eos-null", {"ignore_eos": None}, "ignore_eos: Input should be a valid boolean"),
    ("ignore-eos-maybe", {"ignore_eos": "maybe"}, "ignore_eos: Input should be a valid boolean"),
    (
        "prompt-logprobs-streamed",
        {"prompt_logprobs": 1, "stream": True},
        "`prompt_logprobs` are not available",
    ),
    ("prompt-logprobs-all-streamed", {"prompt_logprobs": -1, "stream": True}, "`prompt_logprobs` are not"),
]

_CHAT: list[tuple[str, dict[str, Any], str | None]] = [
    ("harmony-message", {"messages": [{"author": {"role": "user"}, "content": []}]}, None),
    ("n-null", {"n": None}, None),
    ("min-tokens-server-cap", {"min_tokens": 100}, None),  # no client cap: the server's decides
    ("completion-cap-wins", {"max_tokens": 0, "max_completion_tokens": 5}, None),
    ("completion-cap-text", {"max_completion_tokens": "3"}, None),
    ("beam-streamed", {"use_beam_search": True, "stream": True}, None),
    ("n-greedy-beam", {"n": 2, "temperature": 0, "use_beam_search": True}, None),
    ("messages-missing", {"messages": DROP}, "messages: Field required"),
    ("messages-text", {"messages": "hi"}, "messages: Input should be a valid list"),
    ("messages-of-text", {"messages": ["hi"]}, "messages[0]: Input should be a valid dictionary"),
    ("completion-cap-zero", {"max_tokens": 5, "max_completion_tokens": 0}, "max_tokens must be at least 1"),
    ("completion-cap-word", {"max_completion_tokens": "x"}, "max_completion_tokens: Input should be"),
    (
        "min-over-completion-cap",
        {"min_tokens": 6, "max_tokens": 50, "max_completion_tokens": 5},
        "min_tokens must be less than or equal to max_tokens=5",
    ),
]

_COMPLETIONS: list[tuple[str, dict[str, Any], str | None]] = [
    ("prompt-token-ids", {"prompt": [1, 2, 3]}, None),
    ("prompt-list", {"prompt": ["a", "b"]}, None),
    ("prompt-token-id-lists", {"prompt": [[1, 2], [3]]}, None),
    ("completion-cap-ignored", {"max_completion_tokens": "an unknown field here"}, None),
    ("echo-without-output", {"max_tokens": 0, "echo": True}, None),
    ("min-tokens-default-cap", {"min_tokens": 16}, None),
    ("beam-unstreamed", {"use_beam_search": True}, None),
    ("prompt-missing", {"prompt": DROP}, "Either prompt or prompt_embeds must be provided"),
    ("prompt-empty", {"prompt": ""}, "Either prompt or prompt_embeds must be provided"),
    ("prompt-number", {"prompt": 5}, "prompt: Input should be a valid string or list"),
    ("n-null", {"n": None}, "n: Input should be a valid integer"),
    ("max-tokens-zero-no-echo", {"max_tokens": 0}, "max_tokens must be at least 1, got 0."),
    ("min-over-default-cap", {"min_tokens": 17}, "min_tokens must be less than or equal to max_tokens=16"),
    ("beam-streamed", {"use_beam_search": True, "stream": True}, "Streaming is not currently supported"),
]

CASES: list[tuple[str, str, dict[str, Any], str | None]] = [
    *((f"{_NAMES[e]}:{name}", e, fields, refusal) for name, fields, refusal in _BOTH for e in BOTH),
    *((f"chat:{name}", CHAT, fields, refusal) for name, fields, refusal in _CHAT),
    *((f"completions:{name}", COMPLETIONS, fields, refusal) for name, fields, refusal in _COMPLETIONS),
]
