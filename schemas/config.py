"""Master-config models: the shape of an InferenceX-compatible `<config-key> -> entry` map."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, RootModel

from .base import Model

PosInt = Annotated[int, Field(gt=0)]
NonEmpty = Annotated[str, Field(min_length=1)]


class Router(Model):
    """The request router in front of the prefill/decode workers."""

    name: NonEmpty
    version: NonEmpty = Field(description="A real release (e.g. 0.1.17) or a 40-hex commit.")


class OffloadBackend(Model):
    """Where offloaded KV lives when kv-offloading is dram (lmcache, mooncake, vllm-simple, hicache)."""

    name: NonEmpty
    version: NonEmpty | None = None


class Worker(Model):
    """One role (prefill or decode) of a disaggregated search-space entry."""

    num_worker: PosInt = Field(description="Engine instances of this role.")
    tp: PosInt
    pp: PosInt | None = None
    dcp_size: PosInt | None = None
    pcp_size: PosInt | None = None
    ep: PosInt | None = None
    dp_attn: bool | None = None
    hardware: NonEmpty | None = Field(None, description="Runner label when this role runs on other hardware.")
    additional_settings: list[str] = Field(
        default_factory=list, description="KEY=VALUE settings; checked against the settings registry."
    )


class SearchSpace(Model):
    """One point family of the sweep: topology plus the concurrencies to run it at."""

    tp: PosInt | None = None
    ep: PosInt | None = None
    dp_attn: bool | None = None
    prefill: Worker | None = None
    decode: Worker | None = None
    conc_list: list[PosInt] | None = Field(None, min_length=1)
    conc_start: PosInt | None = None
    conc_end: PosInt | None = None
    spec_decoding: Literal["none", "mtp", "draft_model"] = "none"
    kv_offloading: Literal["none", "dram"] | None = None
    kv_offload_backend: OffloadBackend | None = None
    router: Router | None = None
    additional_settings: list[str] = Field(
        default_factory=list,
        exclude_if=lambda v: not v,  # entries without it hash (config_sha256) as before the key existed
        description="Single-node entries: KEY=VALUE settings of the server (multinode: per role).",
    )


class FixedSeqLen(Model):
    """Synthetic load with fixed input/output lengths."""

    isl: PosInt
    osl: PosInt
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

    issue: NonEmpty = Field(description="An issue id from configs/known-issues.yaml.")
    workaround: NonEmpty = Field(description="One of that issue's workaround ids.")


class MasterEntry(Model):
    """One config key: image, model, runner, engine and the scenarios to sweep."""

    image: NonEmpty
    model: NonEmpty
    model_prefix: NonEmpty
    runner: NonEmpty
    precision: NonEmpty
    framework: NonEmpty
    multinode: bool
    disagg: bool = False
    router: Router | None = None
    kv_p2p_transfer: NonEmpty | None = None
    known_issue_workarounds: list[IssueWorkaround] = Field(
        default_factory=list,
        exclude_if=lambda v: not v,  # an entry without any hashes (config_sha256) as it did before the key
        description="Known-issue workarounds this config applies (configs/known-issues.yaml); they change "
        "performance, so lint requires them exactly where an issue is triggered on an unfixed image.",
    )
    scenarios: Scenarios


class MasterConfig(RootModel[dict[str, MasterEntry]]):
    """A master config file: config key -> entry."""
