"""The registry of known `additional-settings` keys: type, default, allowed roles, meaning.

InferenceX exports these unquoted into bash; here each value is parsed to its type, so nothing but a
number, a choice or a safe identifier/path ever leaves the schema. Defaults live here and only here.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, TypeGuard, TypeVar

from . import base, dram, images
from .findings import did_you_mean, one_of

ROLES = ("prefill", "decode")  # the two roles of a disaggregated (PD) entry
SERVER = "server"  # the one engine of a single-node entry
ALL_ROLES = (*ROLES, SERVER)
EngineName = Literal["vllm", "sglang", "atom"]  # as schemas.launch.Engine
ENGINES: tuple[EngineName, ...] = ("vllm", "sglang", "atom")
# A setting's typed value (Setting.parse), and a bounded number's type.
Value = int | float | bool | str
N = TypeVar("N", int, float)
_IDENT = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}", re.ASCII)
# Absolute, and no part is '.' or '..' (a dot-folder such as /models/.cache is fine).
_ABS_PATH = re.compile(r"(/(?!\.\.?(/|$))[A-Za-z0-9._+-]+)+/?", re.ASCII)
_KEY = re.compile(r"[A-Z][A-Z0-9_]*", re.ASCII)
# Plain ASCII numbers only: int()/float() also take ' 8', '1_0', Arabic-Indic digits, 'nan' and 'inf'; at
# most 18 digits, so int() never meets a number too long to convert (Python refuses > 4300 digits).
_RECIPE = re.compile(base.RECIPE_REF, re.ASCII)
_INT = re.compile(r"-?[0-9]{1,18}", re.ASCII)
_TOKENS = re.compile(r"([0-9]{1,18})([kKmMgG]?)", re.ASCII)
_TOKEN_SUFFIX = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "K": 2**10, "M": 2**20, "G": 2**30}
_FLOAT = re.compile(r"-?([0-9]{1,18}(\.[0-9]{0,18})?|\.[0-9]{1,18})([eE][-+]?[0-9]{1,3})?", re.ASCII)


class SettingError(ValueError):
    """A value that does not fit its setting; the message says what would."""


@dataclass(frozen=True)
class Setting:
    name: str
    kind: str  # int | tokens | float | bool | choice | ident | path | image | recipe | derived
    help: str
    roles: tuple[str, ...] = ALL_ROLES
    engines: tuple[str, ...] = ENGINES  # engines it has a meaning for (a framework's first word)
    default: object = None
    low: float | None = None  # int/float: inclusive lower bound (float: exclusive when low_open)
    high: float | None = None
    low_open: bool = False
    choices: tuple[str, ...] = ()
    derived_from: str = ""  # kind == derived: where the value really comes from
    # kind == derived, and InferenceX's configs state it (PREFILL_NODES=1): a stated whole number is taken
    # and must equal what is derived (a strict rule), never used instead of it.
    stated: bool = False
    shared: bool = False  # prefill and decode must end up with the same value
    flag: str = ""  # engine flag it stands for: a true bool gives `--flag`, another value `--flag=value`
    # Engine flags the engine's builder (recipes/vllm.py, recipes/sglang.py) writes from it: nothing else (a
    # model's flags, a runner's engine-args) may set them behind the setting's back.
    renders: tuple[str, ...] = ()
    # InferenceX's configs carry it and no process of our launch reads it: why. Render refuses a value that
    # would change something (any but `inert`), never drops it.
    unread: str = ""
    inert: tuple[str, ...] = ()
    # InferenceX's configs carry it, and something else of our launch does its job: what (env.sh says so).
    served_by: str = ""

    def parse(self, raw: str) -> Value:
        """Typed value of `raw`, or SettingError."""
        parser: Callable[[str], Value] = getattr(self, f"_parse_{self.kind}")
        return parser(raw)

    def _parse_int(self, raw: str) -> int:
        if not _INT.fullmatch(raw):
            raise SettingError(f"expected an integer of at most 18 digits, got {base.clip(raw)}")
        return self._bounded(int(raw))

    def _parse_tokens(self, raw: str) -> int:
        """An integer, or vLLM's human-readable count: 4k = 4,000 and 4K = 4,096 (k/m/g decimal, K/M/G
        binary), as vLLM parses --max-num-batched-tokens and --max-model-len."""
        found = _TOKENS.fullmatch(raw)
        if found is None:
            raise SettingError(f"expected a token count such as 8192, 8k or 8K, got {base.clip(raw)}")
        number, suffix = found.groups()
        return self._bounded(int(number) * _TOKEN_SUFFIX[suffix])

    def _parse_float(self, raw: str) -> float:
        if not _FLOAT.fullmatch(raw):
            raise SettingError(f"expected a number, got {base.clip(raw)}")
        return self._bounded(float(raw))

    def _parse_bool(self, raw: str) -> bool:
        table = {"1": True, "true": True, "0": False, "false": False}
        if raw.lower() not in table:
            raise SettingError(f"expected 1/0 or true/false, got {base.clip(raw)}")
        return table[raw.lower()]

    def _parse_choice(self, raw: str) -> str:
        if raw not in self.choices:
            hint = did_you_mean(raw, self.choices) or one_of(self.choices)
            raise SettingError(f"{base.clip(raw)} is not allowed ({hint})")
        return raw

    def _parse_ident(self, raw: str) -> str:
        if not _IDENT.fullmatch(raw):
            raise SettingError(
                f"expected a name of ASCII letters, digits, '.', '_', '-' (at most 128), got {base.clip(raw)}"
            )
        return raw

    def _parse_image(self, raw: str) -> str:
        """A public, pinned image reference (the same test as a config's own image)."""
        problems = images.image_problems(raw) if len(raw) <= 512 else [("is too long", "at most 512")]
        if problems:
            problem, fix = problems[0]
            raise SettingError(f"{base.clip(raw)}: {problem} ({fix})")
        return raw

    def _parse_path(self, raw: str) -> str:
        if len(raw) > 1024 or not _ABS_PATH.fullmatch(raw):
            raise SettingError(
                "expected an absolute path of ASCII letters, digits, '._/+-' without '.' or '..' parts "
                f"(at most 1024), got {base.clip(raw)}"
            )
        return raw

    def _parse_recipe(self, raw: str) -> str:
        if len(raw) > 512 or not _RECIPE.fullmatch(raw):
            raise SettingError(f"expected {base.RECIPE_REF_WORDS}, got {base.clip(raw)}")
        return raw

    def _parse_derived(self, raw: str) -> int:
        if not self.stated:
            raise SettingError(f"is derived from {self.derived_from}; remove it")
        if not _INT.fullmatch(raw) or int(raw) < 1:
            raise SettingError(f"is derived from {self.derived_from}; stated, it is a whole number: {raw!r}")
        return int(raw)

    def _bounded(self, value: N) -> N:
        low_bad = self.low is not None and (value <= self.low if self.low_open else value < self.low)
        if low_bad or (self.high is not None and value > self.high):
            lo = "(" if self.low_open else "["
            raise SettingError(f"{value} is out of range {lo}{self.low}, {self.high}]")
        return value


def _s(name: str, kind: str, help: str, **kw: Any) -> Setting:
    return Setting(name=name, kind=kind, help=help, **kw)


_PREFILL = ("prefill",)
_VLLM, _SGLANG = ("vllm",), ("sglang",)
_LMCACHE_ONLY_PREFILL = (
    "LMCache runs only on prefill nodes (a decode-side lookup races the remote-prefill load)"
)

REGISTRY: dict[str, Setting] = {
    s.name: s
    for s in (
        _s(
            "MC_PROTOCOL",
            "choice",
            "Mooncake transport (kv_connector_extra_config.mooncake_protocol).",
            choices=("tcp", "rdma"),
            default="tcp",
            shared=True,
            roles=ROLES,
            engines=_VLLM,
        ),
        _s(
            "MC_NUM_WORKERS",
            "int",
            "Mooncake transfer workers (kv_connector_extra_config.num_workers).",
            low=1,
            high=256,
            default=10,
            roles=ROLES,
            engines=_VLLM,
        ),
        _s(
            "MAX_MODEL_LEN",
            "tokens",
            "vLLM and ATOM --max-model-len; SGLang --context-length (tokens, up to 2^24; 32k = 32,000, 32K = "
            "32,768).",
            renders=("--max-model-len", "--context-length"),
            low=1,
            high=base.MAX_TOKENS,
            shared=True,
        ),
        _s(
            "MAX_NUM_BATCHED_TOKENS",
            "tokens",
            "vLLM --max-num-batched-tokens (up to 2^24; 4k = 4,000, 4K = 4,096).",
            renders=("--max-num-batched-tokens",),
            low=1,
            high=base.MAX_TOKENS,
            engines=_VLLM,
        ),
        _s(
            "MAX_NUM_SEQS",
            "int",
            "vLLM and ATOM --max-num-seqs (at most the largest concurrency; an ATOM decode's is the largest "
            "concurrency unless set).",
            renders=("--max-num-seqs",),
            low=1,
            high=base.MAX_CONCURRENCY,
            engines=("vllm", "atom"),
        ),
        _s(
            "ENABLE_PREFIX_CACHING",
            "bool",
            "vLLM prefix caching; off defeats LMCache L2 reuse.",
            renders=("--enable-prefix-caching", "--no-enable-prefix-caching"),
            default=True,
            engines=_VLLM,
        ),
        _s(
            "GPU_MEMORY_UTILIZATION",
            "float",
            "vLLM and ATOM --gpu-memory-utilization.",
            renders=("--gpu-memory-utilization",),
            low=0,
            low_open=True,
            high=1,
            default=0.9,
            engines=("vllm", "atom"),
        ),
        _s(
            "WEKA_LOADER_OVERRIDE",
            "ident",
            "Agentic trace set (InferenceX's AIPerf loader name): its staged folder under the runner's "
            "benchmark.trace-cache.",
        ),
        _s(
            "HF_HUB_CACHE",
            "path",
            "InferenceX's Hugging Face cache in the container; refused at render (nothing is fetched on a "
            "node).",
            unread="nothing is fetched on a compute node (the model is under the runner's model-root, the "
            "traces in its trace-cache); remove it",
        ),
        _s(
            "DECODE_MTP_SIZE",
            "int",
            "MTP draft steps with spec-decoding mtp (SGLang --speculative-num-steps N and "
            "--speculative-num-draft-tokens N+1 on both roles: the draft layers make prefill's KV too); 0 "
            "without.",
            roles=("decode",),
            low=0,
            high=8,
        ),
        _s(
            "LMCACHE_L1_INIT_SIZE_GB",
            "int",
            "lmcache server --l1-init-size-gb (L1 may not be smaller; at most what the 3 TB cap gives).",
            roles=_PREFILL,
            engines=_VLLM,
            low=1,
            high=dram.MAX_L1_GIB,
            default=20,
        ),
        _s(
            "LMCACHE_L1_READ_TTL_SECONDS",
            "int",
            "lmcache server --l1-read-ttl-seconds (at most a week).",
            roles=_PREFILL,
            engines=_VLLM,
            low=1,
            high=base.MAX_TTL_S,
        ),
        _s(
            "LMCACHE_CHUNK_SIZE",
            "int",
            "lmcache server --chunk-size (tokens).",
            roles=_PREFILL,
            engines=_VLLM,
            low=1,
            high=65_536,
            default=256,
        ),
        _s(
            "LMCACHE_MAX_WORKERS",
            "int",
            "lmcache server --max-workers.",
            roles=_PREFILL,
            engines=_VLLM,
            low=1,
            high=256,
        ),
        _s(
            "LMCACHE_MP_MQ_TIMEOUT",
            "int",
            "LMCacheMPConnector lmcache.mp.mq_timeout (s, at most a day).",
            roles=_PREFILL,
            engines=_VLLM,
            low=1,
            high=base.MAX_WAIT_S,
            default=300,
        ),
        _s(
            "LMCACHE_EVICTION_POLICY",
            "choice",
            "lmcache server --eviction-policy.",
            roles=_PREFILL,
            engines=_VLLM,
            choices=("LRU",),
            default="LRU",
        ),
        _s(
            "LMCACHE_L1_SIZE_GB",
            "derived",
            "lmcache server --l1-size-gb.",
            roles=_PREFILL,
            engines=_VLLM,
            derived_from="the server's DRAM budget: min(the runner's available-cpu-dram-mib, 3 TB) x the "
            "scenario's dram-utilization x the GPUs it uses / gpus-per-node, in GB, as whole GiB",
        ),
        _s(
            "PREFILL_NODES",
            "derived",
            "Prefill node count (InferenceX's configs state it; a stated count must be the derived one).",
            derived_from="prefill num-worker x the nodes one worker spans (tp x pp x pcp-size / the runner's "
            "gpus-per-node, rounded up: a worker smaller than a node has one to itself)",
            stated=True,
        ),
        _s(
            "DECODE_NODES",
            "derived",
            "Decode node count (InferenceX's configs state it; a stated count must be the derived one).",
            derived_from="decode num-worker x the nodes one worker spans (tp x pp x pcp-size / the runner's "
            "gpus-per-node, rounded up: a worker smaller than a node has one to itself)",
            stated=True,
        ),
        _s("ROUTER_TYPE", "derived", "Router implementation.", derived_from="the entry's router.name"),
        _s(
            "PREFILL_KV_CONNECTOR",
            "derived",
            "Prefill KV connector.",
            derived_from="kv-p2p-transfer and kv-offload-backend (LMCache joins via MultiConnector)",
        ),
        _s("DECODE_KV_CONNECTOR", "derived", "Decode KV connector.", derived_from="kv-p2p-transfer"),
        _s(
            "MEM_FRACTION_STATIC",
            "float",
            "SGLang --mem-fraction-static (share of GPU memory for weights and KV cache).",
            renders=("--mem-fraction-static",),
            low=0,
            low_open=True,
            high=1,
            engines=_SGLANG,
        ),
        # SGLang's hierarchical cache (kv-offload-backend hicache): host DRAM behind prefill's radix cache.
        _s(
            "HICACHE_RATIO",
            "float",
            "SGLang --hicache-ratio (host pool / GPU KV pool), for a model whose recipe sizes HiCache by "
            "ratio.",
            roles=_PREFILL,
            engines=_SGLANG,
            low=0,
            low_open=True,
            high=1000,
            default=5.0,
        ),
        _s(
            "HICACHE_IO_BACKEND",
            "choice",
            "SGLang --hicache-io-backend.",
            roles=_PREFILL,
            engines=_SGLANG,
            choices=("direct", "kernel"),
            default="direct",
        ),
        _s(
            "HICACHE_MEM_LAYOUT",
            "choice",
            "SGLang --hicache-mem-layout (direct I/O needs a page_first layout).",
            roles=_PREFILL,
            engines=_SGLANG,
            choices=("layer_first", "page_first", "page_first_direct", "page_first_kv_split", "page_head"),
            default="page_first_direct",
        ),
        _s(
            "HICACHE_WRITE_POLICY",
            "choice",
            "SGLang --hicache-write-policy.",
            roles=_PREFILL,
            engines=_SGLANG,
            choices=("write_back", "write_through", "write_through_selective"),
            default="write_through",
        ),
        _s(
            "HICACHE_PREFETCH_POLICY",
            "choice",
            "SGLang --hicache-storage-prefetch-policy.",
            roles=_PREFILL,
            engines=_SGLANG,
            choices=("best_effort", "wait_complete", "timeout"),
            default="wait_complete",
        ),
        _s(
            "CLIENT_IMAGE",
            "image",
            "InferenceX's benchmark-client image (its agentic replay runs in a sibling container of it).",
            roles=_PREFILL,
            served_by="the benchmark client here is the node setup's pinned AIPerf in its own virtualenv "
            "(lock.json), whatever the image: the value is checked and recorded, and runs nothing",
        ),
        # SGLang engine flags that known issues trigger on (configs/known-issues.yaml): lint must see them.
        _s(
            "ATTENTION_BACKEND",
            "ident",
            "SGLang --attention-backend (minicpm_sala branch: minicpm_flashinfer, minicpm_flashattn).",
            flag="--attention-backend",
            engines=_SGLANG,
        ),
        _s(
            "DENSE_AS_SPARSE",
            "bool",
            "SGLang --dense-as-sparse (OpenBMB's minicpm_sala branch, MiniCPM-SALA).",
            flag="--dense-as-sparse",
            engines=_SGLANG,
        ),
        _s(
            "DISABLE_CUDA_GRAPH",
            "bool",
            "SGLang --disable-cuda-graph (slower: results are not comparable with CUDA-graph runs).",
            flag="--disable-cuda-graph",
            engines=_SGLANG,
        ),
        *(
            _s(
                name,
                "recipe",
                f"InferenceX's older pointer to the srt-slurm recipe of the point's {what} (<file>.yaml"
                ":override_<name>), on one worker; its newer validator wants it in the point's {key}.",
                roles=ROLES,
            )
            for name, key, what in (
                ("CONFIG_FILE", "srt-recipe", "run"),
                ("EVAL_CONFIG_FILE", "eval-srt-recipe", "accuracy eval"),
            )
        ),
    )
}


# engine flag -> the setting that renders it
RENDERED_FLAGS = {f: s.name for s in REGISTRY.values() for f in (*s.renders, *((s.flag,) if s.flag else ()))}

# Flags a launch gets from elsewhere: parallelism from the config's tp/ep (lint judges it, the plan and the
# variant name show it), addresses and KV transfer from the plan, remote code from the model's own fact.
OWNED_FLAGS = {
    **{f: "the config's tp" for f in ("--tensor-parallel-size", "-tp", "--tp-size", "--tp")},
    **{
        f: "the config's ep"
        for f in ("--enable-expert-parallel", "--expert-parallel-size", "--ep-size", "--ep")
    },
    **{
        f: "the config's dp-attn"
        for f in ("--data-parallel-size", "-dp", "--dp-size", "--enable-dp-attention")
    },
    **{f: "the config's pp" for f in ("--pipeline-parallel-size", "-pp", "--pp-size")},
    **{
        f: "the config's spec-decoding (DECODE_MTP_SIZE)"
        for f in (
            "--speculative-num-steps",
            "--speculative-num-draft-tokens",
            "--speculative-config",
            "--num-speculative-tokens",
        )
    },
    "--speculative-draft-model-path": "the model's mtp-draft-model (staged under the runner's model-root)",
    **{f: "the plan" for f in ("--host", "--port", "--model", "--model-path", "--served-model-name")},
    **{f: "the plan (kv-p2p-transfer)" for f in ("--kv-transfer-config", "--disaggregation-mode")},
    "--trust-remote-code": "the model's remote-code",
}


def flag_owner(arg: str) -> str | None:
    """Who renders the engine flag `arg` (`--flag` or `--flag=value`), None when nobody does: a model's flags
    (configs/models.yaml) and a runner's engine-args may add only such flags."""
    flag = arg.partition("=")[0]
    if flag in OWNED_FLAGS:
        return OWNED_FLAGS[flag]
    return f"setting {RENDERED_FLAGS[flag]} (set it there)" if flag in RENDERED_FLAGS else None


@dataclass(frozen=True)
class ParsedSetting:
    key: str
    value: object
    index: int  # position in additional-settings


def split_setting(item: object) -> tuple[str, str]:
    """'KEY=VALUE' -> (KEY, VALUE), or SettingError saying what the shape must be."""
    if not isinstance(item, str) or "=" not in item:
        raise SettingError(f"expected 'KEY=VALUE', got {item!r}")
    key, _, value = item.partition("=")
    if not _KEY.fullmatch(key):
        raise SettingError(f"key {key!r} must be UPPER_SNAKE_CASE")
    return key, value


def lookup(key: str) -> Setting:
    """The registered setting, or SettingError with a close match."""
    setting = REGISTRY.get(key)
    if setting is None:
        hint = did_you_mean(key, REGISTRY) or "see schemas/settings.py for the known settings"
        raise SettingError(f"unknown setting {key!r} ({hint})")
    return setting


def resolve(role: str, parsed: dict[str, Any]) -> dict[str, Any]:
    """Every registered setting valid for `role` with its value: given, else the default (None = unset)."""
    return {
        name: parsed.get(name, s.default)
        for name, s in REGISTRY.items()
        if role in s.roles and s.kind != "derived"
    }


def flag_values(resolved: dict[str, Any]) -> list[tuple[str, object]]:
    """(flag, value) of every set setting that stands for an engine flag, in registry order; value True
    is a switch. The renderer turns them into argv, lint into engine_flags."""
    out = []
    for name, value in resolved.items():
        flag = REGISTRY[name].flag
        if flag and value is not None and value is not False:
            out.append((flag, value))
    return out


def engine_flags(resolved: dict[str, Any]) -> frozenset[str]:
    """Engine flags a role's resolved settings stand for: `--name` for a true switch, else `--name=value`."""
    return frozenset(flag if value is True else f"{flag}={value}" for flag, value in flag_values(resolved))


def flag_setting(flag: str) -> str:
    """The additional-settings item that yields `flag` ('--dense-as-sparse' -> 'DENSE_AS_SPARSE=true'),
    or SettingError when no setting does (lint could then never see it)."""
    name, eq, value = flag.partition("=")
    setting = next((s for s in REGISTRY.values() if s.flag and s.flag == name), None)
    if setting is None:
        flags = [s.flag for s in REGISTRY.values() if s.flag]
        hint = did_you_mean(name, flags) or "add a setting with flag=... to schemas/settings.py"
        raise SettingError(f"no setting stands for engine flag {name} ({hint})")
    if setting.kind == "bool":
        if eq:
            raise SettingError(f"{name} is a switch: write it without a value")
        return f"{setting.name}=true"
    if not eq:
        raise SettingError(f"{name} takes a value: write {name}=<value>")
    return f"{setting.name}={setting.parse(value)}"


def is_engine(word: str) -> TypeGuard[EngineName]:
    return word in ENGINES


def engine_of(framework: str) -> EngineName | None:
    """The engine a framework runs (vllm-disagg -> vllm), None for engines settings do not know."""
    word = framework.split("-")[0]
    return word if is_engine(word) else None


def not_rendered(framework: str) -> tuple[str, str] | None:
    """(message, why) for a framework whose engine recipes/ does not render; None for the ones it does."""
    if engine_of(framework) is not None:
        return None
    why = "lint other engines' configs with PROFILE=inferencex"
    return f"framework {framework!r} is not rendered ({', '.join(ENGINES)} are)", why


def role_note(setting: Setting) -> str:
    if setting.name.startswith("LMCACHE_"):
        return _LMCACHE_ONLY_PREFILL
    return f"allowed in: {', '.join(setting.roles)}"
