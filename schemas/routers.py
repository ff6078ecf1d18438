"""Known routers and what topologies and frameworks each can serve."""

from __future__ import annotations

from dataclasses import dataclass

from .pins import project_version

# This repository's own proxy (proxy/) carries the repository's version (pyproject.toml).
PD_PROXY = "pd-proxy"
PD_PROXY_VERSION = project_version()


@dataclass(frozen=True)
class RouterSpec:
    frameworks: tuple  # frameworks whose workers it can front
    transfers: tuple  # kv-p2p-transfer values whose PD contract it speaks
    max_prefill: int | None = None  # None: any number of prefill workers
    max_decode: int | None = None
    note: str = ""


ROUTERS: dict[str, RouterSpec] = {
    PD_PROXY: RouterSpec(("vllm-disagg",), ("mooncake",)),
    "vllm-router": RouterSpec(("vllm-disagg",), ("mooncake", "nixl")),
    "sglang-router": RouterSpec(("sglang-disagg",), ("mooncake", "mori", "nixl")),
    "inferencex-mooncake-lmcache-proxy": RouterSpec(
        ("vllm-disagg",),
        ("mooncake",),
        max_prefill=1,
        max_decode=1,
        note="InferenceX PR #1924's proxy forwards to the first prefill and decode only",
    ),
}
