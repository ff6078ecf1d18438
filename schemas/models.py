"""configs/models.yaml: what each model needs beyond a config's topology, as data. Per engine and GPU
vendor the flags, environment and setting defaults a known-working launch used (InferenceX's
models_vllm.yaml keeps the same per model; `make parity` holds the rendered lines against its); the facts
of its architecture that engines and lint judge a launch by (heads vs TP, experts vs EP, context length);
and what every consumer of the model folder needs (remote code). Adding a model is an edit of that file
only (docs/add-a-model.md)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from .base import EnvInt, EnvName, EnvValue, Model, ModelId, SettingText, bounded, prose, shape
from .findings import did_you_mean
from .launch import Arg, Engine
from .settings import REGISTRY, SettingError, flag_owner, lookup, resolve, split_setting

# The GPU vendor a recipe block is for (a launch profile's gpu-vendor), or `any`: every vendor.
Vendor = Literal["any", "amd", "nvidia", "none"]
ConfigName = shape(
    r"[A-Za-z_][A-Za-z0-9_]*",
    "a config.json key",
    max_length=64,
    allowed="ASCII letters, digits and '_', as in n_routed_experts",
)
# A flag's value that is JSON (--compilation-config): written as a YAML mapping, serialized on render.
JsonArg = dict[ConfigName, Any]
EngineArg = Arg | EnvInt | JsonArg
Count = bounded(1, 2**20)
Size = bounded(0, 2**24)
Source = prose("a source", 400)


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
    def _stated_facts_have_keys(self):
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
    intermediate_size: Count
    vocab_size: Count
    max_positions: Count
    head_dim: Count | None = None
    experts: Experts | None = None
    mla: Mla | None = None
    wrapper: Wrapper | None = None
    config: dict[ConfigName, Any] = Field(default_factory=dict)


class EngineRecipe(Model):
    """One engine's needs on one GPU vendor: flags for every role and per role, environment, and setting
    defaults (KEY=VALUE as in additional-settings; the config's own values win)."""

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

    @model_validator(mode="after")
    def _flags_are_this_files(self):
        for where in ("args", "prefill_args", "decode_args"):
            for arg in getattr(self, where):
                owner = None if isinstance(arg, dict) else flag_owner(str(arg))
                if owner is not None:
                    raise ValueError(f"{where.replace('_', '-')}: {arg} comes from {owner}, not model flags")
        for item in [*self.settings, *self.prefill_settings, *self.decode_settings]:
            try:
                key, raw = split_setting(item)
                setting = lookup(key)
                setting.parse(raw)
            except SettingError as err:
                raise ValueError(f"settings: {item}: {err}") from None
            if setting.kind == "derived" or setting.unread:
                raise ValueError(f"settings: {key} is not a model's to set ({setting.help})")
        return self

    def defaults(self, role: str | None = None) -> dict:
        """The settings as typed values: every role's, then `role`'s own over them."""
        own = {"prefill": self.prefill_settings, "decode": self.decode_settings}.get(role, [])
        return {k: REGISTRY[k].parse(v) for k, v in map(split_setting, [*self.settings, *own])}


class ModelFacts(Model):
    source: Source = Field(description="Where the facts come from (a config.json, a known-working launch).")
    remote_code: bool = Field(
        False,
        description="The model folder's code runs to load it (a custom tokenizer or model class through "
        "auto_map): engines and the benchmark client's tokenizer then need trust-remote-code.",
    )
    architecture: Architecture
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


def engine_recipe(facts: ModelFacts, model: str, engine: str, vendor: str) -> EngineRecipe:
    """The model's recipe for `engine` on `vendor`: the `any` block, and the vendor's added to it (flags
    after, environment and settings over)."""
    blocks = facts.engines.get(engine)
    if blocks is None:
        raise NoRecipe(
            f"model {model!r} has no {engine} recipe in configs/models.yaml "
            f"(it has: {', '.join(sorted(facts.engines)) or 'none'})"
        )
    found = [b for b in (blocks.get("any"), blocks.get(vendor)) if b is not None]
    if not found:
        raise NoRecipe(
            f"model {model!r} has no {engine} recipe for gpu-vendor {vendor} in configs/models.yaml "
            f"(it has: {', '.join(sorted(blocks))}): its flags for another vendor's GPUs are not guessed"
        )
    lists = ("args", "prefill_args", "decode_args")
    settings = ("settings", "prefill_settings", "decode_settings")
    merged: dict = {**{name: [] for name in lists}, "env": {}, **{name: {} for name in settings}}
    for block in found:
        for name in lists:
            merged[name] += getattr(block, name)
        merged["env"].update(block.env)
        for name in settings:
            merged[name].update(split_setting(item) for item in getattr(block, name))
    for name in settings:
        merged[name] = [f"{k}={v}" for k, v in merged[name].items()]
    return EngineRecipe.model_validate({k.replace("_", "-"): v for k, v in merged.items()})


def role_args(recipe: EngineRecipe, role: str) -> list:
    """The model's flags on `role`'s engine line: every role's, then the role's own."""
    return [*recipe.args, *{"prefill": recipe.prefill_args, "decode": recipe.decode_args}.get(role, [])]


def resolved_settings(recipe: EngineRecipe | None, role: str, given: dict) -> dict:
    """`role`'s settings: the config's (`given`, typed), else the model's defaults valid for the role, else
    the registry's. Render and lint resolve through this one function."""
    defaults = recipe.defaults(role) if recipe is not None else {}
    return resolve(role, {**{k: v for k, v in defaults.items() if role in REGISTRY[k].roles}, **given})
