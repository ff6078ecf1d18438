"""srt-slurm recipes out: a config of ours as the schema-2 recipe InferenceX would now ask for, and the master
row that points at it (docs/guides/srt-slurm.md#recipes-out-make-export).

Written from the rendered launch itself (each variant's plan), never from a second description of it: each
role's engine flags and environment as the node would run them, the router's flags. What the launch decides
for itself is left out (addresses, ports, the PD role and bootstrap port, the NICs, the Hub's offline
switches), as InferenceX's recipes leave it to srt-slurm. The variants of a config become one bundle: a `base`
holding what they share and an `override_<variant>` per variant holding only its differences, merged back by
srt-slurm's own rules, which tests/recipes/test_srt_export.py holds to `srtctl resolve-override`.
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any

from .. import srt
from .srt_recipe import MULTI_NODE_TREE, RecipeError

# Engine flags a recipe leaves to whoever launches it (our launch's own, recipes/srt.py), but for SGLang's
# metrics switch: srt-slurm's launcher does not write it, so InferenceX's recipes do.
LAUNCH_FLAGS = {
    "sglang": tuple(f"--{flag}" for flag in srt.SGLANG_OURS if flag != "enable-metrics"),
    "vllm": tuple(f"--{flag}" for flag in srt.VLLM_OURS if flag != "kv-transfer-config"),
}
ROUTER_LAUNCH_FLAGS = {
    "sglang-router": tuple(f"--{flag}" for flag in srt.ROUTER_OURS),
    "vllm-router": tuple(f"--{flag}" for flag in srt.VLLM_ROUTER_OURS),
}
# The launch's own guarantees for every process of a node (nothing fetched, nothing reported): not tuning.
LAUNCH_ENV = (
    "DO_NOT_TRACK",
    "HF_DATASETS_OFFLINE",
    "HF_HUB_OFFLINE",
    "TRANSFORMERS_OFFLINE",
    "VLLM_NO_USAGE_STATS",
    *srt.VLLM_LAUNCH_ENV,
)
_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
# Each engine's program words before its flags (vLLM's last one the model's path, the launch's).
_PROGRAMS = {"sglang": ("python3", "-m", "sglang.launch_server"), "vllm": ("vllm", "serve")}
_ROUTER_PROGRAMS = {"sglang-router": 3, "vllm-router": 1}  # words before the router's flags
_LMCACHE_PROGRAM = ("lmcache", "server")


def _value(word: str) -> Any:
    """A flag's word as the recipe writes it: a number where the text is one, else the text."""
    if re.fullmatch(r"-?[0-9]{1,18}", word) and str(int(word)) == word:
        return int(word)
    if re.fullmatch(r"-?[0-9]+\.[0-9]+", word) and str(float(word)) == word:
        return float(word)
    return word


def _resolve(word: str, shell: dict[str, str] | None, where: str) -> str:
    """A word with env.sh's variables (a derived budget) put in; one the plan does not hold is refused
    (shell None: every variable kept as written, to compare two launches)."""
    if shell is None:
        return word

    def value(found: re.Match) -> str:
        name = found.group(1)
        if name not in shell:
            raise RecipeError(f"{where}: {word} names {name}, which only the node knows")
        return shell[name]

    return _REF.sub(value, word)


def flags(argv: list[str], skip: tuple[str, ...], shell: dict[str, str] | None, where: str) -> dict[str, Any]:
    """`--flag value...` words as a recipe's args: a switch true, one value as itself, several a list; the
    flags in `skip` left out with their values."""
    out: dict[str, Any] = {}
    i = 0
    while i < len(argv):
        flag = argv[i]
        if not flag.startswith("--"):
            raise RecipeError(f"{where}: {flag!r} is not a flag")
        words = []
        i += 1
        while i < len(argv) and not argv[i].startswith("--"):
            words.append(argv[i])
            i += 1
        if flag in skip:
            continue
        values = [_value(_resolve(w, shell, where)) for w in words]
        key = flag[2:]
        if key in out:
            raise RecipeError(f"{where}: {flag} given twice")
        out[key] = True if not values else values[0] if len(values) == 1 else values
    return out


def _line(service: dict, shell: dict[str, str] | None, where: str) -> tuple[dict[str, str], list[str]]:
    """A service's `env NAME=VALUE ...` words (env.sh's values put in) and the words after them."""
    words, env = list(service["argv"]), {}
    if words and words[0] == "env":
        words.pop(0)
        while words and "=" in words[0] and not words[0].startswith("-"):
            name, _, value = words.pop(0).partition("=")
            env[name] = _resolve(value, shell, where)
    return env, words


def _engine_of(role: dict, where: str) -> tuple[str, dict]:
    for name in _PROGRAMS:
        service = next((s for s in role["services"] if s["name"] == name), None)
        if service is not None:
            return name, service
    raise RecipeError(f"{where}: only SGLang and vLLM launches are exported")


def _srt_kv_config(text: str, where: str) -> str:
    """Our kv-transfer-config (env.sh's values in) as srt-slurm runs it: LMCache's connector dialling the
    server srt-slurm starts on the worker's node. The JSON written as the launch writes it (key-sorted,
    compact)."""
    try:
        config = json.loads(text)
    except ValueError:
        raise RecipeError(f"{where}: --kv-transfer-config is not JSON once env.sh's values are in") from None
    for connector in srt.connectors(config):
        if connector.get("kv_connector") == "LMCacheMPConnector":
            connector["kv_connector_extra_config"].update(srt.SRT_LMCACHE_DIAL)
    return json.dumps(config, sort_keys=True, separators=(",", ":"))


def engine_role(plan: dict, role: dict, workers: int) -> dict[str, Any]:
    """One role of the recipe: its workers, nodes and GPUs, its engine's environment and flags."""
    where = f"{plan['config_key']}/{plan['variant']}/{role['name']}"
    engine, service = _engine_of(role, where)
    # the launch dials the node's LMCache server at the node's address; srt-slurm's preset, at localhost
    shell = {**plan["env_shell_map"], **({"LOCAL_ADDR": "localhost"} if engine == "vllm" else {})}
    line_env, argv = _line(service, None, where)
    if "PYTHONPATH" in line_env:
        raise RecipeError(f"{where}: the engine loads a connector module of the runner's own: not exportable")
    env = {
        k: _resolve(v, shell, where)
        for k, v in {**plan["env_exported"], **line_env}.items()
        if k not in LAUNCH_ENV
    }
    program = _PROGRAMS[engine]
    if tuple(argv[: len(program)]) != program:
        raise RecipeError(f"{where}: the engine line does not run {' '.join(program)}")
    skip = len(program) + (engine == "vllm")  # vLLM's model path: the launch's
    args = flags(argv[skip:], LAUNCH_FLAGS[engine], shell, where)
    if "kv-transfer-config" in args:
        args["kv-transfer-config"] = _srt_kv_config(str(args["kv-transfer-config"]), where)
    nodes = [n for n in plan["nodes"] if n["role"] == role["name"]]
    return {
        "nodes": len(nodes),
        "workers": workers,
        "gpus": args.get("tp-size", args.get("tensor-parallel-size", plan["gpus_per_node"])),
        "env": {k: str(v) for k, v in sorted(env.items())},
        "args": args,
    }


def _lmcache_services(plan: dict) -> list[dict[str, Any]]:
    """The plan's LMCache servers as srt-slurm's lmcache-server services, on the nodes of the role that
    runs them; the flags its kind writes itself (ports) and the runner's left out."""
    out = []
    for role in plan["roles"]:
        service = next((s for s in role["services"] if s["name"] == "lmcache"), None)
        if service is None:
            continue
        where = f"{plan['config_key']}/{plan['variant']}/{role['name']}/lmcache"
        _, argv = _line(service, plan["env_shell_map"], where)
        if tuple(argv[:2]) != _LMCACHE_PROGRAM:
            raise RecipeError(f"{where}: the LMCache line does not run {' '.join(_LMCACHE_PROGRAM)}")
        skip = tuple(f"--{f}" for f in (*srt.LMCACHE_SERVER_OURS, *srt.LMCACHE_SERVER_SITE))
        args = flags(argv[2:], skip, plan["env_shell_map"], where)  # addresses and ports: skipped
        words = [w for flag, value in args.items() for w in (f"--{flag}", str(value))]
        out.append({"name": "lmcache", "type": srt.LMCACHE_SERVER, "placement": {"node": role["name"]},
                    "args": words})  # fmt: skip
    return out


def _trace_set(plan: dict) -> str | None:
    """The trace set the plan's agentic benchmark replays (AIPerf's --public-dataset)."""
    for bench in plan["benchmarks"]:
        argv = bench["argv"]
        if "--public-dataset" in argv:
            return argv[argv.index("--public-dataset") + 1]
    return None


def launched(plan: dict) -> dict[str, tuple[dict[str, str], dict[str, Any]]]:
    """(environment, flags) of each process a plan starts, by role (its engine) and role/service (the
    others) and "router", with env.sh's values put in and the rest kept as written: what the nodes run,
    whatever the order of their words (how a round trip is judged)."""
    shell = dict(plan["env_shell"])
    out = {}
    for role in plan["roles"]:
        for service in role["services"]:
            env, argv = _line(service, None, role["name"])
            if service["name"] in _PROGRAMS:
                env = {**plan["env_exported"], **env}
                skip, key = len(_PROGRAMS[service["name"]]), role["name"]
            elif service["name"] == "lmcache":
                skip, key = len(_LMCACHE_PROGRAM), f"{role['name']}/lmcache"
            else:
                continue  # the launch's own watchers
            resolved = {k: _put_in(v, shell) for k, v in env.items()}
            words = [_put_in(w, shell) for w in argv[skip:]]
            start = next((i for i, w in enumerate(words) if w.startswith("--")), len(words))
            out[key] = (resolved, flags(words[start:], ("--host",), None, key))
    router = plan["router"]
    if router:
        _, argv = _line(router, None, "router")
        start = next((i for i, w in enumerate(argv) if w.startswith("--")), len(argv))
        words = [_put_in(w, shell) for w in argv[start:]]
        out["router"] = ({}, _flag_groups(words))
    return out


def _flag_groups(words: list[str]) -> dict[str, Any]:
    """A router's flags as flag -> each occurrence's values (--prefill is given once per worker)."""
    out: dict[str, list[tuple[str, ...]]] = {}
    flag = None
    for w in words:
        if w.startswith("--"):
            flag = w
            out.setdefault(flag, []).append(())
        elif flag is not None:
            out[flag][-1] += (w,)
    return {k: sorted(v) for k, v in out.items()}


def _put_in(word: str, shell: dict[str, str]) -> str:
    """WORD with env.sh's values put in where env.sh holds them all (a node's own, ${NODE_ADDR}, stays)."""
    known = all(name in shell for name in _REF.findall(word))
    return _resolve(word, shell, "") if known else word


def variant_recipe(plan: dict, workers: dict[str, int], precision: str) -> dict[str, Any]:
    """The recipe one rendered variant is: what it runs, whoever launches it. `workers`: each role's worker
    count (the entry's num-worker)."""
    plan = {**plan, "env_shell_map": dict(plan["env_shell"])}
    router, name = plan["router"], plan["router_name"]
    if router and name not in _ROUTER_PROGRAMS:
        raise RecipeError(
            f"{plan['config_key']}: its router {name} has no srt-slurm frontend (srt-slurm fronts a PD job "
            f"with {' or '.join(_ROUTER_PROGRAMS)}): export it with ROUTER=<one of them>@<version>"
        )
    roles = {r["name"]: engine_role(plan, r, workers[r["name"]]) for r in plan["roles"]}
    engine = _engine_of(plan["roles"][0], plan["config_key"])[0]
    router_args = (
        flags(
            router["argv"][_ROUTER_PROGRAMS[name] :],
            ROUTER_LAUNCH_FLAGS[name],
            plan["env_shell_map"],
            "router",
        )
        if router
        else {}
    )
    versions = plan.get("components", {})
    out: dict[str, Any] = {
        "name": f"{plan['config_key']}-{plan['variant']}".replace("_", "-"),
        "model": {"path": plan["model"], "container": plan["image"], "precision": precision},
        "identity": {
            "model": {"repo": plan["model"]},
            "container": {"image": plan["image"]},
            # versions as srt-slurm's identity states them; "as in <image>" (the image's own) is no version
            "frameworks": {
                k: v
                for k, v in versions.items()
                if k in (engine, "lmcache", name) and re.fullmatch(r"[0-9][0-9A-Za-z.+-]*", v)
            },
        },
        "slurm": {"time_limit": plan["slurm"]["time_limit"]},
        "resources": {"gpus_per_node": plan["gpus_per_node"]},
        "frontend": {"type": name, "enable_multiple_frontends": False, "args": router_args},
        # InferenceX's SGLang recipes name the engine; its vLLM ones give it as a mapping. Each role's
        # kv-transfer-config is written out, so no connector preset: srt-slurm's vLLM backend writes its
        # default one (nixl) beside the role's unless the connector is null
        "engine": engine if engine == "sglang" else {"type": engine, "connector": None},
        "roles": roles,
    }
    if services := _lmcache_services(plan):
        out["services"] = services
    if engine == "vllm" and (traces := _trace_set(plan)):
        out["benchmark"] = {"env": {"WEKA_LOADER_OVERRIDE": traces}}
    return out


def bundle(variants: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Variants as one schema-2 bundle: `base` what all share, `override_<name>` each one's differences (a
    key the base has and a variant lacks is deleted with a null, as srt-slurm reads it)."""
    values = list(variants.values())
    base = _common(values)
    out: dict[str, Any] = {"schema": 2, "base": base}
    for name, variant in variants.items():
        out[f"override_{name}"] = _difference(variant, base)
    return out


def _common(values: list[dict[str, Any]]) -> dict[str, Any]:
    first, rest = values[0], values[1:]
    out: dict[str, Any] = {}
    for key, value in first.items():
        others = [v.get(key) for v in rest]
        nested = [o for o in others if isinstance(o, dict)]
        if isinstance(value, dict) and len(nested) == len(others):
            out[key] = _common([value, *nested])
        elif all(o == value and key in v for o, v in zip(others, rest, strict=True)):
            out[key] = copy.deepcopy(value)
    return out


def _difference(variant: dict[str, Any], base: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in variant.items():
        if key not in base:
            out[key] = copy.deepcopy(value)
        elif isinstance(value, dict) and isinstance(base[key], dict):
            inner = _difference(value, base[key])
            if inner:
                out[key] = inner
        elif value != base[key]:
            out[key] = copy.deepcopy(value)
    for key in base.keys() - variant.keys():
        out[key] = None
    return out


def recipe_path(key: str) -> str:
    """Where the recipe of config `key` goes in InferenceX's tree, relative to its checkout."""
    return f"{MULTI_NODE_TREE}/exported/{key}/disagg-variants.yaml"


def master_row(entry: dict[str, Any], pointers: list[list[tuple[int | None, str]]]) -> dict[str, Any]:
    """The entry as InferenceX's newest validator takes it, each point pointing at its recipe section:
    `pointers[i]` is point i's (concurrency, pointer) list, one item (None: all its concurrencies) or one per
    concurrency where they run different sections (the point is split). Settings are the recipe's now: the
    workers carry none; this repository's extension keys are left out."""
    row = copy.deepcopy(entry)
    row.pop("known-issue-workarounds", None)
    index = 0
    for groups in row["scenarios"].values():
        for group in groups:
            points = []
            for point in group["search-space"]:
                for role in ("prefill", "decode"):
                    if isinstance(point.get(role), dict):
                        point[role].pop("additional-settings", None)
                for conc, pointer in pointers[index]:
                    split = copy.deepcopy(point)
                    split["srt-recipe"] = pointer
                    if conc is not None:
                        split.pop("conc-start", None)
                        split.pop("conc-end", None)
                        split["conc-list"] = [conc]
                    points.append(split)
                index += 1
            group["search-space"] = points
    return row
