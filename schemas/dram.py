"""The KV-offload DRAM budget of one server, as InferenceX states it, and the LMCache L1 pool it sizes.

InferenceX budgets host DRAM per server in decimal GB: the runner's available-cpu-dram-mib, capped at 3 TB
a server, times dram-utilization, times the share of the node's GPUs the offloading engine uses (an MI355X
node at 0.80 gives 2399 GB with all 8 GPUs, 1199 GB with 4 of them). The engine that offloads is the
prefill worker of a disaggregated point and the server of a single-node one; its GPU footprint is
tp x pp x pcp-size (dcp-size splits tp and adds none). LMCache's --l1-size-gb counts GiB (2^30 bytes), so
the pool is the budget in whole GiB: never above it.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

BYTES_PER_MIB = 2**20
BYTES_PER_GB = 10**9  # InferenceX's total-cpu-dram-gb is decimal
BYTES_PER_GIB = 2**30  # lmcache server --l1-size-gb multiplies by 2^30
CAP_GB = 3000  # at most 3 TB of DRAM per server
CAP_MIB = CAP_GB * BYTES_PER_GB // BYTES_PER_MIB  # 2,861,022 MiB: the cap as InferenceX writes it
MAX_L1_GIB = CAP_GB * BYTES_PER_GB // BYTES_PER_GIB  # 2793: the largest pool any node can get


@dataclass(frozen=True)
class DramBudget:
    """One server's KV-offload DRAM and every number it is derived from (env.sh's comment shows them)."""

    available_mib: int  # the runner's available-cpu-dram-mib
    cap_gb: int  # at most this much a server
    cap_mib: int  # the cap in MiB, as InferenceX writes it
    utilization: str  # the scenario's dram-utilization, as written
    gpus_used: int  # GPUs of the node the offloading engine uses
    gpus_per_node: int
    budget_gb: int  # InferenceX's total-cpu-dram-gb
    l1_gib: int  # lmcache --l1-size-gb: the budget in whole GiB


def footprint(tp: int, pp: int | None, pcp_size: int | None) -> int:
    """GPUs one engine instance spans: tp x pp x pcp-size."""
    return tp * (pp or 1) * (pcp_size or 1)


def gpus_used(gpus: int, gpus_per_node: int) -> int | None:
    """GPUs of one node an engine of `gpus` uses: all of them when it spans whole nodes, its own count when
    it tiles a node; None when it does neither (InferenceX refuses to budget such a point)."""
    if gpus > gpus_per_node:
        return gpus_per_node if gpus % gpus_per_node == 0 else None
    return gpus if gpus_per_node % gpus == 0 else None


def budget(available_mib: int, gpus_per_node: int, utilization: float, gpus: int) -> DramBudget | None:
    """The budget of a server whose offloading engine spans `gpus` GPUs (None: it does not tile a node)."""
    used = gpus_used(gpus, gpus_per_node)
    if used is None:
        return None
    capped = min(available_mib, CAP_MIB)
    share = Decimal(capped) * BYTES_PER_MIB * Decimal(str(utilization)) * used / gpus_per_node
    gb = int(share / BYTES_PER_GB)
    return DramBudget(
        available_mib=available_mib,
        cap_gb=CAP_GB,
        cap_mib=CAP_MIB,
        utilization=str(utilization),
        gpus_used=used,
        gpus_per_node=gpus_per_node,
        budget_gb=gb,
        l1_gib=gb * BYTES_PER_GB // BYTES_PER_GIB,
    )
