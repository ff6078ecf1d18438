"""vLLM's refusals of a completion request, as pure functions, checked before the prefill leg.

The prefill leg rewrites `stream`, `stream_options`, `max_tokens`, `max_completion_tokens`, `min_tokens`,
`stop`, `stop_token_ids`, `ignore_eos` and `n` (docs/upstream-facts.md#mooncake-pd). A request the decode will
refuse for one of those still passes its prefill, whose KV then waits ~480 s for a decode that never comes:
cheap memory exhaustion by any client. Fields both legs carry unchanged need no rule here (the prefill refuses
them at once and keeps nothing), except the shape of the request itself, which is cheaper to refuse here than
to send.

Each rule mirrors vLLM (>= 0.16; read in 0.33's `protocol.py` and `sampling_params.py`): first
pydantic's lax coercion of the field's type ("5" is an int, "yes" a bool, null only where the field is
optional), then the same range checks, in vLLM's words. Refuse only what every vLLM refuses: rules that
depend on a server's settings (max_model_len, VLLM_MAX_N_SEQUENCES, VLLM_MAX_STOP_STRINGS, the
generation config's defaults) stay with the engines.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from proxy.errors import BadRequest

CHAT = "/v1/chat/completions"
COMPLETION_MAX_TOKENS = 16  # CompletionRequest.max_tokens default (also for null)
_TRUE = frozenset({"1", "on", "t", "true", "y", "yes"})
_FALSE = frozenset({"0", "off", "f", "false", "n", "no"})
# What pydantic may read as an integer: a wider pattern than it accepts ("1__0"), never a narrower one.
_INT_TEXT = re.compile(r"\s*[+-]?[0-9][0-9_]*(?:\.0*)?\s*")
_NO = object()  # pydantic refuses the value
Body = Mapping[str, Any]


def check(body: Body, endpoint: str) -> None:
    """BadRequest with vLLM's message for the first field vLLM would refuse; None when it would serve."""
    found = first_problem(body, endpoint)
    if found is not None:
        raise BadRequest(found[1])


def first_problem(body: Body, endpoint: str) -> tuple[str, str] | None:
    """(the rule's name, vLLM's message) of the first rule the request breaks; None when vLLM would serve.
    Only the first: a rule may rely on the ones before it (min_tokens is compared with a cap whose type
    _max_tokens has checked)."""
    for rule in RULES:
        problem = rule(body, endpoint)
        if problem is not None:
            return rule.__name__, problem
    return None


def streams(body: Body) -> bool:
    """Whether vLLM streams the answer: its lax reading of `stream` ("true", 1, ...)."""
    return lax_bool(body.get("stream")) is True


# -- pydantic's lax coercion (python mode, as FastAPI validates a parsed body) ---------------------


def lax_int(value: Any) -> Any:
    """The int pydantic makes of `value`, or _NO."""
    if isinstance(value, int):  # bool included: True is 1
        return int(value)
    if isinstance(value, float):
        return int(value) if value.is_integer() else _NO
    if isinstance(value, str) and _INT_TEXT.fullmatch(value):
        return int(value.partition(".")[0].replace("_", ""))  # what follows a "." is only zeros
    return _NO


def lax_bool(value: Any) -> Any:
    """The bool pydantic makes of `value` (None stays None), or _NO."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int | float) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.lower() in _TRUE | _FALSE:
        return value.lower() in _TRUE
    return _NO


def lax_float(value: Any) -> float | None:
    """The float pydantic makes of `value`; None when absent or not a number (then no rule uses it)."""
    if isinstance(value, int | float):
        return float(value)
    try:
        return float(value) if isinstance(value, str) else None
    except ValueError:
        return None


def _optional_int(body: Body, key: str) -> Any:
    value = body.get(key)
    return None if value is None else lax_int(value)


def _not(kind: str, key: str, value: Any) -> str:
    return f"{key}: Input should be a valid {kind}, got {value!r:.40}"


# -- the rules, in the order vLLM meets them ---------------------------------------------------------


def _prompt(body: Body, endpoint: str) -> str | None:
    """A chat needs `messages`, a non-empty list of objects; a completion a non-empty `prompt` (or
    embeddings). The one rule beyond vLLM's models: what vLLM makes of no messages at all depends on the
    model's chat template, and no benchmark sends it -- refused here, before a prefill keeps KV for it."""
    if endpoint == CHAT:
        messages = body.get("messages")
        if messages is None:
            return "messages: Field required"
        if not isinstance(messages, list):
            return _not("list", "messages", messages)
        if not messages:
            return "messages: List should have at least 1 item"
        for i, message in enumerate(messages):
            if not isinstance(message, dict):
                return _not("dictionary or object", f"messages[{i}]", message)
        return None
    prompt, embeds = body.get("prompt"), body.get("prompt_embeds")
    if (prompt is None or prompt == "") and (embeds is None or embeds == []):
        return "Either prompt or prompt_embeds must be provided and non-empty."
    if prompt is not None and not isinstance(prompt, str | list):
        return _not("string or list", "prompt", prompt)
    return None


def _model(body: Body, endpoint: str) -> str | None:
    model = body.get("model")
    return None if model is None or isinstance(model, str) else _not("string", "model", model)


def _stream(body: Body, endpoint: str) -> str | None:
    stream = body.get("stream")
    return _not("boolean", "stream", stream) if lax_bool(stream) is _NO else None


def _stream_options(body: Body, endpoint: str) -> str | None:
    """vLLM compares the raw values here, before coercing them: `"stream": "false"` counts as set."""
    options = body.get("stream_options")
    if options and not body.get("stream"):
        return "Stream options can only be defined when `stream=True`."
    if options is None:
        return None
    if not isinstance(options, dict):
        return _not("dictionary or object", "stream_options", options)
    for key in ("include_usage", "continuous_usage_stats"):
        if lax_bool(options.get(key)) is _NO:
            return _not("boolean", f"stream_options.{key}", options[key])
    return None


def _max_tokens(body: Body, endpoint: str) -> str | None:
    keys = ("max_tokens", "max_completion_tokens") if endpoint == CHAT else ("max_tokens",)
    for key in keys:  # a completion's max_completion_tokens is an unknown field: vLLM ignores it
        if _optional_int(body, key) is _NO:
            return _not("integer", key, body[key])
    cap = output_cap(body, endpoint)
    if cap is not None and cap < 1:
        return f"max_tokens must be at least 1, got {cap}."
    return None


def output_cap(body: Body, endpoint: str) -> int | None:
    """The client's cap on output tokens as vLLM reads it (types already checked); None: the server's."""
    cap: int | None
    if endpoint == CHAT:  # max_completion_tokens wins over the deprecated max_tokens
        cap = _optional_int(body, "max_completion_tokens")
        if cap is None:
            cap = _optional_int(body, "max_tokens")
        return cap
    cap = _optional_int(body, "max_tokens")
    cap = COMPLETION_MAX_TOKENS if cap is None else cap
    # A completion echoing its prompt may ask for no output at all; vLLM then generates one token.
    return 1 if cap == 0 and lax_bool(body.get("echo")) is True else cap


def _min_tokens(body: Body, endpoint: str) -> str | None:
    """Not optional in vLLM: null is refused. Checked against the client's cap only: the server's own
    (max_model_len less the prompt) is lower still, so what exceeds the client's exceeds both."""
    if "min_tokens" not in body:
        return None
    value = lax_int(body["min_tokens"])
    if value is _NO:
        return _not("integer", "min_tokens", body["min_tokens"])
    if value < 0:
        return f"min_tokens must be greater than or equal to 0, got {value}."
    cap = output_cap(body, endpoint)
    if cap is not None and value > cap:
        return f"min_tokens must be less than or equal to max_tokens={cap}, got {value}."
    return None


def _n(body: Body, endpoint: str) -> str | None:
    """Optional for a chat, not for a completion. n > 1 with an explicit temperature of 0 (greedy) is
    refused; vLLM raises any other temperature below 0.01 to 0.01, and without one the generation
    config decides, which only the engine knows."""
    if "n" not in body or (body["n"] is None and endpoint == CHAT):
        return None
    n = lax_int(body["n"])
    if n is _NO:
        return _not("integer", "n", body["n"])
    if n < 1:
        return f"n must be at least 1, got {n}."
    temperature = lax_float(body.get("temperature"))
    beam = lax_bool(body.get("use_beam_search")) is True
    if n > 1 and temperature == 0 and not beam:
        return f"n must be 1 when using greedy sampling, got {n}."
    return None


def _stop(body: Body, endpoint: str) -> str | None:
    stop = body.get("stop")
    if stop is None:
        return None
    if not isinstance(stop, str | list):
        return _not("string or list", "stop", stop)
    strings = [stop] if isinstance(stop, str) else stop
    for i, text in enumerate(strings):
        if not isinstance(text, str):
            return _not("string", f"stop[{i}]", text)
    return "stop cannot contain an empty string." if "" in strings else None


def _stop_token_ids(body: Body, endpoint: str) -> str | None:
    ids = body.get("stop_token_ids")
    if ids is None:
        return None
    if not isinstance(ids, list):
        return _not("list", "stop_token_ids", ids)
    for i, token in enumerate(ids):
        if lax_int(token) is _NO:
            return _not("integer", f"stop_token_ids[{i}]", token)
    return None


def _ignore_eos(body: Body, endpoint: str) -> str | None:
    """Not optional in vLLM: null is refused."""
    if "ignore_eos" in body and lax_bool(body["ignore_eos"]) in (None, _NO):
        return _not("boolean", "ignore_eos", body["ignore_eos"])
    return None


def _prompt_logprobs(body: Body, endpoint: str) -> str | None:
    """Refused with streaming only, which the prefill leg turns off: raw values, as vLLM reads them."""
    value = body.get("prompt_logprobs")
    if isinstance(value, int | float) and body.get("stream") and (value > 0 or value == -1):
        return "`prompt_logprobs` are not available when `stream=True`."
    return None


def _beam_search_stream(body: Body, endpoint: str) -> str | None:
    """Completions only: refused when streaming, which the prefill leg turns off."""
    if endpoint != CHAT and streams(body) and lax_bool(body.get("use_beam_search")) is True:
        return "Streaming is not currently supported with beam search"
    return None


Rule = Callable[[Body, str], "str | None"]
RULES: tuple[Rule, ...] = (
    _prompt,
    _model,
    _stream,
    _stream_options,
    _max_tokens,
    _min_tokens,
    _n,
    _stop,
    _stop_token_ids,
    _ignore_eos,
    _prompt_logprobs,
    _beam_search_stream,
)
