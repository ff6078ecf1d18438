"""configs/models.yaml: what each model needs beyond a config's topology, as data. Per engine and GPU
vendor the flags, environment and setting defaults a known-working launch used (InferenceX's
models_vllm.yaml keeps the same per model; `make parity` holds the rendered lines against its); the facts
of its architecture that engines and lint judge a launch by (heads vs TP, experts vs EP, context length);
and what every consumer of the model folder needs (remote code). Adding a model is an edit of that file
only (docs/add-a-model.md)."""

from __future__ import annotations

from typing import Annotated, Any, Literal, Self

from pydantic import Field, model_validator

from .base import EnvInt, EnvName, EnvValue, Model, ModelId, SettingText, bounded, prose, shape
from .findings import did_you_mean
from .launch import DERIVED_ENV, Arg, Engine
from .settings import REGISTRY, SettingError, flag_owner, lookup, resolve, split_setting

# The GPU vendor a recipe block is for (a launch profile's gpu-vendor), or `any`: every vendor.
Vendor = Literal["any", "amd", "nvidia", "none"]
ConfigName = Annotated[
    str,
    shape(
        r"[A-Za-z_][A-Za-z0-9_]*",
        "a config.json key",
        max_length=64,
        allowed="ASCII letters, digits and '_', as in n_routed_experts",
    ),
]
# A flag's value that is JSON (--compilation-config): written as a YAML mapping, serialized on render.
JsonArg = dict[ConfigName, Any]
Count = Annotated[int, bounded(1, 2**20)]
MAX_SEQ_WORDS = 4096


class Seq(Model):
    """The whole numbers first..last, each its own word: a flag's list value (--cuda-graph-bs 1 2 ... 160)."""

    seq: list[Count] = Field(min_length=2, max_length=2, description="[first, last], both included.")

    @model_validator(mode="after")
    def _ordered_and_short(self) -> Self:
        first, last = self.seq
        if not first <= last < first + MAX_SEQ_WORDS:
            raise ValueError(f"seq [{first}, {last}]: first <= last, at most {MAX_SEQ_WORDS} words")
        return self

    def words(self) -> list[int]:
        return list(range(self.seq[0], self.seq[1] + 1))


# Tried in order: a word, a number, a number range, then a JSON mapping.
EngineArg = Annotated[Arg | EnvInt | Seq | JsonArg, Field(union_mode="left_to_right")]
Size = Annotated[int, bounded(0, 2**24)]
Source = Annotated[str, prose("a source", 400)]


class ExpertKeys(Model):
    """The config.json key of each expert fact: model families name them differently."""

    routed: ConfigName
    per_token: ConfigName
    intermediate_size: ConfigName
    shared: ConfigName | None = None
    first_dense_layers: ConfigName | None = None


class Experts(Model):
    """Mixture of experts: what EP is judged by (routed experts split over the EP group)."""

    routed: Count
    per_token: Count
    intermediate_size: Count
    shared: Size = 0
    first_dense_layers: Size = 0
    keys: ExpertKeys = Field(description="Where config.json holds each fact above.")

    @model_validator(mode="after")
    def _stated_facts_have_keys(self) -> Self:
        for fact in ("shared", "first_dense_layers"):
            if getattr(self, fact) and getattr(self.keys, fact) is None:
                raise ValueError(f"{fact.replace('_', '-')} is stated: keys.{fact.replace('_', '-')} too")
        return self


class Mla(Model):
    """Multi-head latent attention (DeepSeek-V3 style): one compressed KV per token, whatever the heads."""

    q_lora_rank: Count
    kv_lora_rank: Count
    qk_nope_head_dim: Count
    qk_rope_head_dim: Count
    v_head_dim: Count


class Wrapper(Model):
    """The multimodal model whose text model this is (its vision tower at defaults)."""

    architecture: ConfigName
    model_type: ConfigName


class Architecture(Model):
    """The facts of the model's config.json that engines judge a launch by; `config`: the other keys its
    engine's config class needs, verbatim (rope, routing, layer kinds)."""

    architecture: ConfigName
    model_type: ConfigName
    layers: Count
    hidden_size: Count
    heads: Count
    kv_heads: Count
    intermediate_size: Count | None = Field(
        None, description="Dense MLP width; absent where config.json has none (DeepSeek-V4: MoE layers only)."
    )
    vocab_size: Count
    max_positions: Count
    head_dim: Count | None = None
    experts: Experts | None = None
    mla: Mla | None = None
    wrapper: Wrapper | None = None
    config: dict[ConfigName, Any] = Field(default_factory=dict)


class DpAttentionArgs(Model):
    """Flags of a worker running data-parallel attention (dp-attn): `args` added on every role, and each
    role's own in place of the recipe's (a known-working launch tunes DP workers apart: its dp blocks)."""

    args: list[EngineArg] = Field(default_factory=list, description="Flags on every DP-attention worker.")
    prefill_args: list[EngineArg] = Field(
        default_factory=list, description="In place of the recipe's prefill-args on a DP-attention prefill."
    )
    decode_args: list[EngineArg] = Field(
        default_factory=list, description="In place of the recipe's decode-args on a DP-attention decode."
    )
    settings: list[SettingText] = Field(
        default_factory=list,
        description="Setting defaults of a DP-attention worker, over the recipe's (the config's own win).",
    )
    env: dict[EnvName, EnvValue | EnvInt] = Field(
        default_factory=dict, description="Environment of a DP-attention worker's engine, on its own line."
    )


MoriDtype = Annotated[
    str,
    shape(
        r"[a-z0-9_]*",
        "a MoRI dtype name",
        max_length=32,
        allowed="lowercase letters, digits and '_' (auto, fp8_direct_cast), or empty: SGLang's choice",
    ),
]


class MoriRole(Model):
    """One role's MoRI knobs on its engine line (SGLANG_MORI_*): pinned by the model where a known-working
    launch pins them, else what the launch derives (dispatch) or MoRI's defaults."""

    dispatch_tokens_per_rank: Count | None = Field(
        None,
        description="SGLANG_MORI_NUM_MAX_DISPATCH_TOKENS_PER_RANK pinned; absent: derived from the sweep "
        "(docs/sglang-mori.md).",
    )
    moe_max_input_tokens: Count | Literal["unset"] | None = Field(
        None,
        description="SGLANG_MORI_MOE_MAX_INPUT_TOKENS; absent: MoRI's role default (32768 prefill, 2703 "
        "decode); unset: not exported (SGLang sizes it).",
    )
    combine_dtype: MoriDtype = Field("", description="SGLANG_MORI_COMBINE_DTYPE (empty: SGLang's choice).")


# MoRI's MoE input budget per role where a model states none, as the known-working launch exports it.
MORI_MOE_MAX_INPUT_TOKENS = {"prefill": 32768, "decode": 2703}


class Mori(Model):
    """A model's MoRI knobs where its known-working launch sets them apart from every model's (SGLang + MoRI:
    per role on the engine line, and the all-to-all's kernel switch threshold)."""

    prefill: MoriRole = MoriRole()
    decode: MoriRole = MoriRole()
    switch_threshold: Count | None = Field(
        None,
        description="SGLANG_MORI_DISPATCH_INTER_KERNEL_SWITCH_THRESHOLD pinned where decode does not split "
        "experts with DP attention (there it is always twice decode's derived budget); absent: twice "
        "decode's budget.",
    )

    def role(self, role: str) -> MoriRole:
        return self.prefill if role == "prefill" else self.decode

    def moe_max_input_tokens(self, role: str) -> int | None:
        """The role's MoE input budget, None when not exported."""
        stated = self.role(role).moe_max_input_tokens
        return None if stated == "unset" else MORI_MOE_MAX_INPUT_TOKENS[role] if stated is None else stated


class EngineRecipe(Model):
    """One engine's needs on one GPU vendor: flags for every role and per role, environment, and setting
    defaults (KEY=VALUE as in additional-settings; the config's own values win); flags for the worker shapes
    and speculative decoding a config may ask for."""

    args: list[EngineArg] = Field(
        default_factory=list,
        description="Flags on every role's engine line; a mapping is a JSON value (--compilation-config).",
    )
    prefill_args: list[EngineArg] = Field(default_factory=list, description="Flags on prefill's only.")
    decode_args: list[EngineArg] = Field(default_factory=list, description="Flags on decode's only.")
    env: dict[EnvName, EnvValue | EnvInt] = Field(
        default_factory=dict, description="Exported to the engine's process."
    )
    settings: list[SettingText] = Field(
        default_factory=list,
        description="Setting defaults for this model (MAX_NUM_BATCHED_TOKENS=4K): the config's own win.",
    )
    prefill_settings: list[SettingText] = Field(
        default_factory=list, description="Setting defaults on prefill's engine only (over `settings`)."
    )
    decode_settings: list[SettingText] = Field(
        default_factory=list, description="Setting defaults on decode's engine only (over `settings`)."
    )
    max_seqs_from_concurrency: bool = Field(
        False,
        description="vLLM: both roles' --max-num-seqs is the allocation's largest concurrency unless "
        "MAX_NUM_SEQS sets it, as the known-working launch sets it (a batch cap at the load it measures).",
    )
    dp_attention: DpAttentionArgs | None = Field(
        None,
        description="A worker running data-parallel attention (dp-attn: true); without it none is rendered.",
    )
    expert_parallel_args: list[EngineArg] = Field(
        default_factory=list, description="Flags on a worker splitting experts (ep > 1): its all-to-all."
    )
    mtp_args: list[EngineArg] = Field(
        default_factory=list,
        description="Flags on both roles with spec-decoding mtp (the draft's algorithm; its step and token "
        "counts come from DECODE_MTP_SIZE); empty: the model has no MTP recipe, and none is rendered.",
    )
    mtp_draft_model: ModelId | None = Field(
        None,
        description="MTP's draft model when it is not the model's own layers: staged under the runner's "
        "model-root like the model (--speculative-draft-model-path).",
    )
    mori: Mori = Field(
        Mori(), description="MoRI's knobs a known-working launch sets for this model (SGLang over MoRI)."
    )
    hicache_sizing: Literal["size", "ratio"] = Field(
        "size",
        description="How SGLang's HiCache host pool is sized on prefill (kv-offload-backend hicache): size: "
        "the server's DRAM budget per rank (--hicache-size); ratio: HICACHE_RATIO x the GPU KV pool "
        "(--hicache-ratio), for a model whose hybrid KV pool refuses an absolute size.",
    )
    mtp_acceptance: dict[Annotated[int, Field(ge=1, le=8)], Annotated[float, Field(ge=1, le=9)]] = Field(
        default_factory=dict,
        description="MTP draft steps -> the acceptance length an agentic run simulates on decode (SGLang's "
        "SGLANG_SIMULATE_ACC_LEN): a trace replay does not reproduce real token traffic, so the model's "
        "committed golden acceptance stands in for a measured one. Empty: measured.",
    )
    agentic: EngineRecipe | None = Field(
        None,
        description="The recipe of an agentic-coding run, in place of this one (a known-working launch tunes "
        "agentic runs apart: context, radix cache, chunking).",
    )

    @model_validator(mode="after")
    def _env_is_not_the_launchs(self) -> Self:
        """What every launch derives (the engine wait from the runner's, telemetry off, the traffic class)."""
        envs = {"env": self.env, "dp-attention.env": self.dp_attention.env if self.dp_attention else {}}
        for where, env in envs.items():
            for name, instead in DERIVED_ENV.items():
                if name in env:
                    raise ValueError(f"{where}.{name}: {instead}")
        return self

    @model_validator(mode="after")
    def _agentic_is_one_level(self) -> Self:
        if self.agentic is not None and self.agentic.agentic is not None:
            raise ValueError("agentic: an agentic recipe has no agentic recipe of its own")
        return self

    @model_validator(mode="after")
    def _flags_are_this_files(self) -> Self:
        dp = self.dp_attention or DpAttentionArgs()
        lists = {
            "args": self.args,
            "prefill-args": self.prefill_args,
            "decode-args": self.decode_args,
            "dp-attention.args": dp.args,
            "dp-attention.prefill-args": dp.prefill_args,
            "dp-attention.decode-args": dp.decode_args,
            "expert-parallel-args": self.expert_parallel_args,
            "mtp-args": self.mtp_args,
        }
        for where, args in lists.items():
            for arg in args:
                if isinstance(arg, dict) and "seq" in arg:  # a range that failed as one: its own error
                    Seq.model_validate(arg)
                owner = None if isinstance(arg, dict | Seq) else flag_owner(str(arg))
                if owner is not None:
                    raise ValueError(f"{where}: {arg} comes from {owner}, not model flags")
        dp_settings = self.dp_attention.settings if self.dp_attention else []
        for item in [*self.settings, *self.prefill_settings, *self.decode_settings, *dp_settings]:
            try:
                key, raw = split_setting(item)
                setting = lookup(key)
                setting.parse(raw)
            except SettingError as err:
                raise ValueError(f"settings: {item}: {err}") from None
            if setting.kind == "derived" or setting.unread:
                raise ValueError(f"settings: {key} is not a model's to set ({setting.help})")
        return self

    def defaults(self, role: str | None = None, dp_attention: bool = False) -> dict[str, Any]:
        """The settings as typed values: every role's, then `role`'s own over them, then a DP-attention
        worker's."""
        by_role = {"prefill": self.prefill_settings, "decode": self.decode_settings}
        own = by_role.get(role, []) if role is not None else []
        dp = self.dp_attention.settings if dp_attention and self.dp_attention else []
        return {k: REGISTRY[k].parse(v) for k, v in map(split_setting, [*self.settings, *own, *dp])}


class Accuracy(Model):
    """The graded eval every launch of the model runs through its router (recipes/accuracy.py) and the score
    below which the job fails as a quality failure."""

    eval: Literal["gsm8k"] = Field(
        description="gsm8k: lm-evaluation-harness's own GSM8K task (5-shot, greedy), scored by its strict "
        "match (the `#### <number>` line), over the run's staged question set."
    )
    threshold: Annotated[float, Field(ge=0, le=1)] = Field(
        description="The lowest strict-match score that passes (0-1)."
    )
    source: Source = Field(description="Where the threshold comes from.")


class ModelFacts(Model):
    source: Source = Field(description="Where the facts come from (a config.json, a known-working launch).")
    remote_code: bool = Field(
        False,
        description="The model folder's code runs to load it (a custom tokenizer or model class through "
        "auto_map): engines and the benchmark client's tokenizer then need trust-remote-code.",
    )
    architecture: Architecture
    accuracy: Accuracy = Field(description="The graded eval a launch runs and the score it must reach.")
    engines: dict[Engine, dict[Vendor, EngineRecipe]] = Field(
        description="engine -> gpu-vendor (or any) -> what the engine needs for this model there. A vendor "
        "block adds to `any`'s; an engine with no block for the runner's vendor is not rendered there."
    )


class Models(Model):
    models: dict[ModelId, ModelFacts] = Field(description="Model id (as in a config's model) -> its facts.")


class NoRecipe(ValueError):
    """The model has no recipe for this engine on this GPU vendor; the message says what it has."""


def model_facts(models: Models, model: str) -> ModelFacts:
    """The model's facts, or NoRecipe with a close match."""
    found = models.models.get(model)
    if found is None:
        hint = did_you_mean(model, models.models) or f"known: {', '.join(sorted(models.models))}"
        raise NoRecipe(f"model {model!r} is not in configs/models.yaml ({hint}; docs/add-a-model.md)")
    return found


def engine_recipe(
    facts: ModelFacts, model: str, engine: Engine, vendor: Vendor, scenario: str = "fixed-seq-len"
) -> EngineRecipe:
    """The model's recipe for `engine` on `vendor` and `scenario`: the `any` block, and the vendor's added to
    it (flags after, environment and settings over); a block's `agentic` recipe in its place for agentic
    runs."""
    blocks = facts.engines.get(engine)
    if blocks is None:
        raise NoRecipe(
            f"model {model!r} has no {engine} recipe in configs/models.yaml "
            f"(it has: {', '.join(sorted(facts.engines)) or 'none'})"
        )
    found = [b for b in (blocks.get("any"), blocks.get(vendor)) if b is not None]
    if scenario == "agentic-coding":
        found = [b.agentic or b for b in found]
    if not found:
        raise NoRecipe(
            f"model {model!r} has no {engine} recipe for gpu-vendor {vendor} in configs/models.yaml "
            f"(it has: {', '.join(sorted(blocks))}): its flags for another vendor's GPUs are not guessed"
        )
    lists = ("args", "prefill_args", "decode_args", "expert_parallel_args", "mtp_args")
    settings = ("settings", "prefill_settings", "decode_settings")
    merged: dict[str, Any] = {**{name: [] for name in lists}, "env": {}, **{name: {} for name in settings}}
    dp: dict[str, Any] | None = None
    for block in found:
        for name in lists:
            merged[name] += getattr(block, name)
        if block.dp_attention is not None:
            dp = dp or {name: {} if name == "env" else [] for name in DpAttentionArgs.model_fields}
            for name in dp:
                if name == "env":
                    dp[name].update(block.dp_attention.env)
                else:
                    dp[name] += getattr(block.dp_attention, name)
        merged["mtp_draft_model"] = block.mtp_draft_model or merged.get("mtp_draft_model")
        # stated whole, the vendor's over `any`'s
        for whole in ("mori", "hicache_sizing", "mtp_acceptance", "max_seqs_from_concurrency"):
            if whole in block.model_fields_set:
                merged[whole] = getattr(block, whole)
        merged["env"].update(block.env)
        for name in settings:
            merged[name].update(split_setting(item) for item in getattr(block, name))
    for name in settings:
        merged[name] = [f"{k}={v}" for k, v in merged[name].items()]
    if dp is not None:
        merged["dp_attention"] = {k.replace("_", "-"): v for k, v in dp.items()}
    return EngineRecipe.model_validate({k.replace("_", "-"): v for k, v in merged.items()})


def role_args(
    recipe: EngineRecipe,
    role: str,
    *,
    dp_attention: bool = False,
    split_experts: bool = False,
    mtp: bool = False,
) -> list[str | int | dict[str, Any]]:
    """The model's flags on `role`'s engine line: every role's, the worker shape's (DP attention: its role
    flags in place of the recipe's own; split experts: the all-to-all's), MTP's, then the role's own."""
    dp = recipe.dp_attention if dp_attention else None
    own = dp if dp is not None else recipe
    args = [
        *recipe.args,
        *(dp.args if dp is not None else ()),
        *(recipe.expert_parallel_args if split_experts else ()),
        *(recipe.mtp_args if mtp else ()),
        *{"prefill": own.prefill_args, "decode": own.decode_args}.get(role, []),
    ]
    return [word for a in args for word in (a.words() if isinstance(a, Seq) else (a,))]


def resolved_settings(
    recipe: EngineRecipe | None, role: str, given: dict[str, Any], dp_attention: bool = False
) -> dict[str, Any]:
    """`role`'s settings: the config's (`given`, typed), else the model's defaults valid for the role (and
    its worker's shape), else the registry's. Render and lint resolve through this one function."""
    defaults = recipe.defaults(role, dp_attention) if recipe is not None else {}
    return resolve(role, {**{k: v for k, v in defaults.items() if role in REGISTRY[k].roles}, **given})
