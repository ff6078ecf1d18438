"""Simulator knobs from the environment (SIM_*), plus the vLLM/Mooncake and SGLang variables it honours.

Parsed once at start-up into frozen data; a malformed value stops the simulator with exit code 1 and a
message naming the variable, like any other start-up error.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

FAULT_KINDS = (  # as SIM_FAULT spells them: N a request count, F a fraction
    "crash-at-start",
    "hang-at-start",
    "gpus-lost",
    "rdma-register-fails",
    "corrupt-kv",
    "wrong-answers",
    "crash-after:N",
    "exit0-after:N",
    "hang-after:N",
    "kv-stall-after:N",
    "error-after:N",
    "error-rate:F",
)
_FAULT = re.compile(
    r"(crash-at-start|hang-at-start|gpus-lost|rdma-register-fails|corrupt-kv|wrong-answers)|(crash-after|exit0-after|hang-after|kv-stall-after|error-after):(\d+)|(error-rate):([0-9.]+)"
)


class SettingsError(ValueError):
    """An environment variable the simulator reads is malformed."""


@dataclass(frozen=True)
class Faults:
    crash_at_start: bool = False
    hang_at_start: bool = False  # vLLM's simulator: blocks before serving, silent and idle (a stalled start)
    gpus_lost: bool = False  # the GPUs are gone: exit 1 at start in PyTorch's words (a node fault)
    # SGLang over MoRI: registering the KV pool with the NIC fails; the engine hangs there (sim/mori.py)
    rdma_register_fails: bool = False
    # a decode whose prompt KV came by transfer answers as if that KV were another prompt's: a KV path that
    # corrupts what it moves (fast, plausible, wrong), which only comparing answers catches
    corrupt_kv: bool = False
    # every engine answers a question it can (a made-up sum) wrongly, the same way: a broken model path
    # (weights, an expert-parallel path) that the KV path carries faithfully, which only a graded eval catches
    wrong_answers: bool = False
    crash_after: int | None = None  # exit 1 once this many requests have finished
    exit0_after: int | None = None  # exit 0 once this many requests have finished
    hang_after: int | None = None  # every request after this many stalls forever; /health stays 200
    # every request after this many stalls forever as its KV transfer does, logging Mooncake's own line
    kv_stall_after: int | None = None
    error_after: int | None = (
        None  # every request after this many answers 500 (a broken engine that stays up)
    )
    error_rate: float = 0.0  # this fraction of requests (deterministically spread) answer 500

    @property
    def any(self) -> bool:
        return self != Faults()


@dataclass(frozen=True)
class Settings:
    prefill_s_per_token: float = 20e-6
    decode_s_per_token: float = 2e-3
    kv_s_per_token: float = 1e-6
    load_delay_s: float = 0.0
    default_max_tokens: int = 16
    kv_wait_s: float = 480.0  # decode waits this long for a transfer, then kv_load_failure_policy applies
    kv_keep_s: float = 480.0  # prefill keeps unpulled blocks this long (VLLM_MOONCAKE_ABORT_REQUEST_TIMEOUT)
    bootstrap_port: int = 8998
    host_ip: str | None = None
    hbm_cache_tokens: int = 200_000
    l2_chunk_tokens: int = 256
    l2_capacity_tokens: int = 5_000_000
    model_root: str | None = None
    faults: Faults = Faults()
    # SGLang: the prefill waits this long for the decode named by a request to bootstrap, and for it to take
    # the KV (SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT, 300 in sglang/srt/environ.py)
    bootstrap_timeout_s: float = 300.0
    # SGLang MiniCPM-SALA kv_indptr bug (docs/upstream-facts.md#minicpm-sala): the CUDA-graph replay breaks
    # after this many finished requests, when the flags that trigger it are set
    kv_indptr_after: int = 64
    health_check_timeout_s: float = 20.0  # SGLANG_HEALTH_CHECK_TIMEOUT: /health_generate gives up (503)


def load(
    env: Mapping[str, str] | None = None,
    *,
    role: str | None = None,
    host: str | None = None,
    engine: str = "vllm",
) -> Settings:
    """Settings from `env` (default os.environ); faults filtered by SIM_FAULT_ROLE / SIM_FAULT_HOST.

    `engine` picks whose timeout the decode's KV wait defaults to: vLLM's Mooncake abort timeout (480 s) or
    SGLang's SGLANG_DISAGGREGATION_WAITING_TIMEOUT (300 s); SIM_KV_WAIT_S overrides either."""
    env = os.environ if env is None else env
    abort = _num(env, "VLLM_MOONCAKE_ABORT_REQUEST_TIMEOUT", 480.0)
    if engine == "sglang":
        wait = _num(env, "SGLANG_DISAGGREGATION_WAITING_TIMEOUT", 300.0)
    else:
        wait = abort
    return Settings(
        prefill_s_per_token=_num(env, "SIM_PREFILL_S_PER_TOKEN", Settings.prefill_s_per_token),
        decode_s_per_token=_num(env, "SIM_DECODE_S_PER_TOKEN", Settings.decode_s_per_token),
        kv_s_per_token=_num(env, "SIM_KV_S_PER_TOKEN", Settings.kv_s_per_token),
        load_delay_s=_num(env, "SIM_LOAD_DELAY_S", 0.0),
        default_max_tokens=int(_num(env, "SIM_DEFAULT_MAX_TOKENS", 16, integer=True, minimum=1)),
        kv_wait_s=_num(env, "SIM_KV_WAIT_S", wait),
        kv_keep_s=abort,
        bootstrap_port=int(_num(env, "VLLM_MOONCAKE_BOOTSTRAP_PORT", 8998, integer=True, minimum=1)),
        host_ip=env.get("VLLM_HOST_IP") or None,
        hbm_cache_tokens=int(_num(env, "SIM_HBM_CACHE_TOKENS", 200_000, integer=True)),
        l2_chunk_tokens=int(_num(env, "SIM_L2_CHUNK_TOKENS", 256, integer=True, minimum=1)),
        l2_capacity_tokens=int(_num(env, "SIM_L2_CAPACITY_TOKENS", 5_000_000, integer=True)),
        model_root=env.get("SIM_MODEL_ROOT") or None,
        faults=_faults(env, role=role, host=host),
        bootstrap_timeout_s=_num(env, "SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT", 300.0),
        kv_indptr_after=int(_num(env, "SIM_KV_INDPTR_AFTER", 64, integer=True)),
        health_check_timeout_s=_num(env, "SGLANG_HEALTH_CHECK_TIMEOUT", 20.0),
    )


def _num(
    env: Mapping[str, str], name: str, default: float, *, integer: bool = False, minimum: float = 0
) -> float:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw) if integer else float(raw)
    except ValueError:
        kind = "an integer" if integer else "a number"
        raise SettingsError(f"{name}={raw!r}: must be {kind}") from None
    if not math.isfinite(value) or value < minimum:
        raise SettingsError(f"{name}={raw!r}: must be >= {minimum}")
    return value


def parse_faults(text: str) -> Faults:
    """SIM_FAULT, comma-separated: crash-at-start, hang-at-start, gpus-lost, rdma-register-fails,
    corrupt-kv, wrong-answers, crash-after:N, exit0-after:N,
    hang-after:N, kv-stall-after:N, error-after:N, error-rate:F."""
    values: dict[str, object] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        match = _FAULT.fullmatch(item)
        if not match:
            raise SettingsError(f"SIM_FAULT: {item!r} is not one of {', '.join(FAULT_KINDS)}")
        if match.group(1):
            values[match.group(1).replace("-", "_")] = True
        elif match.group(2):
            values[match.group(2).replace("-", "_")] = int(match.group(3))
        else:
            rate = float(match.group(5))
            if not 0 <= rate <= 1:
                raise SettingsError(f"SIM_FAULT: error-rate must be within 0..1, got {rate}")
            values["error_rate"] = rate
    return Faults(**values)  # type: ignore[arg-type]


def _faults(env: Mapping[str, str], *, role: str | None, host: str | None) -> Faults:
    faults = parse_faults(env.get("SIM_FAULT", ""))
    want_role, want_host = env.get("SIM_FAULT_ROLE", ""), env.get("SIM_FAULT_HOST", "")
    if want_role and want_role not in ("prefill", "decode", "plain"):
        raise SettingsError(f"SIM_FAULT_ROLE={want_role!r}: must be prefill, decode or plain")
    if (want_role and want_role != role) or (want_host and want_host != host):
        return Faults()
    return faults
