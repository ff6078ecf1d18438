"""configs/launch.yaml: how a job launches on each runner label. Real and local clusters differ only in
this data (SLURM, container, devices, addresses, timeouts, benchmark length, engine environment,
tokenizer and trace source, which engine build runs); the defaults here are a real GPU cluster's.

InferenceX's own tools read configs/runners.yaml, never this file: its validator refuses keys it does not
know, so the launch facts of a site live here, keyed by the same runner labels.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from .base import (
    MAX_WAIT_S,
    AbsPath,
    EnvInt,
    EnvName,
    EnvValue,
    Ident,
    Label,
    Model,
    RelPath,
    WaitSeconds,
    shape,
)

Engine = Literal["vllm", "sglang"]
HMS = shape(
    r"[0-9]{1,3}:[0-5][0-9]:[0-5][0-9]", "a time limit", max_length=9, allowed="H:MM:SS, as in 04:00:00"
)
SettingName = shape(r"[A-Z][A-Z0-9_]*", "a setting name", max_length=128, allowed="UPPER_SNAKE_CASE ASCII")
ShipName = shape(
    r"[a-z][a-z0-9-]*", "a folder name", max_length=64, allowed="lowercase ASCII letters, digits and '-'"
)
_WAIT = f"Seconds, 1 to {MAX_WAIT_S} (a day: a wait longer than that is a hang)."


class Timeouts(Model):
    """Seconds each wait of the job may take before it fails naming what it waited for."""

    barrier: WaitSeconds = Field(600, description=f"Every node at the start barrier. {_WAIT}")
    lmcache_ready: WaitSeconds = Field(300, description=f"LMCache server /healthcheck 200. {_WAIT}")
    engine_ready: WaitSeconds = Field(
        3600, description=f"Engine /health 200 (real engines load ~557 GB of weights). {_WAIT}"
    )
    router_ready: WaitSeconds = Field(
        300, description=f"Router healthy with every prefill and decode registered. {_WAIT}"
    )


class Benchmark(Model):
    """How the benchmark client runs here."""

    seconds: WaitSeconds = Field(
        600, description=f"AIPerf --benchmark-duration per concurrency (and per soak phase). {_WAIT}"
    )
    tokenizer: RelPath | None = Field(
        None,
        description="Tokenizer folder under the run's recipe folder (shipped, see ship); none: the model's "
        "own "
        "folder (AIPerf's builtin tokenizer downloads even offline).",
    )
    agentic_input: RelPath | None = Field(
        None,
        description="Multi-turn trace file under the run's recipe folder for agentic scenarios; none: the "
        "public dataset the config names (WEKA_LOADER_OVERRIDE).",
    )
    prompt_corpus: Literal["random"] | None = Field(
        None, description="AIPerf --prompt-corpus for fixed-seq-len prompts (random: for word tokenizers)."
    )


class LaunchProfile(Model):
    """One runner label's launch facts."""

    gpu_vendor: Literal["amd", "nvidia", "none"] = Field(
        description="Device mapping of the container: amd -> /dev/kfd, /dev/dri; nvidia -> --gpus all; none."
    )
    engine_build: Literal["image", "simulator"] = Field(
        "image",
        description="Which engines run: the image's own (a real cluster), or this repository's simulator "
        "(sim/bin, the local cluster).",
    )
    partition: Ident = Field(description="SLURM partition.")
    account: Ident | None = Field(None, description="SLURM account, if the cluster needs one.")
    time_limit: HMS = Field("04:00:00", description="sbatch --time, H:MM:SS.")
    container_runtime: Literal["docker", "pyxis", "none"] = Field(
        description="docker (host network), pyxis/enroot (srun --container-image), none (processes on the "
        "host)."
    )
    model_root: AbsPath = Field(
        description="Absolute path where model weights live (mounted into containers)."
    )
    node_address: Literal["interface", "slurm-nodeaddr"] = Field(
        "interface",
        description="How a node finds the address it advertises to peers (VLLM_HOST_IP): the IPv4 of "
        "data-plane-interface, or the NodeAddr SLURM knows it by (local cluster: 127.0.0.x per node).",
    )
    data_plane_interface: Ident | None = Field(None, description="NIC whose IPv4 is advertised to peers.")
    loopback: bool = Field(
        False,
        description="Nodes may advertise loopback addresses (all nodes on one host: the local cluster).",
    )
    private_bind: Literal["loopback", "node-address"] = Field(
        "loopback",
        description="Where node-private services (LMCache) listen: 127.0.0.1, or the node's own address "
        "when several nodes share one host's loopback.",
    )
    nic_devices: list[Ident] = Field(default_factory=list, description="RDMA devices for Mooncake rdma.")
    timeouts: Timeouts = Field(default_factory=Timeouts)
    benchmark: Benchmark = Field(default_factory=Benchmark)
    ship: dict[ShipName, RelPath] = Field(
        default_factory=dict,
        description="Repository folders copied into the run's recipe folder under these names "
        "(e.g. traces: sim/traces), for what the benchmark reads.",
    )
    engine_env: dict[Engine, dict[EnvName, EnvValue | EnvInt]] = Field(
        default_factory=dict,
        description="Environment exported to every engine of this engine kind here: 64-bit integers, or "
        "printable ASCII without quotes, backslash, '$' or '`'.",
    )
    engine_env_from_settings: dict[Engine, dict[EnvName, SettingName]] = Field(
        default_factory=dict,
        description="Environment exported to the engines from a setting's resolved value (NAME: SETTING).",
    )

    @model_validator(mode="after")
    def _interface_when_read(self):
        if self.node_address == "interface" and self.data_plane_interface is None:
            raise ValueError("node-address: interface needs data-plane-interface")
        return self

    @model_validator(mode="after")
    def _benchmark_files_are_shipped(self):
        for name in ("tokenizer", "agentic_input"):
            path = getattr(self.benchmark, name)
            if path is not None and path.split("/")[0] not in self.ship:
                raise ValueError(
                    f"benchmark.{name.replace('_', '-')} {path!r} is not under a shipped folder "
                    f"(ship: {', '.join(self.ship) or 'nothing'})"
                )
        return self


class LaunchProfiles(Model):
    profiles: dict[Label, LaunchProfile] = Field(
        description="Runner label (as in runners.yaml, same shape) -> launch facts."
    )
