"""runners.yaml models: InferenceX's labels/hardware, extended with what a launch needs."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from .base import Model

PosInt = Annotated[int, Field(gt=0)]


class Hardware(Model):
    """One runner label's node shape. The launch keys are optional for InferenceX compatibility;
    the strict profile requires them for every runner a config uses."""

    available_cpu_dram_mib: PosInt = Field(description="Host DRAM per node usable for KV offload, MiB.")
    gpus_per_node: PosInt
    gpu_vendor: Literal["amd", "nvidia", "none"] | None = Field(
        None, description="Decides device mapping: amd -> /dev/kfd,/dev/dri; none -> simulated."
    )
    partition: str | None = Field(None, min_length=1, description="SLURM partition.")
    account: str | None = Field(None, min_length=1, description="SLURM account, if the cluster needs one.")
    time_limit: str | None = Field(
        None, pattern=r"^\d{1,3}:\d{2}:\d{2}$", description="sbatch --time, H:MM:SS."
    )
    container_runtime: Literal["docker", "pyxis", "none"] | None = Field(
        None, description="docker (host network), pyxis/enroot (srun --container-image), none (local sim)."
    )
    model_root: str | None = Field(None, pattern=r"^/", description="Absolute path where model weights live.")
    data_plane_interface: str | None = Field(
        None, min_length=1, description="NIC whose IPv4 is advertised to peers (VLLM_HOST_IP); 'lo' locally."
    )
    nic_devices: list[str] = Field(default_factory=list, description="RDMA devices for Mooncake rdma.")


class Runners(Model):
    labels: dict[str, list[str]] = Field(description="Runner label -> node names.")
    hardware: dict[str, Hardware] = Field(description="Runner label -> node shape and launch facts.")
