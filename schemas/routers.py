"""Known routers and what topologies and frameworks each can serve."""

from __future__ import annotations

from dataclasses import dataclass

from .pins import project_version

# This repository's own proxy (proxy/) carries the repository's version (pyproject.toml).
PD_PROXY = "pd-proxy"
PD_PROXY_VERSION = project_version()


@dataclass(frozen=True)
class RouterSpec:
    frameworks: tuple[str, ...]  # frameworks whose workers it can front
    transfers: tuple[str, ...]  # kv-p2p-transfer values whose PD contract it speaks
    max_prefill: int | None = None  # None: any number of prefill workers
    max_decode: int | None = None
    note: str = ""


ROUTERS: dict[str, RouterSpec] = {
    PD_PROXY: RouterSpec(("vllm-disagg",), ("mooncake",)),
    "vllm-router": RouterSpec(("vllm-disagg",), ("mooncake", "nixl")),
    "sglang-router": RouterSpec(("sglang-disagg",), ("mooncake", "mori", "nixl")),
    # ATOM's own PD router (ROCm/ATOM atom/mesh, a commit of that repository): its images ship it
    "atomesh": RouterSpec(("atom-disagg",), ("mooncake",)),
    "inferencex-mooncake-lmcache-proxy": RouterSpec(
        ("vllm-disagg",),
        ("mooncake",),
        max_prefill=1,
        max_decode=1,
        note="InferenceX PR #1924's proxy forwards to the first prefill and decode only",
    ),
}


# The PD router an engine's image ships, which a disaggregated entry naming no router runs (as InferenceX's
# launch does): its version is the image's.
IMAGE_ROUTERS = {"sglang-disagg": "sglang-router"}


@dataclass(frozen=True)
class ImageRouter:
    """A disaggregated entry's router when it names none: the one its engine's image ships."""

    name: str
    image: str

    @property
    def version(self) -> str:
        return f"as in {self.image}"
