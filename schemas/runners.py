"""runners.yaml models: InferenceX's own shape (labels -> nodes, hardware -> node shape), nothing more, so
InferenceX's tools read our file too. How a job launches on a runner is configs/launch.yaml's."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, Field
from pydantic_core import PydanticCustomError

from .base import MAX_DRAM_MIB, MAX_GPUS_PER_NODE, Ident, Label, Model, bounded

# Bounded so the LMCache L1 pool derived from it (DRAM x dram-utilization) stays a sane number too.
DramMib = Annotated[int, bounded(1, MAX_DRAM_MIB)]
GpusPerNode = Annotated[int, bounded(1, MAX_GPUS_PER_NODE)]


def _some_nodes(nodes: list[str]) -> list[str]:
    if not nodes:
        message = "a runner label lists no nodes; InferenceX refuses an empty label list"
        raise PydanticCustomError("shape", "{message}", {"message": message, "fix": "list its node names"})
    return nodes


Nodes = Annotated[list[Ident], AfterValidator(_some_nodes)]


class Hardware(Model):
    """One runner label's node shape."""

    available_cpu_dram_mib: DramMib | None = Field(
        None,
        description=f"Host DRAM per node usable for KV offload, MiB; 1 to {MAX_DRAM_MIB:,} (64 TiB). Read "
        "only to size a host-DRAM KV tier (LMCache's L1): needed where a config offloads KV to DRAM.",
    )
    gpus_per_node: GpusPerNode = Field(description=f"GPUs per node, 1 to {MAX_GPUS_PER_NODE}.")


class Runners(Model):
    labels: dict[Label, Nodes] = Field(
        default_factory=dict,
        description="Runner label (a lowercase name with at most one ':', as in h100 or cluster:mi355x-amds; "
        "at most 64 characters) -> node names. Optional here: SLURM places the job; read by lint's node "
        "count, the node ledger and the recipe pages.",
    )
    hardware: dict[Label, Hardware] = Field(
        default_factory=dict,
        description="Runner label -> node shape (optional in InferenceX; strict lint requires the shape of "
        "every runner a config uses).",
    )
