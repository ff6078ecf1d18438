"""The vLLM >= 0.16 Mooncake PD request contract (docs/upstream-facts.md#mooncake-pd) as pure checks, no I/O.

Each rule has a short id. `rejects=True` means real vLLM answers 400 or the Mooncake transfer cannot
work; `rejects=False` means vLLM accepts the request but it walks into a known hazard (first-token
stop, silent recompute). The simulator answers 400 for rejecting violations (a KV load failure for
TRANSFER_FAILURE_RULES) and serves, but counts, hazards.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeGuard
from urllib.parse import urlsplit

from proxy import validate

ENDPOINTS = ("/v1/chat/completions", "/v1/completions")
TRANSFER_ID = re.compile(r"xfer-[0-9a-f]+")
PREFILL_KEYS = frozenset({"do_remote_decode", "do_remote_prefill", "transfer_id", "cached_token_stats"})
DECODE_KEYS = frozenset(
    {"do_remote_decode", "do_remote_prefill", "transfer_id", "remote_engine_id", "remote_bootstrap_addr"}
)
# What the <= 0.15 (NIXL-like) contract sent instead of transfer_id/remote_bootstrap_addr.
OLD_CONTRACT_KEYS = frozenset({"remote_host", "remote_port", "remote_block_ids", "remote_request_id"})
FIRST_TOKEN_STOP = "first-token-stop hazard (transfer dropped, decode waits)"


@dataclass(frozen=True)
class Violation:
    rule: str
    message: str
    rejects: bool


def _reject(rule: str, message: str) -> Violation:
    return Violation(rule, message, True)


def _hazard(rule: str, message: str) -> Violation:
    return Violation(rule, message, False)


def is_int(value: Any) -> TypeGuard[int]:
    """JSON integer (bool is not an int here, as in vLLM's pydantic models)."""
    return isinstance(value, int) and not isinstance(value, bool)


# Rejections where the request is well formed but the named prefill cannot serve the transfer (stale
# engine id after a prefill restart, no bootstrap server there): real vLLM hangs, then applies
# kv_load_failure_policy, so the simulator treats them as KV load failures instead of a 400.
TRANSFER_FAILURE_RULES = frozenset({"decode-engine-mismatch", "decode-bootstrap-unknown"})


def has_rejection(violations: list[Violation]) -> bool:
    return any(v.rejects for v in violations)


def check_openai_body(body: Any, *, endpoint: str) -> list[Violation]:
    """Request-shape rules vLLM's OpenAI server applies to every request (400 when broken): vLLM's own
    field rules, lax as its pydantic models are ("yes" a bool, "5" an int), from proxy/validate.py -- the one
    copy, held to a real vLLM by tests/proxy/check_vllm.py -- so that the simulated decode refuses exactly
    what the proxy refuses before its prefill leg."""
    if endpoint not in ENDPOINTS:
        raise ValueError(f"endpoint must be one of {ENDPOINTS}, got {endpoint!r}")
    if not isinstance(body, dict):
        return [_reject("body", "request body must be a JSON object")]
    found = validate.first_problem(body, endpoint)
    return [] if found is None else [_reject(_rule_id(found[0], endpoint), found[1])]


def _rule_id(name: str, endpoint: str) -> str:
    """proxy/validate.py's rule _max_tokens is this contract's body-max-tokens, _prompt body-messages or
    body-prompt (by endpoint), _stream_options stream-options."""
    name = name.strip("_").replace("_", "-")
    if name == "prompt":
        return "body-messages" if endpoint == "/v1/chat/completions" else "body-prompt"
    return name if name == "stream-options" else f"body-{name}"


def effective_max_tokens(body: dict) -> Any:
    """The output cap vLLM applies: chat prefers max_completion_tokens over the deprecated max_tokens."""
    value = body.get("max_completion_tokens")
    return value if value is not None else body.get("max_tokens")


def check_prefill_request(body: dict, *, endpoint: str) -> list[Violation]:
    """Rules for the prefill leg a PD proxy sends to a kv_producer (docs/upstream-facts.md#mooncake-pd)."""
    out = check_openai_body(body, endpoint=endpoint)
    if not isinstance(body, dict):
        return out
    params = body.get("kv_transfer_params")
    if not isinstance(params, dict):
        out.append(_reject("prefill-kv-params", "kv_transfer_params must be an object on the prefill leg"))
    else:
        out += _prefill_params(params)
    return out + _prefill_limits(body) + _prefill_hazards(body)


def _prefill_params(params: dict) -> list[Violation]:
    out: list[Violation] = []
    if params.get("do_remote_decode") is not True:
        out.append(_reject("prefill-do-remote-decode", "kv_transfer_params.do_remote_decode must be true"))
    if "do_remote_prefill" not in params:
        out.append(_hazard("prefill-do-remote-prefill", "set kv_transfer_params.do_remote_prefill: false"))
    elif params["do_remote_prefill"] is not False:
        out.append(_reject("prefill-do-remote-prefill", "kv_transfer_params.do_remote_prefill must be false"))
    out += _transfer_id(params, leg="prefill")
    for key in sorted(set(params) - PREFILL_KEYS):
        out.append(_hazard("prefill-kv-params-extra", f"kv_transfer_params.{key} is not a prefill-leg key"))
    return out


def _transfer_id(params: dict, *, leg: str) -> list[Violation]:
    value = params.get("transfer_id")
    if value is None:
        hint = " (old <= 0.15 contract?)" if OLD_CONTRACT_KEYS & set(params) else ""
        return [_reject(f"{leg}-transfer-id", f"Missing transfer_id in kv_transfer_params{hint}")]
    if not isinstance(value, str) or not value:
        return [_reject(f"{leg}-transfer-id", f"transfer_id must be a non-empty string, got {value!r}")]
    if not TRANSFER_ID.fullmatch(value):
        return [_hazard(f"{leg}-transfer-id", f"transfer_id {value!r} is not of the form xfer-<hex>")]
    return []


def _prefill_limits(body: dict) -> list[Violation]:
    out: list[Violation] = []
    if body.get("stream") is not False:
        if body.get("stream") is True:
            out.append(_reject("prefill-stream", "the prefill leg must not stream (stream: false)"))
        elif "stream" not in body:
            out.append(_hazard("prefill-stream", "the prefill leg should set stream: false explicitly"))
    if body.get("max_tokens") != 1 or not is_int(body.get("max_tokens")):
        out.append(_reject("prefill-max-tokens", f"max_tokens must be 1, got {body.get('max_tokens')!r}"))
    if body.get("max_completion_tokens") is not None and body["max_completion_tokens"] != 1:
        got = body["max_completion_tokens"]
        out.append(_reject("prefill-max-completion-tokens", f"max_completion_tokens must be 1, got {got!r}"))
    min_tokens = body.get("min_tokens")
    if is_int(min_tokens) and min_tokens > 1:
        out.append(_reject("prefill-min-tokens", f"min_tokens > max_tokens on the prefill leg: {min_tokens}"))
    elif min_tokens != 1:
        out.append(_hazard("prefill-min-tokens", "set min_tokens: 1 so the prefill token cannot be EOS"))
    return out


def _prefill_hazards(body: dict) -> list[Violation]:
    """What lets the single prefill token stop the request, so the transfer is dropped (decode hangs)."""
    out: list[Violation] = []
    if body.get("stop"):
        out.append(_hazard("prefill-stop", f"stop on the prefill leg: {FIRST_TOKEN_STOP}"))
    if body.get("stop_token_ids"):
        out.append(_hazard("prefill-stop-token-ids", f"stop_token_ids set: {FIRST_TOKEN_STOP}"))
    if body.get("ignore_eos") is not True:
        out.append(_hazard("prefill-ignore-eos", f"ignore_eos is not true: {FIRST_TOKEN_STOP}"))
    if body.get("min_completion_tokens") is not None:
        out.append(_hazard("prefill-min-completion-tokens", "drop min_completion_tokens on the prefill leg"))
    n = body.get("n", 1)
    if is_int(n) and n > 1:
        out.append(_hazard("prefill-n", f"n must be clamped to 1 on the prefill leg, got {n}"))
    return out


def check_decode_request(body: dict, *, endpoint: str, engines: Mapping[str, str]) -> list[Violation]:
    """Rules for the decode leg sent to a kv_consumer; `engines` maps bootstrap address -> engine id."""
    out = check_openai_body(body, endpoint=endpoint)
    if not isinstance(body, dict):
        return out
    params = body.get("kv_transfer_params")
    if params is None:
        return out + [_hazard("decode-kv-params", "no kv_transfer_params: decode silently recomputes")]
    if not isinstance(params, dict):
        return out + [_reject("decode-kv-params", "kv_transfer_params must be an object")]
    if "do_remote_decode" not in params:
        out.append(_hazard("decode-do-remote-decode", "set kv_transfer_params.do_remote_decode: false"))
    elif params["do_remote_decode"] is not False:
        out.append(_reject("decode-do-remote-decode", "kv_transfer_params.do_remote_decode must be false"))
    if params.get("do_remote_prefill") is not True:
        return out + [_hazard("decode-do-remote-prefill", "do_remote_prefill is not true: decode recomputes")]
    out += _transfer_id(params, leg="decode")
    out += _remote_engine(params, engines)
    for key in sorted(set(params) - DECODE_KEYS):
        out.append(_hazard("decode-kv-params-extra", f"kv_transfer_params.{key} is not a decode-leg key"))
    return out


def _remote_engine(params: dict, engines: Mapping[str, str]) -> list[Violation]:
    addr, engine_id = params.get("remote_bootstrap_addr"), params.get("remote_engine_id")
    out: list[Violation] = []
    if not isinstance(engine_id, str) or not engine_id:
        out.append(_reject("decode-remote-engine-id", f"remote_engine_id is required, got {engine_id!r}"))
    if not isinstance(addr, str) or not addr:
        return out + [_reject("decode-bootstrap-addr", f"remote_bootstrap_addr is required, got {addr!r}")]
    if problem := bootstrap_addr_problem(addr):
        return out + [_reject("decode-bootstrap-addr", problem)]
    known = engines.get(addr, engines.get(addr.rstrip("/")))
    if known is None:
        out.append(_reject("decode-bootstrap-unknown", f"no prefill bootstrap server known at {addr}"))
    elif isinstance(engine_id, str) and engine_id and engine_id != known:
        out.append(
            _reject(
                "decode-engine-mismatch",
                f"remote_engine_id {engine_id!r} does not match {addr}/query ({known!r})",
            )
        )
    return out


def bootstrap_addr_problem(addr: str) -> str | None:
    """Why a remote_bootstrap_addr cannot be used, or None: it must be http://host:port."""
    if not addr.startswith("http://"):
        return f"remote_bootstrap_addr must start with http://, got {addr!r}"
    try:
        parts = urlsplit(addr)
        port = parts.port
    except ValueError:
        return f"remote_bootstrap_addr {addr!r} is not http://host:port"
    if not parts.hostname or port is None or parts.path not in ("", "/") or parts.query:
        return f"remote_bootstrap_addr {addr!r} is not http://host:port"
    return None
