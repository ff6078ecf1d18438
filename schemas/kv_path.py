"""Which vLLM KV connectors each worker of an entry runs: decided once here, rendered into
--kv-transfer-config by recipes/vllm.py, matched by known issues that a connector set triggers (the
connectors: docs/upstream-facts.md#mooncake-pd and #multiconnector).

A decode is a Mooncake consumer; a prefill a Mooncake producer, joined by LMCacheMPConnector under a
MultiConnector when LMCache is its offload backend. Other engines, and single-node servers, run none.
"""

from __future__ import annotations

from typing import Literal

from . import settings as reg
from .config import MasterEntry
from .entries import Point, kv_transfer

# The connectors vLLM 0.33's KVConnectorFactory registers: what a known-issue trigger may name.
Connector = Literal[
    "ExampleConnector",
    "FlexKVConnectorV1",
    "LMCacheConnectorV1",
    "LMCacheMPConnector",
    "MoRIIOConnector",
    "MooncakeConnector",
    "MooncakeStoreConnector",
    "MultiConnector",
    "NixlConnector",
    "OffloadingConnector",
    "P2pNcclConnector",
    "SimpleCPUOffloadConnector",
    "DecodeBenchConnector",
]
MOONCAKE: Connector = "MooncakeConnector"
LMCACHE_MP: Connector = "LMCacheMPConnector"
MULTI: Connector = "MultiConnector"


def kv_connectors(entry: MasterEntry, role: str, point: Point) -> tuple[Connector, ...]:
    """The connectors of `role`'s engines at `point`: the top-level one first, then its children."""
    if (
        reg.engine_of(entry.framework) != "vllm"
        or role not in reg.ROLES
        or kv_transfer(entry, point.space) != "mooncake"
    ):
        return ()
    backend = point.space.kv_offload_backend
    if role == "prefill" and backend is not None and backend.name == "lmcache":
        return (MULTI, MOONCAKE, LMCACHE_MP)
    return (MOONCAKE,)
