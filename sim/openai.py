"""OpenAI response, SSE chunk and error shapes as vLLM's and SGLang's servers write them (pure, no I/O).

`dialect` "vllm" (default) or "sglang". SGLang's shapes (sglang/srt/entrypoints/openai/protocol.py): choices
carry `matched_stop` instead of vLLM's `stop_reason`, responses `metadata` instead of vLLM's extra fields,
usage has `reasoning_tokens`, an error is a top-level `{"object": "error", ...}` (nested under "error" only
in a stream), and model cards are owned by "sglang".
"""

from __future__ import annotations

from typing import Any

import msgspec

ERROR_TYPES = {
    400: "BadRequestError",
    401: "Unauthorized",
    404: "NotFoundError",
    405: "MethodNotAllowed",
    500: "InternalServerError",
    503: "ServiceUnavailableError",
}
DONE = b"data: [DONE]\n\n"
_encode = msgspec.json.Encoder().encode


def sse(obj: dict[str, Any]) -> bytes:
    return b"data: " + _encode(obj) + b"\n\n"


def error_body(status: int, message: str, *, param: str | None = None) -> dict[str, Any]:
    """vLLM's error envelope, in responses and stream events alike."""
    return {
        "error": {
            "message": message,
            "type": ERROR_TYPES.get(status, "Error"),
            "param": param,
            "code": status,
        }
    }


def sglang_error(status: int, message: str, *, param: str | None = None) -> dict[str, Any]:
    """SGLang's ErrorResponse (top level in a response; a stream wraps it as {"error": ...})."""
    return {
        "object": "error",
        "message": message,
        "type": ERROR_TYPES.get(status, "Error"),
        "param": param,
        "code": status,
    }


def usage(
    *, prompt: int, completion: int, cached: int, details: bool, dialect: str = "vllm"
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "prompt_tokens": prompt,
        "total_tokens": prompt + completion,
        "completion_tokens": completion,
        "prompt_tokens_details": {"cached_tokens": cached} if details else None,
    }
    if dialect == "sglang":
        out["reasoning_tokens"] = 0
    return out


def chat_response(
    *,
    rid: str,
    created: int,
    model: str,
    text: str,
    n: int,
    finish: str,
    use: dict[str, Any],
    kv_params: dict[str, Any] | None,
    dialect: str = "vllm",
) -> dict[str, Any]:
    if dialect == "sglang":
        message = {"role": "assistant", "content": text, "reasoning_content": None, "tool_calls": None}
        choices: list[dict[str, object]] = [
            {"index": i, "message": message, "logprobs": None, "finish_reason": finish, "matched_stop": None}
            for i in range(n)
        ]
        head = {"id": rid, "object": "chat.completion", "created": created, "model": model}
        return {**head, "choices": choices, "usage": use, "metadata": {"weight_version": "default"}}
    choices = [
        {
            "index": i,
            "message": {
                "role": "assistant",
                "content": text,
                "refusal": None,
                "tool_calls": [],
                "reasoning_content": None,
            },
            "logprobs": None,
            "finish_reason": finish,
            "stop_reason": None,
        }
        for i in range(n)
    ]
    return {
        "id": rid,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": choices,
        "service_tier": None,
        "system_fingerprint": None,
        "usage": use,
        "prompt_logprobs": None,
        "prompt_token_ids": None,
        "kv_transfer_params": kv_params,
    }


def completion_response(
    *,
    rid: str,
    created: int,
    model: str,
    text: str,
    n: int,
    finish: str,
    use: dict[str, Any],
    kv_params: dict[str, Any] | None,
    dialect: str = "vllm",
) -> dict[str, Any]:
    if dialect == "sglang":
        choices = [
            {"index": i, "text": text, "logprobs": None, "finish_reason": finish, "matched_stop": None}
            for i in range(n)
        ]
        head = {"id": rid, "object": "text_completion", "created": created, "model": model}
        return {**head, "choices": choices, "usage": use, "metadata": {"weight_version": "default"}}
    choices = [
        {
            "index": i,
            "text": text,
            "logprobs": None,
            "finish_reason": finish,
            "stop_reason": None,
            "prompt_logprobs": None,
        }
        for i in range(n)
    ]
    return {
        "id": rid,
        "object": "text_completion",
        "created": created,
        "model": model,
        "choices": choices,
        "service_tier": None,
        "system_fingerprint": None,
        "usage": use,
        "kv_transfer_params": kv_params,
    }


class Chunks:
    """SSE chunk builder for one streamed request (chat or completions)."""

    def __init__(self, *, chat: bool, rid: str, created: int, model: str, dialect: str = "vllm") -> None:
        self.chat, self.sglang = chat, dialect == "sglang"
        self.head = {
            "id": rid,
            "object": "chat.completion.chunk" if chat else "text_completion",
            "created": created,
            "model": model,
        }

    def role(self, index: int) -> bytes:
        """Chat streams open each choice with an empty assistant delta."""
        delta = {"role": "assistant", "content": ""}
        choice = {"index": index, "delta": delta, "logprobs": None, "finish_reason": None}
        if self.sglang:
            choice["matched_stop"] = None
        return sse({**self.head, "choices": [choice]})

    def piece(self, index: int, text: str, finish: str | None = None) -> bytes:
        if self.chat:
            choice = {"index": index, "delta": {"content": text}, "logprobs": None, "finish_reason": finish}
        else:
            choice = {"index": index, "text": text, "logprobs": None, "finish_reason": finish}
        if self.sglang:
            choice["matched_stop"] = None
        elif finish is not None:
            choice["stop_reason"] = None
        return sse({**self.head, "choices": [choice]})

    def usage(self, use: dict[str, Any]) -> bytes:
        return sse({**self.head, "choices": [], "usage": use})


def models_payload(
    *, names: tuple[str, ...], root: str, max_model_len: int, created: int, dialect: str = "vllm"
) -> dict[str, Any]:
    if dialect == "sglang":  # ModelCard: no permission list
        card = {"object": "model", "created": created, "owned_by": "sglang", "root": root, "parent": None}
        return {"object": "list", "data": [{"id": n, **card, "max_model_len": max_model_len} for n in names]}
    data = [
        {
            "id": name,
            "object": "model",
            "created": created,
            "owned_by": "vllm",
            "root": root,
            "parent": None,
            "max_model_len": max_model_len,
            "permission": [
                {
                    "id": f"modelperm-{i}",
                    "object": "model_permission",
                    "created": created,
                    "allow_create_engine": False,
                    "allow_sampling": True,
                    "allow_logprobs": True,
                    "allow_search_indices": False,
                    "allow_view": True,
                    "allow_fine_tuning": False,
                    "organization": "*",
                    "group": None,
                    "is_blocking": False,
                }
            ],
        }
        for i, name in enumerate(names)
    ]
    return {"object": "list", "data": data}
