"""runners.yaml models: InferenceX's own shape (labels -> nodes, hardware -> node shape), nothing more, so
InferenceX's tools read our file too. How a job launches on a runner is configs/launch.yaml's."""

from __future__ import annotations

from pydantic import Field

from .base import Ident, Model, PosInt


class Hardware(Model):
    """One runner label's node shape."""

    available_cpu_dram_mib: PosInt = Field(description="Host DRAM per node usable for KV offload, MiB.")
    gpus_per_node: PosInt


class Runners(Model):
    labels: dict[str, list[Ident]] = Field(description="Runner label -> node names.")
    hardware: dict[str, Hardware] = Field(description="Runner label -> node shape.")
