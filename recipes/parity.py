"""`make parity`: our rendered launch held against what InferenceX's own scripts launch for the same entry,
difference by difference (engine flags and environment per role, container options and image, LMCache server,
router, benchmark client, sbatch options). InferenceX's side is never transcribed: its chain (matrix
generator, workflow, runner script, per-entry launcher, amd_utils) runs from an InferenceX checkout under
recorders (recipes/outside), and what its processes would have been started with is compared with ours.
configs/parity/inferencex.yaml says which checkout each config is held against; every difference must be
listed, with its reason and evidence, in configs/parity/reviewed.yaml; anything else is unexplained and the
command exits 1.

    python -m recipes.parity CONFIG [--variant V] [--inferencex CHECKOUT] [--configs FILE]

Every variant of CONFIG is compared unless --variant names one; a variant whose shape InferenceX's matrix
never runs is said as never compared. --configs: the master file both sides' entry is read from (ours
rendered from it as `make render CONFIGS=` does); without it ours comes from configs/*-master.yaml (or, for
InferenceX's own entries, from the checkout's master file unless our configs hold a copy). A site's copy on a
runner of its own is rendered on its runner, held against InferenceX's own entry, and the runner is a
difference. Exit 0: all explained; 1: a difference unexplained; 2: the comparison cannot be made; 3: no
known-working counterpart (InferenceX never ran the config's model with its engine on its GPU, or its matrix
runs none of the config's shapes).
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from schemas import lint, yamlio
from schemas.findings import did_you_mean

from . import nodesetup
from .build import build_plan
from .engines.lines import PROGRAMS
from .outside import chain
from .plan import Plan
from .render import ROOT_DIR, RenderError, load
from .target import Unsupported

LAUNCHES_FILE = ROOT_DIR / "configs" / "parity" / "inferencex.yaml"
REVIEWED_FILE = ROOT_DIR / "configs" / "parity" / "reviewed.yaml"
CATEGORIES = ("engine-args", "engine-env", "container", "lmcache", "router", "client", "derived")
ROLES = ("prefill", "decode")
ABSENT = None  # a flag or variable one side does not have
# What a launch puts before the image's own search paths is compared; the image's values are placeholders
# (spelled so on both sides: the recorder's containers hold them, recipes/outside/shims/hops.py).
IMAGE_PYTHONPATH = "<the image's PYTHONPATH>"
IMAGE_LD_LIBRARY_PATH = "<the image's LD_LIBRARY_PATH>"


# Exit codes: 0 every difference explained; 1 a difference unexplained (or a review stale); 2 the comparison
# cannot be made (a file missing, a key not recorded, a config that does not render yet); 3 nothing to compare
# with: InferenceX never ran the config's model with its engine on its GPU.
EXIT_UNEXPLAINED, EXIT_CANNOT_COMPARE, EXIT_NO_COUNTERPART = 1, 2, 3


class ParityError(Exception):
    """The comparison cannot be made (no InferenceX launch for the config, a file missing)."""


class NoCounterpart(ParityError):
    """InferenceX has no known-working launch of the config's model with its engine on its GPU (or runner):
    there is nothing to compare with, which is said before anything asks for InferenceX's files."""


@dataclass(frozen=True)
class Difference:
    category: str
    role: str  # prefill | decode | all
    item: str  # a flag, variable, option or value name
    ours: object
    theirs: object
    explained_by: dict | None = None

    def line(self) -> str:
        values = f"ours {_shown(self.ours)}, InferenceX {_shown(self.theirs)}"
        return f"{self.category:<11} {self.role:<7} {self.item}: {values}"


def _shown(value) -> str:
    return "(absent)" if value is ABSENT else json.dumps(value) if not isinstance(value, str) else repr(value)


# ---- argv and environment as comparable maps -------------------------------------------------------------


def flag_map(words: list[str]) -> dict:
    """`--flag value`, `--flag=value` and bare `--flag` as {flag: value or True}; JSON values parsed, so two
    spellings of one object compare equal. Every value of a flag is kept: `--cuda-graph-bs 1 2 3` is
    "1 2 3", and a repeated flag's values are joined in order, so a difference anywhere in the list shows.
    Positional words before any flag are skipped (the model path, a subcommand)."""
    out: dict[str, Any] = {}
    i = 0
    while i < len(words):
        word = words[i]
        if _is_flag(word):
            flag, eq, given = word.partition("=")
            values = [given] if eq else []
            while not eq and i + 1 < len(words) and not _is_flag(words[i + 1]):
                values.append(words[i + 1])
                i += 1
            value = True if not values else _json_or(values[0]) if len(values) == 1 else " ".join(values)
            if isinstance(out.get(flag), str) and isinstance(value, str):
                value = f"{out[flag]} {value}"
            out[flag] = value
        i += 1
    return out


def _is_flag(word: str) -> bool:
    return word.startswith("-") and len(word) > 1


def _json_or(value):
    if isinstance(value, str) and value[:1] in "{[":
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _leaves(prefix: str, value) -> dict:
    """A JSON value as {dotted path: leaf}: two kv-transfer configs differ key by key, not as one blob."""
    if isinstance(value, dict):
        return {k: v for key in sorted(value) for k, v in _leaves(f"{prefix}.{key}", value[key]).items()}
    if isinstance(value, list):
        return {k: v for i, item in enumerate(value) for k, v in _leaves(f"{prefix}[{i}]", item).items()}
    return {prefix: value}


def _flatten(flags: dict) -> dict:
    out = {}
    for flag, value in flags.items():
        out.update(_leaves(flag, value) if isinstance(value, dict | list) else {flag: value})
    return out


def _expand(word, values: dict) -> str:
    """A rendered word with the run's variables filled in as the node would (env.sh, addresses)."""
    return "".join(p if isinstance(p, str) else values.get(p.var, f"${{{p.var}}}") for p in word)


def _option(flag: str, value):
    """One docker run option as (item, value): a repeatable option is one item per value."""
    return (f"{flag} {value}", True) if flag in REPEATED else (flag, value)


# ---- our side --------------------------------------------------------------------------------------------


# category -> role (or "all") -> item -> value: one side of the comparison.
Side = dict[str, dict[str, dict[str, Any]]]


def _empty_side() -> Side:
    return {c: {} for c in CATEGORIES}


def ours(plan) -> dict:
    """category -> role -> {item: value} of our rendered plan."""
    values = {**dict(plan.env_shell), "LOCAL_ADDR": "127.0.0.1", **node_addresses(len(plan.nodes))}
    side = _empty_side()
    exported = {k: str(v) for k, v in plan.env_exported}
    if plan.python_path_first:  # prepended to the image's own in env.sh
        exported["PYTHONPATH"] = ":".join([*plan.python_path_first, IMAGE_PYTHONPATH])
    if plan.library_path_first:
        exported["LD_LIBRARY_PATH"] = ":".join([*plan.library_path_first, IMAGE_LD_LIBRARY_PATH])
    for role in plan.roles:
        # a role's engine is compared on its first node: its own address is that node's
        first = next((n.rank for n in plan.nodes if n.role == role.name), 0)
        here = f"<node {first} address>"
        values["NODE_ADDR"] = here
        for service in role.services:
            words = [_expand(w, values) for w in service.argv]
            if service.name in ENGINE_SERVICES:
                # the engine's own words follow its program; before it, `env NAME=VALUE` of this role only
                start = next((words.index(w) + 1 for w in ENGINE_PROGRAMS if w in words), 0)
                prefix = {w.partition("=")[0]: w.partition("=")[2] for w in words[:start] if "=" in w}
                side["engine-args"][role.name] = _flatten(flag_map(words[start:]))
                env = {k: v.replace("${NODE_ADDR}", here) for k, v in exported.items()}
                side["engine-env"][role.name] = {**env, **prefix}
            elif service.name == "lmcache":
                side["lmcache"]["prefill"] = flag_map(words[2:])
    if plan.router is not None:
        words = [_expand(w, values) for w in plan.router.argv]
        side["router"]["all"] = {"program": _program(plan.router.argv, values)}
        if ROUTER_MODULE in words:  # SGLang's router: its flags are launch facts on both sides
            side["router"]["all"].update(flag_map(words[words.index(ROUTER_MODULE) + 1 :]))
        elif words[:2] == ["atomesh", "launch"]:  # so are ATOM's
            side["router"]["all"].update(flag_map(words[2:]))
    if plan.benchmarks:
        words = [_expand(w, values) for w in plan.benchmarks[0].argv]
        client = flag_map(words[words.index("profile") + 1 :])
        side["client"]["all"] = {k: v for k, v in client.items() if k not in PER_BENCHMARK}
        side["client"]["all"]["build"] = _client_build(plan)
        before = words[: words.index("aiperf")] if "aiperf" in words else []
        side["client"]["all"].update(
            {f"env {k}": v for k, _, v in (w.partition("=") for w in before) if k.startswith(CLIENT_ENV)}
        )
        if plan.benchmarks[0].before:  # caches emptied before each point (InferenceX's agentic client does)
            side["client"]["all"][FLUSH_ITEM] = FLUSH_VALUE
    side["container"]["all"] = _container_words(plan, values)
    if side["container"]["all"]:
        side["container"]["all"]["image"] = plan.image
        side["container"]["all"][INSTALLS] = _installs(plan)
    side["derived"]["all"] = {"time-limit": plan.slurm.time_limit, "sbatch --partition": plan.slurm.partition}
    launch = [_expand(w, values) for w in plan.launch]
    for word in launch[1 : launch.index("--")] if launch[:1] == ["srun"] and "--" in launch else []:
        flag, _, value = word.partition("=")
        if flag in SRUN_COMPARED:
            side["derived"]["all"][f"srun {flag}"] = value or "true"
    side["derived"]["all"].update(
        {f"sbatch --{k}": str(v) for k, v in plan.slurm.extras if f"--{k}" in SBATCH_COMPARED}
    )
    return side


INSTALLS = "installs at container start"


def _installs(plan) -> str:
    """What goes onto the image's own Python path before the engines start (a site's wheel of a library the
    image lacks, from the run's hashed wheelhouse); tools in environments of their own are not the image's."""
    layered = [s for s in (plan.node_setup.sets if plan.node_setup else ()) if s.layer]
    said = [f"{s.name} {s.version}".strip() + " from the run's hashed wheelhouse" for s in layered]
    return "; ".join(said) or "none"


def node_addresses(nodes: int) -> dict[str, str]:
    """Node N's address as both sides name it: what its host looked up at run time."""
    return {f"PEER_ADDR[{rank}]": f"<node {rank} address>" for rank in range(nodes)}


def _program(argv, values) -> str:
    words = [_expand(w, values) for w in argv]
    return "python3 -m proxy" if "proxy" in words else ROUTER_MODULE if ROUTER_MODULE in words else words[0]


ROUTER_MODULE = "sglang_router.launch_router"
# An engine's service is named as its engine; its own words follow its program's last word.
ENGINE_SERVICES = tuple(PROGRAMS)
ENGINE_PROGRAMS = tuple(words[-1] for words in PROGRAMS.values())


def _container_words(plan, values) -> dict:
    """The docker run options of the node container as {option: value} (repeatable options by value)."""
    words = [_expand(w, values) for w in plan.launch]
    if "run" not in words:
        return {}
    words = words[words.index("run") + 1 :]
    out: dict = {}
    if "--" in words:  # scripts/container.sh's host options: what the node's host decides before docker run
        out = _host_options(words[: words.index("--")])
        words = words[words.index("--") + 1 :]
    i = 0
    while i < len(words) and words[i].startswith("-"):
        flag = words[i]
        takes = flag not in ("--init", "--privileged")
        if flag != "-e":  # the node script's variables: placement, not launch facts
            item, value = _option(flag, words[i + 1] if takes else True)
            out[item] = value
        i += 2 if takes else 1
    return out


def _host_options(words: list[str]) -> dict:
    """container.sh's host options as the docker run options they become on the node: the user, the verbs
    device of each RDMA NIC named (its uverbsN is the host's to find), the host files mounted read-only."""
    out: dict = {}
    i = 0
    while i < len(words):
        flag = words[i]
        if flag == "--as-submitter":
            out["--user"] = "the submitting user, with the groups owning the GPU and RDMA device files"
        elif flag == "--as-root":
            out["--user"] = "root, files handed back to the submitting user"
        elif flag == "--rdma-device":
            out["--device /dev/infiniband/rdma_cm"] = True
            out[f"--device /dev/infiniband/<verbs device of {words[i + 1]}>"] = True
        elif flag == "--host-file":
            host, _, at = words[i + 1].partition("=")
            out[f"-v {host}:{at or host}:ro"] = True
        i += 1 if flag in ("--as-submitter", "--as-root") else 2
    return out


# The job's sbatch options beyond its shape that decide where and how it runs (both sides).
SRUN_COMPARED = ("--signal", "--kill-on-bad-exit")  # how the node steps are signalled and ended
SBATCH_COMPARED = ("--partition", "--signal", "--exclude", "--gres", "--qos", "--reservation", "--constraint")
CLIENT_ENV = "AIPERF_"  # the client's own settings by environment (both sides' AIPerf)


def _client_build(plan) -> str:
    """Which AIPerf the client is: the version the run's wheelhouse pins (node setup), else the image's."""
    for s in plan.node_setup.sets if plan.node_setup else ():
        if "aiperf" in s.commands:
            pins = {p.name: p.version for p in nodesetup.read_lock(nodesetup.LOCKS / s.lock)}
            return f"aiperf=={pins.get('aiperf', '?')} from the run's hashed wheelhouse ({s.lock})"
    return "aiperf from the image"


PER_BENCHMARK = ("--concurrency", "--output-artifact-dir")  # the sweep's, one per point: not launch facts
# Every engine's caches emptied before each benchmark, as both sides' facts name it.
FLUSH_ITEM, FLUSH_VALUE = "--flush-caches-before-each", "POST /flush_cache on every worker"
REPEATED = ("--device", "--ulimit", "--cap-add", "--security-opt", "-v", "--group-add")


# ---- InferenceX's side -----------------------------------------------------------------------------------


def _entry(path: Path, key: str) -> dict:
    data = _read_yaml(path)
    if not isinstance(data.get(key), dict):
        raise ParityError(f"{path}: no entry {key!r}")
    return data[key]


def _field(data, key: str, where: object = LAUNCHES_FILE.name):
    """data[key], or a ParityError naming the file and the key (a file of InferenceX's is hostile input)."""
    if not isinstance(data, dict) or key not in data:
        raise ParityError(f"{where}: no {key!r}")
    return data[key]


def checkout_of(launch: dict, inferencex: Path) -> Path:
    """The InferenceX checkout a launch is recorded from: INFERENCEX itself when it is one (it holds
    benchmarks/multi_node), else the launch's `checkout` folder inside it (the reference folder holds one
    checkout per launch InferenceX ran)."""
    if (inferencex / "benchmarks" / "multi_node").is_dir():
        return inferencex
    checkout = inferencex / str(_field(launch, "checkout"))
    if not (checkout / "benchmarks" / "multi_node").is_dir():
        raise ParityError(
            f"{inferencex} is neither an InferenceX checkout (no benchmarks/multi_node) nor a folder holding "
            f"{launch['checkout']}/: point INFERENCEX= at a checkout at {launch.get('commit', 'its commit')}"
        )
    return checkout


def edits_of(launch: dict) -> tuple[chain.Edit, ...]:
    """The launch's declared edits of InferenceX's files (each with its reason), as the chain applies them."""
    out = []
    for i, e in enumerate(launch.get("edits") or ()):
        where = f"{LAUNCHES_FILE.name}: edits[{i}]"
        out.append(chain.Edit(*(str(_field(e, k, where)) for k in ("file", "after", "insert", "why"))))
    return tuple(out)


def _read_yaml(path: Path) -> dict:
    """A file of ours or of InferenceX's, read as hostile input (size cap, no tags), a repeated key refused
    (in reviewed.yaml a second review of one item would silently replace the first)."""
    try:
        doc = yamlio.load_file(path)
    except OSError as exc:
        raise ParityError(f"cannot read {path}: {exc.strerror}") from None
    except yamlio.YamlSyntaxError as exc:
        raise ParityError(str(exc)) from None
    if doc.duplicates:
        d = doc.duplicates[0]
        raise ParityError(
            f"{path}:{d.line}: {'.'.join(map(str, d.path))} repeated (first at line {d.first_line})"
        )
    return doc.data if isinstance(doc.data, dict) else {}


# ---- the comparison --------------------------------------------------------------------------------------


def differences(our: dict, their: dict) -> list[Difference]:
    out = []
    for category in CATEGORIES:
        mine, other = our.get(category, {}), their.get(category, {})
        for role in sorted(set(mine) | set(other)):
            a, b = mine.get(role, {}), other.get(role, {})
            for item in sorted(set(a) | set(b)):
                if _norm(a.get(item, ABSENT)) != _norm(b.get(item, ABSENT)):
                    out.append(Difference(category, role, item, a.get(item, ABSENT), b.get(item, ABSENT)))
    return out


def _norm(value):
    """Values as compared: numbers by value (0.9 is 0.90), the rest as text."""
    if value is ABSENT or isinstance(value, bool):
        return value
    try:
        return float(value)
    except (TypeError, ValueError):
        return str(value)


def reviewed_items(reviewed: list[dict], key: str, variant: str = "") -> list[dict]:
    """The reviewed entries of config KEY's VARIANT, one per item: {category, role, item, ours, theirs,
    reason, ...}. An entry groups the items one reason explains: `items: {item: [ours, theirs]}` (null:
    absent); `configs` and the optional `variants` are globs (a value that holds for one sequence length)."""
    out = []
    for entry in reviewed:
        if not any(fnmatch.fnmatchcase(key, p) for p in entry["configs"]):
            continue
        if not any(fnmatch.fnmatchcase(variant, p) for p in entry.get("variants", ["*"])):
            continue
        for item, (our, their) in entry["items"].items():
            out.append({**entry, "item": item, "ours": our, "theirs": their})
    return out


def explain(
    found: list[Difference], reviewed: list[dict], key: str, variant: str = ""
) -> tuple[list[Difference], list[dict]]:
    """Each difference with the reviewed item that explains it (same category, role, item, and the same two
    values: a changed value needs a new review); and the reviewed items of this variant nothing matched."""
    mine = reviewed_items(reviewed, key, variant)
    used, out = set(), []
    for d in found:
        matches = [
            i
            for i, r in enumerate(mine)
            if r["category"] == d.category
            and r.get("role", "all") in (d.role, "all")
            and r["item"] == d.item
            and _norm(r["ours"]) == _norm(d.ours)
            and _norm(r["theirs"]) == _norm(d.theirs)
        ]
        match = matches[0] if matches else None
        used.update(matches)  # a review that also holds (a role's and every role's) is not stale
        out.append(Difference(**{**d.__dict__, "explained_by": mine[match] if match is not None else None}))
    stale = [r for i, r in enumerate(mine) if i not in used]
    return out, stale


# ---- which of InferenceX's launches a config is held against -----------------------------------------------


def _shown_path(path: Path) -> str:
    return str(path.relative_to(ROOT_DIR)) if path.is_relative_to(ROOT_DIR) else str(path)


def _gpu_in_key(key: str, model: str) -> str | None:
    """The GPU a key in InferenceX's naming states: `<model-prefix>-<precision>-<gpu>-<framework>...`, model
    being `<model-prefix>-<precision>`; None for a key named otherwise (our local configs)."""
    rest = key[len(model) + 1 :].split("-") if key.startswith(f"{model}-") else []
    return rest[0] if len(rest) > 1 and rest[0] else None


def launch_for(key: str, configs: Path | None = None) -> dict:
    """InferenceX's launch KEY is held against (configs/parity/inferencex.yaml lists the keys
    each launch covers). None recorded, the config itself says why, without InferenceX's files: a
    ParityError naming the recorded keys of its model and engine on its GPU when InferenceX ran that (KEY
    is to be recorded under one of them), NoCounterpart when InferenceX never ran its model with its
    engine on its GPU (or runner). A model is its `<model-prefix>-<precision>`, a GPU the one a key
    names, else the runner's profile label."""
    launches = _read_yaml(LAUNCHES_FILE).get("launches") or {}
    launch = next((f for f in launches.values() if key in f.get("configs", [])), None)
    if launch is not None:
        return launch
    facts = _shown_path(LAUNCHES_FILE)
    masters = [_read_yaml(p) for p in ([configs] if configs else lint.default_configs())]
    entry = next((m[key] for m in masters if isinstance(m.get(key), dict)), None)
    if entry is None:
        where = _shown_path(configs) if configs else lint.DEFAULT_CONFIG_GLOB
        known = [k for m in masters for k in m] + [k for f in launches.values() for k in f.get("configs", [])]
        hint = did_you_mean(key, known)
        raise ParityError(
            f"{key}: no such config in {where}, and no InferenceX launch is recorded for it in {facts}"
            + (f" ({hint})" if hint else "")
        )
    model_id, framework, runner = (str(entry.get(k) or "?") for k in ("model", "framework", "runner"))
    model = f"{entry.get('model-prefix')}-{entry.get('precision')}"
    engine = framework.split("-")[0]
    profiles = lint.lint_launch(ROOT_DIR / lint.DEFAULT_LAUNCH, lint.Report())
    label = profiles.label_of(runner) if profiles else runner
    gpu = _gpu_in_key(key, model)
    where = gpu or label
    ours_on = {gpu, runner, label} - {None}
    ran = {  # InferenceX's recorded keys of the model with the engine -> the GPU each names
        k: g
        for f in launches.values()
        if str(f.get("engine", "vllm")) == engine
        for k in f.get("configs", [])
        if (g := _gpu_in_key(k, model))
    }
    same = sorted(k for k, g in ran.items() if {g, profiles.label_of(g) if profiles else g} & ours_on)
    if same:
        raise ParityError(
            f"no InferenceX launch recorded for {key}: InferenceX ran {model_id} with {engine} on {where} as "
            f"{', '.join(same)}; if {key} copies one of those entries, add it to that launch's configs in "
            f"{facts}, else record InferenceX's own launch of it there"
        )
    gpus = ", ".join(sorted(set(ran.values())))
    profile = profiles.profiles.get(label) if profiles else None
    local = profile is not None and profile.engine_build != "image"  # simulated or CPU engines, no GPU
    run = f"make demo CONFIG={key}" if local else f"make submit CONFIG={key}"
    steps = [
        f"make check-engines CONFIG={key}, then a run ({run}) whose proofs and result gate hold its numbers"
    ]
    if ran:
        keys = " and ".join(f"CONFIG={k}" for k in sorted(ran))
        steps.append(
            f"the configs InferenceX did run on {gpus} are held against its launches: make parity {keys}"
        )
    if not local:
        steps.append(
            f"once InferenceX runs {model_id} with {engine} on {where}, record that launch in {facts} and "
            "run make parity again"
        )
    raise NoCounterpart(
        f"no known-working counterpart: InferenceX never ran {model_id} with {engine} on {where}; parity has "
        f"nothing to compare {key} with{f' (it ran it on {gpus} only)' if ran else ''}.\n"
        "What follows: this launch's values rest on this repository's checks alone (make lint judges every "
        "setting against the model and the runner, make check-engines every engine and client line against "
        f"the engines' own parsers); none of them is known to have worked with {engine} on {where}.\n"
        f"What to do instead: {'; '.join(steps)}."
    )


@dataclass(frozen=True)
class Comparison:
    plan: Plan
    found: list
    stale: list
    their_runner: str | None = None  # InferenceX's runner, when ours is a site's copy on a runner of its own
    uncompared: str | None = None  # why this variant has nothing to be held against


class NotRendered(ParityError):
    """Our side of the comparison does not render (yet): the render's findings say why."""


def compare(key: str, variant: str | None, inferencex: Path, configs: Path | None = None) -> list[Comparison]:
    """One comparison per variant of KEY (or only VARIANT's). InferenceX's side is what its own chain ran
    for the variant's matrix row (recipes/outside: the checkout's matrix generator, workflow, runner script,
    per-entry launcher and amd_utils run under recorders). configs: the master file both sides are read
    from, as `make render CONFIGS=` reads it; else ours from our configs (or, for a launch whose configs are
    InferenceX's own entries, from the checkout's master file unless our configs hold a copy of it) and
    theirs from the checkout's. Ours is always what `make submit` would launch: a site's copy of
    InferenceX's entry on a runner of its own is rendered on that runner and held against InferenceX's own
    entry on InferenceX's runner, the two runners a difference like any other (unexplained until reviewed).
    A variant InferenceX's matrix has no row for is a Comparison with `uncompared` saying so."""
    launch = launch_for(key, configs)
    entry_key = launch.get("entry-key") or key
    checkout = checkout_of(launch, inferencex)
    own_file = checkout / _field(launch, "entry")  # InferenceX's own entry
    site_copy = configs is None and any(
        isinstance(_read_yaml(p).get(key), dict) for p in lint.default_configs()
    )
    from_entry = launch.get("ours-from-entry") and not site_copy
    try:
        loaded = load(key, [configs] if configs else [own_file] if from_entry else None)
        targets = [t for t in loaded.targets(key) if variant in (None, t.variant)]
        if not targets:
            raise ParityError(f"{key} has no variant {variant!r}")
        plans = [(t, build_plan(t)) for t in targets]
    except RenderError as exc:
        said = "; ".join(f.format() for f in exc.findings)
        raise NotRendered(f"{key} does not render yet: {said}") from None
    except Unsupported as exc:
        raise NotRendered(f"{key} does not render yet: {exc}") from None
    entry_file = configs or own_file
    if configs and own_file.is_file() and isinstance(_read_yaml(own_file).get(entry_key), dict):
        # a master file whose entry runs elsewhere than InferenceX's own is a site's copy, not its entry
        given, own = (str(_entry(f, entry_key).get("runner")) for f in (configs, own_file))
        if loaded.launch.label_of(given) != loaded.launch.label_of(own):
            entry_file = own_file
    their_runner = str(_entry(entry_file, entry_key).get("runner") or "")
    reviewed = _read_yaml(REVIEWED_FILE).get("differences", [])
    edits = edits_of(launch)
    _record_rows(checkout, entry_key, plans, edits)
    out = []
    for target, plan in plans:
        elsewhere = bool(their_runner) and loaded.launch.label_of(their_runner) != target.runner_label
        try:
            their_side = recorded_side(checkout, entry_key, target, edits, _concurrencies(plan))
        except NoRow as exc:
            out.append(Comparison(plan, [], [], their_runner if elsewhere else None, uncompared=str(exc)))
            continue
        except ParityError as exc:
            if not elsewhere:
                raise
            raise ParityError(
                f"{key} {plan.variant} on {target.runner_label} (a copy of InferenceX's entry, which runs on "
                f"{their_runner}) was never compared: {exc}"
            ) from None
        our_side = ours(plan)
        if elsewhere:  # the site's runner against InferenceX's: a difference to review, never a silent pass
            our_side["derived"]["all"]["runner"] = target.runner_label
            their_side["derived"]["all"]["runner"] = their_runner
        found = differences(our_side, their_side)
        stated = their_runner if elsewhere else None
        out.append(Comparison(plan, *explain(found, reviewed, key, plan.variant), stated))
    return out


class NoRow(ParityError):
    """InferenceX's matrix runs no row of the variant's shape and sequence lengths: nothing to compare it
    with (said per variant; the config's other variants are compared)."""


# one chain run per (checkout, key, row, edits) in a process: its recorded launch, or why it could not run
_RECORDED: dict[tuple, dict | ParityError] = {}


def _record_rows(checkout: Path, key: str, plans: list, edits: tuple) -> None:
    """Runs the chain for every variant's row at once (each run mostly waits on its shell's processes);
    a variant with no row, or a run that fails, is said by recorded_side when its turn comes."""
    from concurrent.futures import ThreadPoolExecutor

    def one(pair) -> None:
        try:
            recorded_side(checkout, key, pair[0], edits, _concurrencies(pair[1]))
        except ParityError:
            pass  # said again, in order, by compare

    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
        list(pool.map(one, plans))


def _concurrencies(plan) -> tuple[int, ...]:
    return tuple(b.concurrency for b in plan.benchmarks)


def recorded_side(checkout: Path, key: str, target, edits: tuple = (), concurrencies: tuple = ()) -> dict:
    """InferenceX's side from its own chain, run from CHECKOUT for the variant's matrix row."""
    import tempfile

    from .outside import matrix, sides

    try:
        row = sides.row_index(matrix.rows(checkout, key), target, concurrencies)
    except matrix.RowError as exc:
        raise NoRow(f"InferenceX's matrix for {key} has no row of {target.variant}: {exc}") from None
    selector = sides.row_selector(target)
    cached = (str(checkout.resolve()), key, row, edits)
    if cached not in _RECORDED:
        with tempfile.TemporaryDirectory(prefix="parity-recorded-") as scratch:
            try:
                _RECORDED[cached] = chain.record(checkout, key, row, scratch=Path(scratch), edits=edits)
            except chain.ChainError as exc:
                why = f"InferenceX's chain for {key} ({selector}) could not run: {exc}"
                _RECORDED[cached] = ParityError(why)
    launch = _RECORDED[cached]
    if isinstance(launch, ParityError):
        raise launch
    if launch.get("error"):
        raise ParityError(f"InferenceX's chain for {key} ({selector}) did not run through: {launch['error']}")
    if launch["unrecorded"]:
        unrecorded = launch["unrecorded"]
        said = "; ".join(f"{u.get('argv')} at {u.get('script')}:{u.get('line')}" for u in unrecorded)
        raise ParityError(f"InferenceX's chain for {key} ran commands no recorder covers: {said}")
    return sides.recorded_side(launch)


def report(c: Comparison) -> str:
    plan, found, stale, their_runner = c.plan, c.found, c.stale, c.their_runner
    if c.uncompared:
        return f"parity {plan.config_key} {plan.variant}: never compared: {c.uncompared}"
    lines = [f"parity {plan.config_key} {plan.variant} against what InferenceX's own scripts launch"]
    if their_runner:  # a site's copy: its own launch, on its own runner, is what is compared
        lines = [
            f"parity {plan.config_key} {plan.variant} on {plan.runner} against what InferenceX's own scripts "
            f"launch on {their_runner}",
            f"InferenceX never ran this entry on {plan.runner}: what is compared is the launch rendered for "
            f"{plan.runner}, and the runner itself is a difference to review like any other",
        ]
    lines.append(f"{'category':<12}{'differences':>12}{'explained':>11}{'unexplained':>13}")
    for category in CATEGORIES:
        mine = [d for d in found if d.category == category]
        done = sum(1 for d in mine if d.explained_by)
        lines.append(f"{category:<12}{len(mine):>12}{done:>11}{len(mine) - done:>13}")
    unexplained = [d for d in found if d.explained_by is None]
    if unexplained:
        lines.append(f"\n{len(unexplained)} unexplained (add each to {os.path.relpath(REVIEWED_FILE)} with")
        lines.append("its reason and evidence, or remove it):")
        lines += [f"  {d.line()}" for d in unexplained]
    for r in stale:
        lines.append(f"stale review (matches no difference now): {r['category']} {r['item']}")
    return "\n".join(lines)


def default_inferencex() -> Path:
    """The folder holding one InferenceX checkout per launch (INFERENCEX_REF, else the reference folder)."""
    return Path(os.environ.get("INFERENCEX_REF") or ROOT_DIR.parent / "shared" / "reference" / "inferencex")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="make parity", description=__doc__.splitlines()[0])
    p.add_argument("config")
    p.add_argument("--variant", help="compare this variant only (default: every variant of the config)")
    p.add_argument(
        "--inferencex",
        type=Path,
        help="an InferenceX checkout at the launch's commit (or a folder holding one per launch, "
        f"named as {os.path.relpath(LAUNCHES_FILE)} names them)",
    )
    p.add_argument(
        "--configs",
        type=Path,
        help="the master file both sides are read from (ours rendered from it, InferenceX's entry from it)",
    )
    args = p.parse_args(argv)
    inferencex = args.inferencex or default_inferencex()
    try:
        launch_for(args.config, args.configs)  # nothing to compare with is said before InferenceX's files are
        if not inferencex.is_dir():
            raise ParityError(f"{inferencex} is not a folder: point INFERENCEX= at an InferenceX checkout")
        compared = compare(args.config, args.variant, inferencex, args.configs)
    except NoCounterpart as exc:
        print(f"parity: {exc}", file=sys.stderr)
        return EXIT_NO_COUNTERPART
    except ParityError as exc:
        print(f"parity: {exc}", file=sys.stderr)
        return EXIT_CANNOT_COMPARE
    print("\n\n".join(report(c) for c in compared))
    held = [c for c in compared if not c.uncompared]
    if not held:
        print(f"\nparity: no variant of {args.config} has a row in InferenceX's matrix", file=sys.stderr)
        return EXIT_NO_COUNTERPART
    bad = [c for c in held if c.stale or any(d.explained_by is None for d in c.found)]
    if len(compared) > 1:
        never = len(compared) - len(held)
        print(
            f"\n{len(compared)} variants: {len(held)} compared, {len(bad)} with unexplained differences or "
            f"stale reviews" + (f", {never} never compared (no InferenceX row)" if never else "")
        )
    return EXIT_UNEXPLAINED if bad else 0


if __name__ == "__main__":
    sys.exit(main())
