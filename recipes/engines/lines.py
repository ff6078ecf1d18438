"""Engine command lines out of plan.json: one per role of a variant, its runtime references resolved to
representative values, the model path swapped for a stub model folder, declared flags of its build set
aside. Pure functions of the plan, the engine builds and the model's architecture."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from recipes.models import facts
from schemas.engine_builds import EngineBuild, build_of

from .stubs import stub_folder

# How each engine's command line starts (past an `env NAME=VALUE ...` prefix).
PROGRAMS = {
    "vllm": ("vllm", "serve"),
    "sglang": ("python3", "-m", "sglang.launch_server"),
    "atom": ("python3", "-m", "atom.entrypoints.openai_server"),
}
_REF = re.compile(r"\$\$|\$\{([A-Z_][A-Z0-9_]*)(?:\[([0-9]+)\])?\}")


class PlanError(ValueError):
    """A plan whose engine lines cannot be judged faithfully; the message says what is missing."""


@dataclass(frozen=True)
class Line:
    """One engine command line, ready for its build's parser."""

    name: str  # <config>/<variant>/<role>
    build: EngineBuild
    argv: tuple  # resolved, stub model folder in place of the model path, declared flags removed
    env: tuple  # (NAME, value): what the plan exports to the engine, and the line's `env` prefix
    unchecked: tuple = ()  # the build's declared flags this line carries (set aside, not judged)
    model_path: str = ""  # as the node would see it, for messages
    stub: str = ""

    @property
    def depth(self) -> str:
        return self.build.parser.depth


def addresses(plan: dict) -> dict:
    """Representative addresses by rank: the local cluster's NodeAddrs (127.0.0.11, .12, ...) where nodes
    are known by them, else documentation addresses (192.0.2.0/24, never a real host)."""
    local = "--slurm-nodeaddr" in plan["address_args"]
    return {
        n["rank"]: (f"127.0.0.{11 + n['rank']}" if local else f"192.0.2.{10 + n['rank']}")
        for n in plan["nodes"]
    }


def values(plan: dict, rank: int) -> dict:
    """What a `${NAME}` in rank's engine line stands for: env.sh's values, the node's and its peers'
    addresses, where node-private services listen."""
    by_rank = addresses(plan)
    out = {**plan["env_exported"], **plan["env_shell"], "NODE_ADDR": by_rank[rank]}
    out.update({f"PEER_ADDR[{r}]": a for r, a in by_rank.items()})
    if plan.get("node_local_addr") is not None:
        out["LOCAL_ADDR"] = resolve(plan["node_local_addr"], out)
    return out


def resolve(word: str, known: dict) -> str:
    """A plan.json word with `${NAME}` / `${NAME[i]}` replaced and `$$` made a literal `$`."""

    def one(match: re.Match) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group(1) + (f"[{match.group(2)}]" if match.group(2) is not None else "")
        if name not in known:
            raise PlanError(f"no representative value for ${{{name}}} (recipes/engines/lines.py: values)")
        return known[name]

    return _REF.sub(one, word)


def engine_lines(plan: dict, builds, stubs: Path) -> list[Line]:
    """The engine line of each role of the plan, in role order."""
    build = build_of(plan["image"], builds)  # the config's image (a local runner may run its own)
    if build is None:
        raise PlanError(f"image {plan['image']} has no (single) engine build: see `make lint`")
    model_path = f"{plan['container']['mounts'][0]}/{plan['model']}"
    stub = str(stub_folder(facts(plan["model"]).architecture, stubs))
    out = []
    for role in plan["roles"]:
        rank = next(n["rank"] for n in plan["nodes"] if n["role"] == role["name"])
        known = {**values(plan, rank), "RECIPE_DIR": str(recipe_stub(plan, stubs))}
        for service in role["services"]:
            env, argv = split_env(service["argv"])
            if tuple(argv[: len(PROGRAMS[plan["engine"]])]) != PROGRAMS[plan["engine"]]:
                continue
            name = f"{plan['config_key']}/{plan['variant']}/{role['name']}"
            argv = [resolve(w, known) for w in argv]
            if model_path not in argv:
                raise PlanError(f"{name}: the model path {model_path} is not in the engine line")
            argv, unchecked = set_aside(build, [stub if w == model_path else w for w in argv])
            env = {**plan["env_exported"], **{k: resolve(v, known) for k, v in env.items()}}
            out.append(
                Line(name, build, tuple(argv), tuple(sorted(env.items())), unchecked, model_path, stub)
            )
    return out


def recipe_stub(plan: dict, stubs: Path) -> Path:
    """What ${RECIPE_DIR} stands for: a folder of the plan's shipped folders (links to the repository's),
    so an engine line's PYTHONPATH=${RECIPE_DIR}/<shipped> finds what the job would ship."""
    root = Path(__file__).resolve().parents[2]
    folder = stubs / "recipe"
    folder.mkdir(parents=True, exist_ok=True)
    for name, source in plan["shipped"].items():
        link = folder / name
        if not (link.is_symlink() and link.resolve() == (root / source).resolve()):
            link.unlink(missing_ok=True)
            link.symlink_to(root / source)
    return folder


def split_env(words: list) -> tuple[dict, list]:
    """`env A=1 B=2 prog ...` -> ({A: 1, B: 2}, [prog, ...])."""
    if not words or words[0] != "env":
        return {}, list(words)
    rest, env = list(words[1:]), {}
    while rest and "=" in rest[0] and not rest[0].startswith("-"):
        key, _, value = rest.pop(0).partition("=")
        env[key] = value
    return env, rest


def set_aside(build: EngineBuild, argv: list) -> tuple[list, tuple]:
    """The line without the flags its build declares beyond its parser (and their values), and those
    flags, in order of appearance."""
    declared = {f.flag: f.values for f in build.extra_flags}
    out, unchecked, i = [], [], 0
    while i < len(argv):
        flag, eq, _ = argv[i].partition("=")
        if flag not in declared:
            out.append(argv[i])
            i += 1
            continue
        unchecked.append(flag)
        i += 1
        if eq or declared[flag] == "none":
            continue
        i += 1  # its one value
        while declared[flag] == "one-or-more" and i < len(argv) and not argv[i].startswith("-"):
            i += 1
    return out, tuple(unchecked)
