"""runners.yaml models: InferenceX's own shape, nothing more, so InferenceX's tools read our file too:
labels -> nodes, and a node shape per label, either in `hardware:` (InferenceX's older files) or in the
`clusters:` record a `cluster:<id>` label names (its newer ones). How a job launches on a runner is
configs/launch.yaml's."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, model_validator
from pydantic_core import PydanticCustomError

from .base import MAX_DRAM_MIB, MAX_GPUS_PER_NODE, EnvName, EnvValue, Ident, Label, Model, bounded

CLUSTER_PREFIX = "cluster:"  # a label naming one exact fleet, whose `clusters:` record says its shape

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


def _no_comma(env: dict[str, str]) -> dict[str, str]:
    if names := sorted(name for name, value in env.items() if "," in value):
        message = (
            f"env values {names} hold ',': InferenceX passes them through srun --export, which splits on it"
        )
        raise PydanticCustomError("shape", "{message}", {"message": message, "fix": "drop the ','"})
    return env


class Cluster(Model):
    """One `clusters.<id>` record of InferenceX's newer runners files: the node shape this repository reads,
    and InferenceX's own launch settings (its scheduler's record, models, env), which it does not."""

    gpus_per_node: GpusPerNode = Field(description=f"GPUs per node, 1 to {MAX_GPUS_PER_NODE}.")
    available_cpu_dram_mib: DramMib | None = Field(
        None, description="Host DRAM per node usable for KV offload."
    )
    arch: Literal["x86_64", "aarch64"]
    scheduler: Literal["slurm"] = Field(
        description="The scheduler; its settings are the record of that name."
    )
    # InferenceX's launcher reads these; lint keeps their place (no stray keys) and leaves their inside to it.
    slurm: dict[str, Any] = Field(
        description="InferenceX's SLURM settings of the cluster (read by InferenceX)."
    )
    env: Annotated[dict[EnvName, EnvValue], AfterValidator(_no_comma)] = Field(default_factory=dict)
    models: dict[str, Any] = Field(default_factory=dict, description="InferenceX's pre-staged checkpoints.")


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
    clusters: dict[Ident, Cluster] = Field(
        default_factory=dict,
        description="InferenceX's newer form: cluster id -> its record, named by the label 'cluster:<id>', "
        "which lists the cluster's runners; each runner in exactly one cluster.",
    )

    @model_validator(mode="after")
    def _clusters_match_labels(self) -> Runners:
        """InferenceX's rules for `clusters:`: every record has its `cluster:<id>` label and every such label
        a record, and once a file has clusters, each runner belongs to exactly one."""
        if not self.clusters:
            return self
        named = {
            k.removeprefix(CLUSTER_PREFIX): v for k, v in self.labels.items() if k.startswith(CLUSTER_PREFIX)
        }
        problems = []
        if unlabelled := sorted(self.clusters.keys() - named.keys()):
            problems.append((f"clusters without a cluster:<id> label: {unlabelled}", "add the label"))
        if undefined := sorted(named.keys() - self.clusters.keys()):
            problems.append((f"cluster labels without a clusters record: {undefined}", "add the record"))
        owners: dict[str, list[str]] = {}
        for cluster, nodes in named.items():
            for node in nodes:
                owners.setdefault(node, []).append(cluster)
        if shared := {node: ids for node, ids in owners.items() if len(ids) > 1}:
            problems.append((f"runners listed under several clusters: {shared}", "list each under one"))
        if orphans := sorted({n for nodes in self.labels.values() for n in nodes} - owners.keys()):
            shown = orphans[:5] + ["..."] * (len(orphans) > 5)
            problems.append((f"runners without a cluster:<id> label: {shown}", "list each under its cluster"))
        if problems:
            message, fix = problems[0]
            raise PydanticCustomError("shape", "{message}", {"message": message, "fix": fix})
        return self

    def shape(self, label: str) -> Hardware | None:
        """The node shape of a runner label: its `hardware:` entry, else the `clusters:` record it names."""
        if label in self.hardware:
            return self.hardware[label]
        cluster = (
            self.clusters.get(label.removeprefix(CLUSTER_PREFIX))
            if label.startswith(CLUSTER_PREFIX)
            else None
        )
        if cluster is None:
            return None
        return Hardware.model_validate(
            {"gpus-per-node": cluster.gpus_per_node, "available-cpu-dram-mib": cluster.available_cpu_dram_mib}
        )
