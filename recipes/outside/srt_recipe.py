"""srt-slurm recipes, read as srt-slurm reads them: where InferenceX's pointer leads, which section it names
and how that section merges over the recipe's `base` (srt-slurm's `resolve-override`).

A recipe is a file of an InferenceX checkout. Its pointer comes in InferenceX's two forms: a point's
`srt-recipe:` (a path from the checkout's root) and the older `CONFIG_FILE=recipes/<path>` of a worker (a path
in the multi-node recipe tree, which InferenceX copies into srt-slurm's `recipes/` at launch). Either may end
in `:<selector>`: `base`, `override_<name>` or `zip_override_<name>[<i>]` of a schema-2 bundle (`base:` plus
sections that hold only their differences).

srt-slurm's merge, as `srtctl resolve-override` applies it (tests/outside/test_srt_recipe.py holds this module
to it on every section of InferenceX's MI355X recipes): mappings merge key by key, a list or a scalar replaces
what it meets, a null deletes the key; a section without a `name` is named `<base name>_<suffix>`. A zip
section's lists are its variants: the i-th takes each list's i-th item (a one-item list serves every variant),
and is named `<base name>_<group>_<i>` unless the section lists its names.
"""

from __future__ import annotations

import copy
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from schemas.yamlio import YamlSyntaxError, load_file

# Where an InferenceX checkout keeps the multi-node recipes its CONFIG_FILE pointers name as recipes/<path>.
MULTI_NODE_TREE = Path("benchmarks/multi_node/srt-slurm-recipes")
CONFIG_FILE_ROOT = "recipes/"
_ZIP_ITEM = re.compile(r"(zip_override_[\w-]+)\[(\d+)\]")


class RecipeError(ValueError):
    """A recipe that cannot be read as srt-slurm reads it; the message says what and where."""


@dataclass(frozen=True)
class Pointer:
    file: str  # as written, relative
    selector: str | None  # base | override_<name> | zip_override_<name>[i]; None: the whole file

    @classmethod
    def parse(cls, text: str) -> Pointer:
        file, sep, selector = text.partition(":")
        return cls(file, selector if sep else None)


# Names the folder recipes are read from, for a master file in no InferenceX checkout (make render RECIPES=).
RECIPES_ENV = "SRT_RECIPES"


def checkout_of(start: Path) -> Path | None:
    """Where the recipes a master file names are read from: SRT_RECIPES when set, else the InferenceX checkout
    holding `start` (the nearest folder upward with the multi-node recipe tree); None when there is none."""
    if os.environ.get(RECIPES_ENV):
        return Path(os.environ[RECIPES_ENV]).resolve()
    folder = (start if start.is_dir() else start.parent).resolve()
    for candidate in (folder, *folder.parents):
        if (candidate / MULTI_NODE_TREE).is_dir():
            return candidate
    return None


def locate(pointer: Pointer, checkout: Path) -> Path:
    """The file a pointer names in `checkout`, never outside it."""
    relative = pointer.file
    if relative.startswith(CONFIG_FILE_ROOT):
        path = checkout / MULTI_NODE_TREE / relative.removeprefix(CONFIG_FILE_ROOT)
    else:
        path = checkout / relative
    resolved = path.resolve()
    if not resolved.is_relative_to(checkout.resolve()):
        raise RecipeError(f"recipe {pointer.file} leads outside the checkout {checkout}")
    if not resolved.is_file():
        raise RecipeError(f"recipe {pointer.file} is not in the checkout {checkout} (looked for {path})")
    return resolved


def load(path: Path) -> dict[str, Any]:
    """The recipe file as plain data, through the bounded loader every config goes through."""
    try:
        data = load_file(path).data
    except YamlSyntaxError as err:
        raise RecipeError(f"recipe {path}: line {err.line}: {err.message}") from None
    if not isinstance(data, dict):
        raise RecipeError(f"recipe {path} is not a mapping")
    return data


def is_bundle(raw: dict[str, Any]) -> bool:
    return "base" in raw


def sections(raw: dict[str, Any]) -> list[str]:
    """Every selector of a bundle, as srtctl lists them: overrides, then each zip group's items."""
    names = sorted(k for k in raw if isinstance(k, str) and k.startswith("override_"))
    for key in sorted(k for k in raw if isinstance(k, str) and k.startswith("zip_override_")):
        names += [f"{key}[{i}]" for i in range(_zip_length(_mapping(raw[key], key)))]
    return names


def variant(raw: dict[str, Any], selector: str | None) -> dict[str, Any]:
    """The recipe one selector names: a bundle's section merged over its base, or a plain recipe as it is."""
    if not is_bundle(raw):
        if selector not in (None, "base"):
            raise RecipeError(
                f"selector {selector!r} given, but the recipe has no base to merge sections over"
            )
        return copy.deepcopy(raw)
    base = _mapping(raw["base"], "base")
    if selector is None:
        raise RecipeError(f"a bundle needs a selector: base or one of {', '.join(sections(raw)) or '(none)'}")
    if selector == "base":
        return copy.deepcopy(base)
    zipped = _ZIP_ITEM.fullmatch(selector)
    if zipped:
        key, index = zipped.group(1), int(zipped.group(2))
        group = _mapping(raw.get(key), key) if key in raw else None
        if group is None:
            raise RecipeError(f"{key} is not a section of the recipe (it has {', '.join(sections(raw))})")
        n = _zip_length(group)
        if index >= n:
            raise RecipeError(f"{selector}: {key} has {n} variants (0 to {n - 1})")
        merged = merge(base, _zip_slice(group, index))
        if not isinstance(group.get("name"), list):
            merged["name"] = f"{base.get('name', 'unnamed')}_{key.removeprefix('zip_override_')}_{index}"
        return merged
    if not selector.startswith("override_") or selector not in raw:
        raise RecipeError(f"{selector} is not a section of the recipe (it has {', '.join(sections(raw))})")
    section = _mapping(raw[selector], selector)
    merged = merge(base, section)
    if "name" not in section:
        merged["name"] = f"{base.get('name', 'unnamed')}_{selector.removeprefix('override_')}"
    return merged


def merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """srt-slurm's deep merge: mappings key by key, anything else replaced, a null deleting the key."""
    result = copy.deepcopy(base)
    for key, value in override.items():
        if value is None:
            result.pop(key, None)
        elif isinstance(value, dict) and isinstance(result.get(key), dict):
            result[key] = merge(result[key], value)
        else:
            result[key] = copy.deepcopy(value)
    return result


def _dict(value: object) -> dict[str, Any]:
    """`value` where it is a mapping, else an empty one (a key the recipe leaves out)."""
    return value if isinstance(value, dict) else {}


def _mapping(value: object, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise RecipeError(f"{where} is not a mapping")
    return value


def _list_lengths(d: dict[str, Any]) -> list[int]:
    out: list[int] = []
    for value in d.values():
        if isinstance(value, list):
            out.append(len(value))
        elif isinstance(value, dict):
            out += _list_lengths(value)
    return out


def _zip_length(group: dict[str, Any]) -> int:
    lengths = _list_lengths(group)
    if not lengths or 0 in lengths:
        raise RecipeError("a zip section needs lists, none of them empty")
    wide = {n for n in lengths if n != 1}
    if len(wide) > 1:
        raise RecipeError(
            f"a zip section's lists differ in length {sorted(wide)} (each is one long or all alike)"
        )
    return wide.pop() if wide else 1


def _zip_slice(d: dict[str, Any], index: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in d.items():
        if isinstance(value, list):
            out[key] = value[0 if len(value) == 1 else index]
        elif isinstance(value, dict):
            out[key] = _zip_slice(value, index)
        else:
            out[key] = value
    return out


def resolve(text: str, checkout: Path) -> tuple[Path, dict[str, Any]]:
    """(file, merged recipe) of a pointer as written in a master file."""
    pointer = Pointer.parse(text)
    path = locate(pointer, checkout)
    return path, variant(load(path), pointer.selector)


# ---------------------------------------------------------------- what a recipe launches, for the planner

# A flag name as a recipe writes it (srt-slurm turns '_' into '-'), an environment variable name.
_FLAG = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}", re.ASCII)
_ENV = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}", re.ASCII)
_SCALAR = (str, int, float, bool)
ROLES = ("prefill", "decode")


@dataclass(frozen=True)
class RoleLaunch:
    """One role of a recipe: how many workers on how many nodes, and each worker's flags and environment as
    the recipe writes them."""

    workers: int
    nodes: int
    gpus: int | None
    args: dict[str, Any]
    env: dict[str, str]

    def cli(self) -> list[str]:
        return cli(self.args)


def cli(args: dict[str, Any]) -> list[str]:
    """Flags as srt-slurm writes them on an engine's line: keys sorted, '_' as '-', a true switch alone, a
    false one left out, a list's items after its flag."""
    out: list[str] = []
    for key, value in sorted(args.items()):
        flag = "--" + key.replace("_", "-")
        if isinstance(value, bool):
            out += [flag] if value else []
        elif isinstance(value, list):
            out += [flag, *(str(v) for v in value)]
        elif value is not None:
            out += [flag, str(value)]
    return out


@dataclass(frozen=True)
class ServiceLaunch:
    """One entry of a recipe's `services:` (srt-slurm's processes beside the engines): its kind, the role
    whose nodes it runs on, and the flags appended to the command the kind writes."""

    name: str
    type: str
    placement: str
    args: tuple[str, ...]


@dataclass(frozen=True)
class SrtLaunch:
    """The merged recipe a point runs: where it came from and what it launches."""

    pointer: str
    file: Path
    name: str
    engine: str
    roles: dict[str, RoleLaunch]
    frontend: str | None
    frontend_args: dict[str, Any]
    time_limit: str | None
    services: tuple[ServiceLaunch, ...] = ()
    benchmark_env: dict[str, str] = field(default_factory=dict)


def launch_of(pointer: str, file: Path, merged: dict[str, Any]) -> SrtLaunch:
    """What a merged recipe launches, its values checked for shape: flags and environment names of safe
    characters, scalar values or lists of them (a mapping would reach the line as Python's repr)."""
    where = f"recipe {pointer}"
    engine = merged.get("engine")
    if isinstance(engine, dict):  # the newer form: engine: {type: vllm, connector: ...}
        engine = engine.get("type")
    if not isinstance(engine, str):
        raise RecipeError(
            f"{where}: no engine (srt-slurm's schema 2 names it: engine: sglang, vllm, atom, ...)"
        )
    roles_raw = _mapping(merged.get("roles", {}), f"{where}: roles")
    if unknown := sorted(set(roles_raw) - set(ROLES)):
        raise RecipeError(f"{where}: roles {unknown} are not rendered here (prefill and decode are)")
    # the job-wide environment reaches every role's processes; a role's own value of a name wins
    job_env = _env(f"{where}: environment", _mapping(merged.get("environment", {}), f"{where}: environment"))
    roles = {
        name: _role(f"{where}: roles.{name}", _mapping(raw, name), job_env) for name, raw in roles_raw.items()
    }
    frontend = _mapping(merged.get("frontend", {}), f"{where}: frontend")
    slurm = _mapping(merged.get("slurm", {}), f"{where}: slurm")
    limit = slurm.get("time_limit")
    benchmark = _mapping(merged.get("benchmark", {}), f"{where}: benchmark")
    return SrtLaunch(
        pointer=pointer,
        file=file,
        name=str(merged.get("name", "")),
        engine=engine,
        roles=roles,
        frontend=frontend.get("type") if isinstance(frontend.get("type"), str) else None,
        frontend_args=_mapping(frontend.get("args", {}), f"{where}: frontend.args"),
        time_limit=limit if isinstance(limit, str) else None,
        services=_services(f"{where}: services", merged.get("services", [])),
        benchmark_env=_env(
            f"{where}: benchmark.env", _mapping(benchmark.get("env", {}), f"{where}: benchmark")
        ),
    )


def _services(where: str, raw: object) -> tuple[ServiceLaunch, ...]:
    if not isinstance(raw, list):
        raise RecipeError(f"{where} is not a list")
    out = []
    for i, item in enumerate(raw):
        item = _mapping(item, f"{where}[{i}]")
        kind, name = item.get("type", "generic"), item.get("name", "")
        placement = _mapping(item.get("placement", {}), f"{where}[{i}].placement").get("node", "workers")
        args = item.get("args", [])
        if not isinstance(args, list) or not all(
            isinstance(a, _SCALAR) and not isinstance(a, bool) for a in args
        ):
            raise RecipeError(f"{where}[{i}].args: not a list of words")
        if not all(isinstance(v, str) for v in (kind, name, placement)):
            raise RecipeError(f"{where}[{i}]: type, name and placement.node are names")
        out.append(ServiceLaunch(name, kind, placement, tuple(str(a) for a in args)))
    return tuple(out)


def _env(where: str, env: dict[str, Any]) -> dict[str, str]:
    for key, value in env.items():
        if not isinstance(key, str) or not _ENV.fullmatch(key):
            raise RecipeError(f"{where}: {key!r} is not an environment variable name")
        if not isinstance(value, str) or not value.isprintable():
            raise RecipeError(f"{where}.{key}: {value!r} is not a line of text (write numbers quoted)")
    return dict(env)


def _role(where: str, raw: dict[str, Any], job_env: dict[str, str]) -> RoleLaunch:
    workers, nodes, gpus = raw.get("workers", 1), raw.get("nodes", 1), raw.get("gpus")
    for key, value in (("workers", workers), ("nodes", nodes)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise RecipeError(f"{where}.{key}: {value!r} is not a whole number of at least 1")
    if gpus is not None and (not isinstance(gpus, int) or isinstance(gpus, bool) or gpus < 1):
        raise RecipeError(f"{where}.gpus: {gpus!r} is not a whole number of at least 1")
    args = _mapping(raw.get("args", {}), f"{where}.args")
    for key, value in args.items():
        if not isinstance(key, str) or not _FLAG.fullmatch(key):
            raise RecipeError(
                f"{where}.args: {key!r} is not a flag name (lowercase letters, digits, '-', '_')"
            )
        items = value if isinstance(value, list) else [value]
        if value is not None and not all(isinstance(v, _SCALAR) for v in items):
            raise RecipeError(
                f"{where}.args.{key}: a mapping or nested list, which srt-slurm writes as Python's repr"
            )
    env = _env(f"{where}.env", _mapping(raw.get("env", {}), f"{where}.env"))
    return RoleLaunch(workers, nodes, gpus, dict(args), {**job_env, **env})


def read(text: str, checkout: Path) -> SrtLaunch:
    """What the pointer `text` (as a master file writes it) launches."""
    path, merged = resolve(text, checkout)
    return launch_of(text, path, merged)


# ---------------------------------------------------------------- a recipe rendered on its own

# InferenceX's frameworks by srt-slurm engine: a recipe's two roles are a disaggregated launch.
DISAGG_FRAMEWORK = {"sglang": "sglang-disagg", "vllm": "vllm-disagg", "atom": "atom-disagg"}


@dataclass(frozen=True)
class RowInputs:
    """What a recipe does not say and its master row must: given on the command line, else refused."""

    runner: str
    model: str | None = None
    image: str | None = None
    precision: str | None = None
    router_version: str | None = None
    isl: int | None = None
    osl: int | None = None
    concurrencies: tuple[int, ...] = ()


def master_row(launch: SrtLaunch, merged: dict[str, Any], pointer: str, given: RowInputs) -> dict[str, Any]:
    """The InferenceX master row of one recipe: what the recipe states (model, image, engine, roles, router,
    transfer) and what `given` adds; a value neither states is refused by name."""
    identity, model_block = _dict(merged.get("identity")), _dict(merged.get("model"))
    stated_model = _dict(identity.get("model")).get("repo")
    model, image = given.model or stated_model, given.image or model_block.get("container")
    precision = given.precision or model_block.get("precision")
    frameworks = _dict(identity.get("frameworks"))
    router_version = given.router_version or frameworks.get(launch.frontend or "")
    transfer = (
        launch.roles["prefill"].args.get("disaggregation-transfer-backend")
        if "prefill" in launch.roles
        else None
    )
    missing = [
        what
        for what, value in (
            ("MODEL=<org/name> (the recipe states no identity.model.repo)", model),
            ("IMAGE=<image> (the recipe states no model.container)", image),
            ("PRECISION=<fp8, fp4, ...> (the recipe states no model.precision)", precision),
            (
                "ROUTER_VERSION=<release> (the recipe's identity.frameworks has no version of its router)",
                router_version or launch.frontend is None,
            ),
            ("a kv transfer: the recipe's prefill states no disaggregation-transfer-backend", transfer),
            ("ISL=<tokens>", given.isl),
            ("OSL=<tokens>", given.osl),
            ('CONC="<c1> <c2> ..."', given.concurrencies),
        )
        if not value
    ]
    if missing:
        raise RecipeError(
            f"recipe {pointer} does not say everything its launch needs: give {', '.join(missing)}"
        )
    if launch.engine not in DISAGG_FRAMEWORK or set(launch.roles) != set(ROLES):
        raise RecipeError(
            f"recipe {pointer}: only prefill/decode recipes of {', '.join(DISAGG_FRAMEWORK)} render"
        )
    prefill_args = launch.roles["prefill"].args
    row: dict[str, Any] = {
        "image": image,
        "model": model,
        "model-prefix": str(model).rsplit("/", 1)[-1].split("-")[0].lower(),
        "runner": given.runner,
        "precision": str(precision),
        "framework": DISAGG_FRAMEWORK[launch.engine],
        "multinode": True,
        "disagg": True,
    }
    if launch.frontend is not None:
        row["router"] = {"name": launch.frontend, "version": str(router_version)}
    row["kv-p2p-transfer"] = str(transfer)
    point: dict[str, Any] = {
        "spec-decoding": "mtp" if any(k.startswith("speculative-") for k in prefill_args) else "none",
        "conc-list": list(given.concurrencies),
        "srt-recipe": pointer,
    }
    for role in ROLES:
        rl = launch.roles[role]
        tp = rl.args.get("tp-size", rl.args.get("tp", rl.gpus))
        point[role] = {
            "num-worker": rl.workers,
            "tp": tp,
            "ep": rl.args.get("ep-size", 1),
            "dp-attn": bool(rl.args.get("enable-dp-attention", False)),
        }
    return {
        **row,
        "scenarios": {"fixed-seq-len": [{"isl": given.isl, "osl": given.osl, "search-space": [point]}]},
    }
