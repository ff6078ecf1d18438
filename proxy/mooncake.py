"""The vLLM >= 0.16 MooncakeConnector PD contract as pure functions.

Upstream facts: docs/upstream-facts.md#mooncake-pd.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping
from typing import Any

MAX_DP_RANKS = 1024
_ENGINE_ID = re.compile(r"[!-~]{1,256}")  # vLLM's are a uuid, with "_dp<rank>" under data parallelism

# Any of these lets the single prefill token end the request by a stop, and then vLLM drops the
# transfer and decode waits for the Mooncake abort timeout (~480 s); stream_options is invalid
# without stream.
_PREFILL_DROPS = frozenset({"stop", "stop_token_ids", "min_completion_tokens", "stream_options"})


def new_transfer_id() -> str:
    return "xfer-" + uuid.uuid4().hex


def prefill_body(body: Mapping[str, Any], transfer_id: str) -> dict[str, Any]:
    """The prefill leg: one token, finished by the length cap so the KV blocks are kept for transfer."""
    out = {k: v for k, v in body.items() if k not in _PREFILL_DROPS}
    out["stream"] = False
    out["max_tokens"] = 1
    if "max_completion_tokens" in body:
        out["max_completion_tokens"] = 1
    out["min_tokens"] = 1  # a larger value with max_tokens 1 is a 400
    out["ignore_eos"] = True
    out["n"] = 1
    out["kv_transfer_params"] = {
        "do_remote_decode": True,
        "do_remote_prefill": False,
        "transfer_id": transfer_id,
        "cached_token_stats": True,  # asks LMCache to report per-request L2 hits in the response
    }
    return out


def decode_body(
    body: Mapping[str, Any], *, transfer_id: str, engine_id: str, bootstrap_addr: str
) -> dict[str, Any]:
    """The decode leg: the client's request as sent, told where to pull the KV from."""
    out = dict(body)
    out["kv_transfer_params"] = {
        "do_remote_decode": False,
        "do_remote_prefill": True,
        "transfer_id": transfer_id,
        "remote_engine_id": engine_id,
        "remote_bootstrap_addr": bootstrap_addr,
    }
    return out


def engine_ids(query: Any) -> tuple[str, ...]:
    """Engine id per data-parallel rank from a bootstrap `/query` answer; ValueError when malformed.

    The ids go into every decode body and into /health: bounded in number and length, and plain
    text, so that whatever answers on the bootstrap port cannot inflate either.
    """
    if not isinstance(query, dict) or not query:
        raise ValueError("bootstrap /query answer is not a non-empty object")
    if len(query) > MAX_DP_RANKS:
        raise ValueError(f"bootstrap /query answer has {len(query)} dp ranks (at most {MAX_DP_RANKS})")
    ids = []
    for rank in range(len(query)):
        entry = query.get(str(rank))
        engine_id = entry.get("engine_id") if isinstance(entry, dict) else None
        if not isinstance(engine_id, str) or not _ENGINE_ID.fullmatch(engine_id):
            raise ValueError(f"bootstrap /query answer has no usable engine_id for dp rank {rank}")
        ids.append(engine_id)
    return tuple(ids)


def prefill_finish_reason(reply: Any) -> str | None:
    """finish_reason of the prefill's single choice, when the answer has one."""
    choices = reply.get("choices") if isinstance(reply, dict) else None
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        reason = choices[0].get("finish_reason")
        return reason if isinstance(reason, str) else None
    return None


def cached_token_stats(reply: Any) -> Mapping[str, Any]:
    """`kv_transfer_params.cached_token_stats` of a prefill answer, empty when not reported."""
    params = reply.get("kv_transfer_params") if isinstance(reply, dict) else None
    stats = params.get("cached_token_stats") if isinstance(params, dict) else None
    return stats if isinstance(stats, dict) else {}
