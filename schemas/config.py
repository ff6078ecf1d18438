"""Master-config models: the shape of an InferenceX-compatible `<config-key> -> entry` map."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import ConfigDict, Field, RootModel

from . import base
from .base import (
    MAX_CONCURRENCIES,
    Concurrency,
    ConfigKey,
    Id,
    Label,
    Model,
    ModelId,
    Name,
    Parallel,
    RecipeRef,
    SettingText,
    Tokens,
    Version,
    Workers,
    shape,
)
from .images import REFERENCE, REFERENCE_WORDS

Image = Annotated[str, shape(REFERENCE, "an image reference", max_length=256, allowed=REFERENCE_WORDS)]
_PARALLEL = f"1 to {base.MAX_PARALLEL}."
_CONC = f"Concurrencies to run, each 1 to {base.MAX_CONCURRENCY}; at most {MAX_CONCURRENCIES} per point."
_TOKENS = f"1 to {base.MAX_TOKENS:,} tokens (2^24)."
_SETTINGS = (
    "KEY=VALUE settings; checked against the settings registry. Under every profile: ASCII letters, digits "
    "and '._/:,+=@%-' only, at most 1024 characters."
)


def _absent(value: object) -> bool:
    return value is None


class Router(Model):
    """The request router in front of the prefill/decode workers."""

    name: Name
    version: Version = Field(description="A real release (e.g. 0.1.17) or a 40-hex commit.")


# Offload backends that are part of an engine: their version is the engine's (the image's), never stated.
ENGINE_BACKENDS = {"hicache": "sglang"}


class OffloadBackend(Model):
    """Where offloaded KV lives when kv-offloading is dram (lmcache, mooncake, vllm-simple, hicache)."""

    name: Name
    version: Version | None = None


class Worker(Model):
    """One role (prefill or decode) of a disaggregated search-space entry."""

    num_worker: Workers = Field(
        description=f"Engine instances of this role, 0 to {base.MAX_PARALLEL}. A decode num-worker of 0 is "
        "InferenceX's aggregated run: the prefill workers serve prefill and decode."
    )
    tp: Parallel = Field(description=f"Tensor-parallel GPUs per engine, {_PARALLEL}")
    pp: Parallel | None = Field(None, description=f"Pipeline stages, {_PARALLEL}")
    dcp_size: Parallel | None = Field(None, description=f"Decode context parallel size, {_PARALLEL}")
    pcp_size: Parallel | None = Field(None, description=f"Prefill context parallel size, {_PARALLEL}")
    ep: Parallel | None = Field(None, description=f"Expert-parallel size, {_PARALLEL}")
    dp_attn: bool | None = None
    hardware: Label | None = Field(None, description="Runner label when this role runs on other hardware.")
    additional_settings: list[SettingText] = Field(default_factory=list, description=_SETTINGS)


_RECIPE = (
    "The srt-slurm recipe this point runs (InferenceX's pointer): <path>.yaml, or "
    "<path>.yaml:override_<name> for one section of a schema-2 recipe."
)


class AggregateWorker(Worker):
    """The one role of an aggregated multinode point (disagg: false): workers that prefill and decode."""

    num_worker: Parallel = Field(1, description=f"Engine instances, {_PARALLEL}")


class SearchSpace(Model):
    """One point family of the sweep: topology plus the concurrencies to run it at."""

    tp: Parallel | None = Field(None, description=f"Single-node: GPUs of the server, {_PARALLEL}")
    # Keys added after configs were recorded are left out of the dump when absent, so an entry without
    # them hashes (config_sha256) as it did before they existed.
    pp: Parallel | None = Field(
        None, exclude_if=_absent, description=f"Single-node: pipeline stages, {_PARALLEL}"
    )
    dcp_size: Parallel | None = Field(
        None,
        exclude_if=_absent,
        description=f"Single-node: decode context parallel size, dividing tp; {_PARALLEL}",
    )
    pcp_size: Parallel | None = Field(
        None, exclude_if=_absent, description=f"Single-node: prefill context parallel size, {_PARALLEL}"
    )
    ep: Parallel | None = Field(None, description=f"Single-node: expert-parallel size, {_PARALLEL}")
    dp_attn: bool | None = None
    prefill: Worker | None = None
    decode: Worker | None = None
    worker: AggregateWorker | None = Field(
        None, exclude_if=_absent, description="Multinode, disagg: false: the workers that serve both phases."
    )
    num_nodes: Parallel | None = Field(
        None, exclude_if=_absent, description=f"Multinode, disagg: false: nodes of the point, {_PARALLEL}"
    )
    srt_recipe: RecipeRef | None = Field(None, exclude_if=_absent, description=_RECIPE)
    eval_srt_recipe: RecipeRef | None = Field(
        None, exclude_if=_absent, description="The srt-slurm recipe of this point's accuracy eval, same form."
    )
    # A cap, not a taste: each concurrency is one benchmark run of minutes, and 20,000 of them rendered a
    # 21 MB script that bash could not run.
    conc_list: list[Concurrency] | None = Field(
        None, min_length=1, max_length=MAX_CONCURRENCIES, description=_CONC
    )
    conc_start: Concurrency | None = Field(
        None, description=f"First concurrency of a doubling range, 1 to {base.MAX_CONCURRENCY}."
    )
    conc_end: Concurrency | None = Field(
        None, description=f"Last concurrency of a doubling range, 1 to {base.MAX_CONCURRENCY}."
    )
    spec_decoding: Literal["none", "mtp", "draft_model"] = "none"
    kv_offloading: Literal["none", "dram"] | None = None
    kv_offload_backend: OffloadBackend | None = None
    router: Router | None = None
    kv_p2p_transfer: Name | None = Field(
        None,
        exclude_if=_absent,
        description="Multinode: the KV transfer of this point, when the entry does not name one for all.",
    )
    additional_settings: list[SettingText] = Field(
        default_factory=list,
        exclude_if=lambda v: not v,  # entries without it hash (config_sha256) as before the key existed
        description="Single-node entries: KEY=VALUE settings of the server (multinode: per role); same "
        "shape as a worker's.",
    )


class FixedSeqLen(Model):
    """Synthetic load with fixed input/output lengths."""

    isl: Tokens = Field(description=f"Input sequence length, {_TOKENS}")
    osl: Tokens = Field(description=f"Output sequence length, {_TOKENS}")
    require_power: bool = Field(
        False,
        exclude_if=lambda v: not v,  # groups without it hash (config_sha256) as before the key existed
        description="InferenceX: the points of this group record GPU power (runners with power telemetry).",
    )
    search_space: list[SearchSpace] = Field(min_length=1)


class AgenticCoding(Model):
    """Replayed multi-turn coding-agent traces."""

    dram_utilization: Annotated[float, Field(gt=0, le=1)] | None = Field(
        None, description="Share of the runner's host DRAM given to the KV offload tier, in (0, 1]."
    )
    search_space: list[SearchSpace] = Field(min_length=1)


class Scenarios(Model):
    fixed_seq_len: list[FixedSeqLen] | None = Field(None, min_length=1)
    agentic_coding: list[AgenticCoding] | None = Field(None, min_length=1)


class IssueWorkaround(Model):
    """A known-issue workaround the config applies on purpose; the run's lock file and summary carry it."""

    issue: Id = Field(description="An issue id from configs/known-issues.yaml.")
    workaround: Id = Field(description="One of that issue's workaround ids.")


class MasterEntry(Model):
    """One config key (lowercase ASCII letters, digits, '.', '_' and '-', starting with a letter or digit, at
    most 128 characters: it names folders, files and jobs): image, model, runner, engine and the scenarios to
    sweep."""

    image: Image = Field(description="Container image: registry/org/name:tag or @sha256 digest.")
    model: ModelId = Field(description="Hugging Face model id, org/name.")
    model_prefix: Name
    runner: Label = Field(description="Runner label of runners.yaml.")
    precision: Name
    framework: Name = Field(description="Engine and mode: vllm, vllm-disagg, sglang, sglang-disagg, ...")
    multinode: bool
    disagg: bool = False
    router: Router | None = None
    kv_p2p_transfer: Name | None = None
    known_issue_workarounds: list[IssueWorkaround] = Field(
        default_factory=list,
        exclude_if=lambda v: not v,  # an entry without any hashes (config_sha256) as it did before the key
        description="Known-issue workarounds this config applies (configs/known-issues.yaml); they change "
        "performance, so lint requires them exactly where an issue is triggered on an unfixed image.",
    )
    scenarios: Scenarios


class MasterConfig(RootModel[dict[ConfigKey, MasterEntry]]):
    """A master config file: config key -> entry. Keys are lowercase ASCII names, since they become folder,
    file and job names."""

    model_config = ConfigDict(json_schema_extra=base.keys_are_names)
