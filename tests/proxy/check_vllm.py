"""Checks tests/proxy/vllm_cases.py against a real vLLM: its request models and sampling checks, as its
OpenAI server applies them (no model, no GPU) to the decode leg the proxy would send. Run where vLLM is
installed, from the repository root:

    VLLM_TARGET_DEVICE=cpu <vllm-venv>/bin/python -m tests.proxy.check_vllm

Prints one line per case where vLLM disagrees with the table and exits 1 if any does.
"""

from __future__ import annotations

import sys
from types import SimpleNamespace
from typing import Any

from proxy.mooncake import decode_body
from tests.proxy.vllm_cases import CASES, CHAT, body

MAX_MODEL_LEN = 1 << 20  # large: the server-dependent caps are not what the table is about
PROMPT_LEN = 8


def vllm_refusal(endpoint: str, request: dict[str, Any]) -> str | None:
    """vLLM's message when its server would answer 400 before generating, else None."""
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.entrypoints.openai.completion.protocol import CompletionRequest

    try:
        if endpoint == CHAT:
            req = ChatCompletionRequest.model_validate(request)
            cap = req.max_completion_tokens if req.max_completion_tokens is not None else req.max_tokens
        else:
            req = CompletionRequest.model_validate(request)
            if req.stream and req.use_beam_search:
                return "Streaming is not currently supported with beam search"
            cap = req.max_tokens
        req.build_tok_params(SimpleNamespace(max_model_len=MAX_MODEL_LEN))
        max_tokens = _max_tokens(cap, req.truncate_prompt_tokens)
        if req.use_beam_search:
            req.to_beam_search_params(max_tokens, {})
        else:
            req.to_sampling_params(max_tokens, {})
    except Exception as exc:  # pydantic's ValidationError, vLLM's VLLMValidationError: both a 400
        return " ".join(str(exc).split())
    return None


def _max_tokens(cap: int | None, truncate: int | None) -> int:
    from vllm.entrypoints.serve.utils.api_utils import get_max_tokens

    return get_max_tokens(MAX_MODEL_LEN, cap, PROMPT_LEN, {}, None, truncate_prompt_tokens=truncate)


def main() -> int:
    disagree = 0
    for name, endpoint, fields, refusal in CASES:
        # What the decode engine gets: the client's body, kv_transfer_params the proxy's own.
        leg = decode_body(
            body(endpoint, fields), transfer_id="xfer-0", engine_id="e", bootstrap_addr="http://p:1"
        )
        got = vllm_refusal(endpoint, leg)
        if (got is None) != (refusal is None):
            disagree += 1
            print(f"{name}: table says {'served' if refusal is None else 'refused'}, vLLM: {got or 'served'}")
        elif refusal is not None and refusal.split(":")[0] not in got:
            print(f"{name}: refused as expected, in other words: {got[:160]}")
    print(f"{len(CASES)} cases, {disagree} disagreements")
    return 1 if disagree else 0


if __name__ == "__main__":
    sys.exit(main())
