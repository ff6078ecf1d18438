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
import re
from typing import Any

from ..srt import ROUTER_OURS, SGLANG_OURS
from .srt_recipe import MULTI_NODE_TREE, RecipeError

# SGLang flags a recipe leaves to whoever launches it (our launch's own, recipes/srt.py), but for the metrics
# switch: srt-slurm's launcher does not write it, so InferenceX's recipes do.
LAUNCH_FLAGS = tuple(f"--{flag}" for flag in SGLANG_OURS if flag != "enable-metrics")
ROUTER_LAUNCH_FLAGS = tuple(f"--{flag}" for flag in ROUTER_OURS)
# The launch's own guarantees for every process of a node (nothing fetched, nothing reported): not tuning.
LAUNCH_ENV = (
    "DO_NOT_TRACK",
    "HF_DATASETS_OFFLINE",
    "HF_HUB_OFFLINE",
    "TRANSFORMERS_OFFLINE",
    "VLLM_NO_USAGE_STATS",
)
_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_ENGINE_PROGRAM = ("python3", "-m", "sglang.launch_server")


def _value(word: str) -> Any:
    """A flag's word as the recipe writes it: a number where the text is one, else the text."""
    if re.fullmatch(r"-?[0-9]{1,18}", word) and str(int(word)) == word:
        return int(word)
    if re.fullmatch(r"-?[0-9]+\.[0-9]+", word) and str(float(word)) == word:
        return float(word)
    return word


def _resolve(word: str, shell: dict[str, str], where: str) -> str:
    """A word with env.sh's variables (a derived budget) put in; one the plan does not hold is refused."""

    def value(found: re.Match) -> str:
        name = found.group(1)
        if name not in shell:
            raise RecipeError(f"{where}: {word} names {name}, which only the node knows")
        return shell[name]

    return _REF.sub(value, word)


def flags(argv: list[str], skip: tuple[str, ...], shell: dict[str, str], where: str) -> dict[str, Any]:
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


def engine_role(plan: dict, role: dict, workers: int) -> dict[str, Any]:
    """One role of the recipe: its workers, nodes and GPUs, its engine's environment and flags."""
    where = f"{plan['config_key']}/{plan['variant']}/{role['name']}"
    service = next((s for s in role["services"] if s["name"] == "sglang"), None)
    if service is None:
        raise RecipeError(
            f"{where}: only SGLang launches are exported so far (a vLLM recipe needs its "
            "connectors and LMCache server as srt-slurm services: not written yet)"
        )
    argv = list(service["argv"])
    env = {k: v for k, v in plan["env_exported"].items() if k not in LAUNCH_ENV}
    if argv and argv[0] == "env":
        argv.pop(0)
        while argv and "=" in argv[0] and not argv[0].startswith("-"):
            name, _, value = argv.pop(0).partition("=")
            env[name] = _resolve(value, plan["env_shell_map"], where)
    if tuple(argv[:3]) != _ENGINE_PROGRAM:
        raise RecipeError(f"{where}: the engine line does not run {' '.join(_ENGINE_PROGRAM)}")
    args = flags(argv[3:], LAUNCH_FLAGS, plan["env_shell_map"], where)
    nodes = [n for n in plan["nodes"] if n["role"] == role["name"]]
    return {
        "nodes": len(nodes),
        "workers": workers,
        "gpus": args.get("tp-size", plan["gpus_per_node"]),
        "env": {k: str(v) for k, v in sorted(env.items())},
        "args": args,
    }


def launched(plan: dict) -> dict[str, tuple[dict[str, str], dict[str, Any]]]:
    """role -> (environment, flags) of each SGLang engine line of a plan, with env.sh's values put in: what
    the node runs, whatever the order of its words (how a round trip is judged)."""
    shell = dict(plan["env_shell"])
    out = {}
    for role in plan["roles"]:
        argv = list(next(s for s in role["services"] if s["name"] == "sglang")["argv"])
        env = dict(plan["env_exported"])
        if argv[0] == "env":
            argv.pop(0)
            while "=" in argv[0] and not argv[0].startswith("-"):
                name, _, value = argv.pop(0).partition("=")
                env[name] = _resolve(value, shell, role["name"])
        out[role["name"]] = (env, flags(argv[3:], ("--host",), shell, role["name"]))
    return out


def variant_recipe(plan: dict, workers: dict[str, int], precision: str) -> dict[str, Any]:
    """The recipe one rendered variant is: what it runs, whoever launches it. `workers`: each role's worker
    count (the entry's num-worker)."""
    plan = {**plan, "env_shell_map": dict(plan["env_shell"])}
    roles = {r["name"]: engine_role(plan, r, workers[r["name"]]) for r in plan["roles"]}
    router = plan["router"]
    router_args = (
        flags(router["argv"][3:], ROUTER_LAUNCH_FLAGS, plan["env_shell_map"], "router") if router else {}
    )
    versions = plan.get("components", {})
    return {
        "name": f"{plan['config_key']}-{plan['variant']}".replace("_", "-"),
        "model": {"path": plan["model"], "container": plan["image"], "precision": precision},
        "identity": {
            "model": {"repo": plan["model"]},
            "container": {"image": plan["image"]},
            # versions as srt-slurm's identity states them; "as in <image>" (the image's own) is no version
            "frameworks": {
                k: v
                for k, v in versions.items()
                if k in ("sglang", plan["router_name"]) and re.fullmatch(r"[0-9][0-9A-Za-z.+-]*", v)
            },
        },
        "slurm": {"time_limit": plan["slurm"]["time_limit"]},
        "resources": {"gpus_per_node": plan["gpus_per_node"]},
        "frontend": {"type": plan["router_name"], "enable_multiple_frontends": False, "args": router_args},
        "engine": "sglang",
        "roles": roles,
    }


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
