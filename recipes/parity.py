"""`make parity`: our rendered launch held against InferenceX's known-working launch of the same entry,
difference by difference (engine flags and environment per role, container options, LMCache server, router,
benchmark client, derived values). InferenceX's side is read from its own files: its data files as data (the
master entry, models_vllm.yaml) and what lives only in its bash from configs/parity/inferencex.yaml, each fact
with its file and line. Every difference must be listed, with its reason and evidence, in
configs/parity/reviewed.yaml; anything else is unexplained and the command exits 1.

    python -m recipes.parity CONFIG [--variant V] [--inferencex DIR] [--configs FILE]

Every variant of CONFIG is compared unless --variant names one. --configs: the master file both sides are read
from (ours rendered from it as `make render CONFIGS=` does, InferenceX's entry read from it); without it ours
comes from configs/*-master.yaml and theirs from the launch's own `entry` file (a launch whose configs are
InferenceX's own entries, `ours-from-entry`, renders ours from that file too, unless our configs hold a copy).
A site's copy on a runner of its own is rendered on its runner, held against InferenceX's own entry, and the
runner is a difference. Exit 0: all explained; 1: a difference unexplained; 2: the comparison cannot be made;
3: no known-working counterpart (InferenceX never ran the config's model with its engine on its GPU).
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import re
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from schemas import lint, yamlio
from schemas.findings import did_you_mean

from .build import build_plan
from .engines.lines import PROGRAMS
from .render import ROOT_DIR, RenderError, load
from .target import Unsupported

FACTS_FILE = ROOT_DIR / "configs" / "parity" / "inferencex.yaml"
REVIEWED_FILE = ROOT_DIR / "configs" / "parity" / "reviewed.yaml"
CATEGORIES = ("engine-args", "engine-env", "container", "lmcache", "router", "client", "derived")
ROLES = ("prefill", "decode")
ABSENT = None  # a flag or variable one side does not have
IMAGE_PYTHONPATH = "<the image's PYTHONPATH>"  # what env.sh's prefix goes before (the facts file's spelling)
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
    values = {**dict(plan.env_shell), "LOCAL_ADDR": "127.0.0.1"}
    side = _empty_side()
    exported = {k: str(v) for k, v in plan.env_exported}
    if plan.python_path_first:  # prepended to the image's own in env.sh
        exported["PYTHONPATH"] = ":".join([*plan.python_path_first, IMAGE_PYTHONPATH])
    if plan.library_path_first:
        exported["LD_LIBRARY_PATH"] = ":".join([*plan.library_path_first, IMAGE_LD_LIBRARY_PATH])
    for role in plan.roles:
        for service in role.services:
            words = [_expand(w, values) for w in service.argv]
            if service.name in ENGINE_SERVICES:
                # the engine's own words follow its program; before it, `env NAME=VALUE` of this role only
                start = next((words.index(w) + 1 for w in ENGINE_PROGRAMS if w in words), 0)
                prefix = {w.partition("=")[0]: w.partition("=")[2] for w in words[:start] if "=" in w}
                side["engine-args"][role.name] = _flatten(flag_map(words[start:]))
                side["engine-env"][role.name] = {**exported, **prefix}
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
        if plan.benchmarks[0].before:  # what InferenceX's client does first (configs/parity/inferencex.yaml)
            side["client"]["all"][FLUSH_ITEM] = FLUSH_VALUE
    side["container"]["all"] = _container_words(plan, values)
    side["derived"]["all"] = {"time-limit": plan.slurm.time_limit}
    return side


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


PER_BENCHMARK = ("--concurrency", "--output-artifact-dir")  # the sweep's, one per point: not launch facts
# Every engine's caches emptied before each benchmark, as both sides' facts name it.
FLUSH_ITEM, FLUSH_VALUE = "--flush-caches-before-each", "POST /flush_cache on every worker"
REPEATED = ("--device", "--ulimit", "--cap-add", "--security-opt", "-v", "--group-add")


# ---- InferenceX's side -----------------------------------------------------------------------------------


def theirs(
    launch: dict, inferencex: Path, entry_file: Path, key: str, point_path: tuple = (), job_conc: int = 0
) -> dict:
    """category -> role -> {item: value}: the models file and master entry read as data, the bash facts as
    recorded. point_path: where the compared variant's search-space item sits in the entry (its key first);
    job_conc: the largest concurrency of the compared allocation (`${JOB_CONC}` in a recorded fact: what
    InferenceX's launch derives from the job's concurrencies)."""
    if launch.get("engine") == "sglang":
        return _theirs_sglang(launch, inferencex, entry_file, key, point_path, job_conc)
    if launch.get("engine") == "atom":
        return _theirs_atom(launch, inferencex, entry_file, key, point_path, job_conc)
    side = _empty_side()
    entry = {**_entry_settings(entry_file, launch.get("entry-key") or key), "JOB_CONC": str(job_conc)}
    models = _read_yaml(inferencex / _field(launch, "models"))
    name = _field(_entry(entry_file, launch.get("entry-key") or key), "model", entry_file).split("/")[-1]
    if name not in models:
        raise ParityError(f"{launch['models']} has no entry {name!r} (it has: {', '.join(sorted(models))})")
    recipe = models[name]
    for role in ROLES:
        flags = flag_map(shlex.split(str(_field(recipe, f"{role}_flags", launch["models"]))))
        recorded = launch.get("engine-args", {})
        for fact in recorded.get(role, []) + recorded.get("all", []):
            when = fact.get("when-setting")
            if when and entry.get(when[0]) != str(when[1]):
                continue
            if fact.get("remove"):
                flags.pop(fact["flag"], None)
            else:
                flags[fact["flag"]] = _subst(fact.get("value", True), entry, fact)
        side["engine-args"][role] = _flatten(flags)
        env = dict(pair.split("=", 1) for pair in str(recipe.get("env", "")).split() if "=" in pair)
        for fact in launch.get("engine-env", []):
            env[fact["name"]] = _subst(str(fact["value"]), entry, fact)
        side["engine-env"][role] = env
    side["lmcache"]["prefill"] = {
        f["flag"]: _subst(str(f["value"]), entry, f) for f in launch.get("lmcache", [])
    }
    return _recorded(launch, side, entry, {})


def _recorded(launch: dict, side: dict, names: dict, conditions: dict) -> dict:
    """The router, client, container and derived facts of a launch (those whose `when` holds)."""
    router = launch.get("router", {})
    side["router"]["all"] = {"program": router.get("program")}
    side["router"]["all"].update(_facts(router.get("flags", []), names, conditions))
    side["client"]["all"] = _facts(launch.get("client", []), names, conditions)
    side["container"]["all"] = dict(
        _option(f["flag"], f.get("value", True)) for f in launch.get("container", [])
    )
    side["derived"]["all"] = {f["name"]: str(f["value"]) for f in launch.get("derived", [])}
    return side


def _facts(facts: list, names: dict, conditions: dict) -> dict:
    """Flag -> value of the facts that hold; a fact `per: prefill-workers` (or decode-workers) is its flag
    once per worker of that role, its values joined as flag_map joins a repeated flag's."""
    out = {}
    for f in filter(lambda f: _holds(f, conditions), facts):
        value = _subst(f.get("value", True), names, f)
        out[f["flag"]] = " ".join([str(value)] * int(names[f["per"]])) if "per" in f else value
    return out


def _holds(fact: dict, conditions: dict) -> bool:
    """Whether a recorded fact's `when: {condition: value}` holds for this variant (no `when`: always)."""
    when = fact.get("when") or {}
    unknown = sorted(set(when) - set(conditions))
    if unknown:
        raise ParityError(f"{FACTS_FILE.name}: {fact.get('at')}: unknown condition {unknown[0]!r}")
    return all(conditions[k] == v for k, v in when.items())


_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def _subst(value, names: dict, fact: dict | None = None):
    """A recorded value with `${NAME}` filled in from `names` (the entry's settings, and for SGLang the
    variables its bash has set). A value that is one reference to a name not set is absent."""
    if not isinstance(value, str):
        return value
    whole = _REF.fullmatch(value)
    if whole:
        return _json_or(names[whole[1]]) if whole[1] in names else ABSENT

    def one(m):
        if m[1] not in names:
            raise ParityError(f"{FACTS_FILE.name}: {(fact or {}).get('at')}: {m[1]} is not set")
        return str(names[m[1]])

    return _json_or(_REF.sub(one, value))


def _entry(path: Path, key: str) -> dict:
    data = _read_yaml(path)
    if not isinstance(data.get(key), dict):
        raise ParityError(f"{path}: no entry {key!r}")
    return data[key]


def _entry_settings(path: Path, key: str) -> dict:
    """Every additional setting of the entry's first search-space item (prefill's, then decode's)."""
    scenarios = _entry(path, key).get("scenarios") or {}
    for group in (g for groups in scenarios.values() for g in groups or ()):
        for item in group.get("search-space", []):
            return _additional_settings(item)
    return {}


def _additional_settings(item: dict) -> dict:
    out = {}
    for role in ("decode", "prefill"):
        for pair in (item.get(role) or {}).get("additional-settings") or []:
            name, _, value = str(pair).partition("=")
            out[name] = value
    return out


def _field(data, key: str, where: object = FACTS_FILE.name):
    """data[key], or a ParityError naming the file and the key (a file of InferenceX's is hostile input)."""
    if not isinstance(data, dict) or key not in data:
        raise ParityError(f"{where}: no {key!r}")
    return data[key]


# ---- InferenceX's SGLang + MoRI launch (amd_utils/server_sglang.sh) ---------------------------------------


@dataclass(frozen=True)
class Worker:
    """One role's worker as server_sglang.sh is given it: TP size, EP on (--ep-size = tp), DP attention on
    (--dp-size = tp), and the nodes it spans (its (tp + 7) / 8)."""

    tp: int
    ep: bool = False
    dp: bool = False

    @property
    def nodes(self) -> int:
        return (self.tp + 7) // 8


@dataclass(frozen=True)
class Run:
    """What InferenceX's SGLang launch reads of one search-space item of its entry."""

    prefill: Worker
    decode: Worker
    max_conc: int  # BENCH_MAX_CONC_VALUE: the item's largest concurrency
    mtp: int = 0  # DECODE_MTP_SIZE
    agentic: bool = False
    hicache: bool = False  # KV_OFFLOADING dram with KV_OFFLOAD_BACKEND hicache (server_sglang.sh:486)
    kv_transfer: str | None = None  # KV_P2P_TRANSFER: the entry's kv-p2p-transfer
    names: dict = field(default_factory=dict)  # the item's additional settings, MODEL_NAME, ISL, OSL
    workers: dict = field(default_factory=dict)  # prefill-workers, decode-workers: the item's num-worker

    def worker(self, role: str) -> Worker:
        return self.prefill if role == "prefill" else self.decode


def sglang_flags(block: dict, role: str, run: Run, names: dict, where: str = "models.yaml") -> list[str]:
    """One role's engine flags as server_sglang.sh composes them from its models file's block for the model
    (build_server_config, PREFILL_MODE_FLAGS, DECODE_MODE_FLAGS): parallelism, base flags (the entry's
    kv-p2p-transfer replacing their transfer backend), EP flags, MTP flags on both roles, DP flags, then the
    role's own. `names`: the integers its formulas may name (env.sh's MoRI budgets, the TP sizes)."""
    w = run.worker(role)
    words = ["--tp-size", str(w.tp)] + (["--ep-size", str(w.tp)] if w.ep else [])
    words += ["--dp-size", str(w.tp)] if w.dp else []
    base = shlex.split(str(block.get("base_flags", "")))
    if run.kv_transfer:
        base = _without(base, "--disaggregation-transfer-backend") + [
            "--disaggregation-transfer-backend",
            run.kv_transfer,
        ]
    words += base + (shlex.split(str(block.get("ep_flags", ""))) if w.ep else [])
    if run.mtp > 0:
        words += shlex.split(str(block.get("mtp_flags", "")))
        words += ["--speculative-num-steps", str(run.mtp), "--speculative-num-draft-tokens", str(run.mtp + 1)]
    words += shlex.split(str(block.get("dp_flags", ""))) if w.dp else []
    prefill = _table(block, "prefill", where)
    arm = _table(prefill, "dp" if run.prefill.dp else "no_dp", f"{where} prefill")
    context = str(arm.get("context_length", ""))  # decode falls back to prefill's
    if role == "prefill":
        if w.dp:
            graphs = str(arm.get("cuda_graph_bs", "1 2 3")).split()
            running = run.max_conc if w.ep else arm.get("max_running_requests", 24)
        else:
            graphs = _seq(arm.get("cuda_graph_bs_range", "1-128"), (1, 128), where)
            running = arm.get("max_running_requests", 128)
        chunk = product(arm.get("chunked_prefill_size", 262144), names, where)
        words += ["--mem-fraction-static", str(prefill.get("mem_fraction_static", 0.8))]
        words += ["--max-running-requests", str(running), "--chunked-prefill-size", str(chunk)]
        words += ["--disable-cuda-graph"] if _true(prefill.get("disable_cuda_graph", False)) else []
        words += [] if _true(prefill.get("disable_cuda_graph", False)) else ["--cuda-graph-bs", *graphs]
        if _true(prefill.get("disable_radix_cache", True)) and not run.agentic:
            words += ["--disable-radix-cache"]
        words += ["--context-length", context] if context else []
        total = str(arm.get("max_total_tokens", ""))
        words += ["--max-total-tokens", total] if total else []
        words += ["--enable-two-batch-overlap"] if w.dp and _true(arm.get("enable_two_batch_overlap")) else []
        return words
    decode = _table(block, "decode", where)
    name, default = ("dp", "1-160") if w.dp else ("ep_only", "1-256") if w.ep else ("no_dp", "1-128")
    arm = _table(decode, name, f"{where} decode")
    end = int(default.split("-")[1])
    graphs = _seq(arm.get("cuda_graph_bs_range", default), (1, end), where)
    if w.dp:
        running = run.max_conc if w.ep else int(graphs[-1]) * w.tp
    else:
        running = arm.get("max_running_requests", 256 if w.ep else 128)
    words += ["--mem-fraction-static", str(decode.get("mem_fraction_static", 0.85))]
    words += ["--max-running-requests", str(running), "--cuda-graph-bs", *graphs]
    words += (
        ["--prefill-round-robin-balance"] if _true(decode.get("prefill_round_robin_balance", True)) else []
    )
    context = str(arm.get("context_length", "")) or context
    words += ["--context-length", context] if context else []
    if _true(decode.get("disagg_decode_enable_radix_cache", False)):
        words += ["--disaggregation-decode-enable-radix-cache"]
    return words


def sglang_variables(env: dict, run: Run) -> dict:
    """env.sh's variables as server_sglang.sh updates them for the run: with DP attention and EP on decode,
    the decode dispatch budget is the largest concurrency per rank and the inter-kernel switch twice that;
    with MTP the decode budget grows by the draft tokens (amd_utils/server_sglang.sh:241-249, 292-294)."""
    env, d = dict(env), run.decode
    if d.dp and d.ep:
        tokens = run.max_conc // d.tp
        env["MORI_MAX_DISPATCH_TOKENS_DECODE"] = str(tokens)
        env["SGLANG_MORI_DISPATCH_INTER_KERNEL_SWITCH_THRESHOLD"] = str(tokens * 2)
    if run.mtp > 0:
        tokens = product("MORI_MAX_DISPATCH_TOKENS_DECODE", env, "env.sh")
        env["MORI_MAX_DISPATCH_TOKENS_DECODE"] = str(tokens * (run.mtp + 1))
    return env


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_INTEGER = re.compile(r"[0-9]{1,12}")


def product(formula, names: dict, where: str = "models.yaml") -> int:
    """A models-file size: an integer, or names and integers joined by `*` ("MORI_MAX_DISPATCH_TOKENS_PREFILL
    * PREFILL_TP_SIZE"), each name an integer of `names`. Nothing else is read (never eval)."""
    if isinstance(formula, bool) or not isinstance(formula, int | float | str):
        raise ParityError(f"{where}: {formula!r} is not a size")
    if not isinstance(formula, str):
        return int(formula)
    terms = [t.strip() for t in formula.split("*")]
    if len(formula) > 200 or len(terms) > 8:
        raise ParityError(f"{where}: {formula[:60]!r}... is too long for a size")
    out = 1
    for term in terms:
        if _INTEGER.fullmatch(term):
            out *= int(term)
        elif _NAME.fullmatch(term) and term in names and _INTEGER.fullmatch(str(names[term])):
            out *= int(str(names[term]))
        elif _NAME.fullmatch(term):
            raise ParityError(f"{where}: {formula!r}: {term} is not an integer setting")
        else:
            raise ParityError(f"{where}: {formula!r}: only names and integers joined by * are read")
    return out


def _seq(spec, default: tuple, where: str) -> list[str]:
    """cuda_graph_bs_range "1-128" as `seq 1 128` expands it (no dash: the default range)."""
    text = str(spec)
    start, end = text.split("-", 1) if "-" in text else map(str, default)
    if not (_INTEGER.fullmatch(start.strip()) and _INTEGER.fullmatch(end.strip())):
        raise ParityError(f"{where}: cuda_graph_bs_range {text!r} is not <start>-<end>")
    first, last = int(start), int(end)
    if last - first > 4096:
        raise ParityError(f"{where}: cuda_graph_bs_range {text!r} spans more than 4096 sizes")
    return [str(n) for n in range(first, last + 1)]


def _table(data: dict, key: str, where: str) -> dict:
    value = data.get(key) or {}
    if not isinstance(value, dict):
        raise ParityError(f"{where}: {key} is not a mapping")
    return value


def _true(value) -> bool:
    return str(value) in ("True", "true")


def _without(words: list[str], flag: str) -> list[str]:
    out, skip = [], False
    for word in words:
        if skip:
            skip = False
        elif word == flag:
            skip = True
        else:
            out.append(word)
    return out


def _their_run(path: Path, key: str, point_path: tuple, job_conc: int = 0) -> tuple[dict, Run]:
    """InferenceX's entry and the search-space item at point_path (the compared variant's), as data. An
    agentic item's largest concurrency is the job's (job_conc): InferenceX's matrix runs every agentic point
    in a job of its own (utils/matrix_logic/generate_sweep_configs.py), as ours does."""
    entry = _entry(path, key)
    item: object = entry
    for i, step in enumerate(point_path[1:]):
        if isinstance(item, dict) and step in item:
            item = item[step]
        elif isinstance(item, list) and isinstance(step, int) and 0 <= step < len(item):
            item = item[step]
        else:
            raise ParityError(f"{path}: {key} has no {'.'.join(map(str, point_path[1 : i + 2]))}")
    if not isinstance(item, dict):
        raise ParityError(f"{path}: {'.'.join(map(str, point_path))} is not a search-space item")

    def worker(role):
        spec = _field(item, role, f"{path}: {key}")
        tp, ep = _integer(spec.get("tp"), f"{role}.tp", path), _integer(spec.get("ep", 1), f"{role}.ep", path)
        return Worker(tp, ep > 1, spec.get("dp-attn") is True)

    concs = item.get("conc-list") or [item.get("conc-end")]
    settings = _additional_settings(item)
    group = entry["scenarios"][point_path[2]][point_path[3]] if len(point_path) > 3 else {}
    names = {**settings, "MODEL_NAME": str(_field(entry, "model", path)).split("/")[-1]}
    names.update({k.upper(): str(group[k]) for k in ("isl", "osl") if isinstance(group, dict) and k in group})
    run = Run(
        prefill=worker("prefill"),
        decode=worker("decode"),
        max_conc=job_conc
        if job_conc and point_path[2:3] == ("agentic-coding",)
        else max(_integer(c, "conc-list", path) for c in concs),
        mtp=_integer(_number(settings.get("DECODE_MTP_SIZE") or "0"), "DECODE_MTP_SIZE", path),
        agentic=point_path[2:3] == ("agentic-coding",),
        hicache=item.get("kv-offloading") == "dram"
        and (item.get("kv-offload-backend") or {}).get("name") == "hicache",
        kv_transfer=item.get("kv-p2p-transfer") or entry.get("kv-p2p-transfer"),
        names=names,
        workers={
            f"{r}-workers": _integer(_field(item, r, path).get("num-worker"), f"{r}.num-worker", path)
            for r in ROLES
        },
    )
    return entry, run


def _number(text: str):
    return int(text) if _INTEGER.fullmatch(text) else text


def _integer(value, what: str, path: Path) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ParityError(f"{path}: {what} is {value!r}, not an integer")
    return value


def _model_block(launch: dict, inferencex: Path, run: Run, variants: bool = True) -> tuple[str, dict]:
    """(where, block) of the model's entry in the launch's models file as its server script reads it:
    with variants, `<model>-AgentX` for an agentic run, `<model>-DI` else, the bare name when that is
    absent (amd_utils/server_sglang.sh:85-96); without, the bare name (server_atom.sh:86-87)."""
    models_file = _field(launch, "models")
    models = _read_yaml(inferencex / models_file)
    name = run.names["MODEL_NAME"]
    chosen = (f"{name}-AgentX" if run.agentic else f"{name}-DI") if variants else name
    chosen = chosen if chosen in models else name
    if not isinstance(models.get(chosen), dict):
        raise ParityError(f"{models_file} has no entry {chosen!r} (it has: {', '.join(sorted(models))})")
    return f"{models_file} {chosen}", models[chosen]


def _theirs_sglang(
    launch: dict, inferencex: Path, entry_file: Path, key: str, point_path: tuple, job_conc: int = 0
) -> dict:
    side = _empty_side()
    entry, run = _their_run(entry_file, launch.get("entry-key") or key, point_path, job_conc)
    where, block = _model_block(launch, inferencex, run)
    name = run.names["MODEL_NAME"]
    shape = {
        "PREFILL_TP_SIZE": run.prefill.tp,
        "DECODE_TP_SIZE": run.decode.tp,
        "xP": run.workers["prefill-workers"],
        "yD": run.workers["decode-workers"],
    }
    conditions = {
        "model": name,
        "agentic": run.agentic,
        "mtp": run.mtp > 0,
        "mtp-steps": run.mtp,
        "hicache": run.hicache,
    }
    env: dict = {}
    for fact in launch.get("engine-env", []):  # env.sh, in its order: a later line overrides an earlier one
        if not _holds(fact, conditions):
            continue
        if fact.get("unset"):
            env.pop(fact["name"], None)
        elif "formula" in fact:
            env[fact["name"]] = str(
                product(fact["formula"], {**shape, **env}, f"{FACTS_FILE.name} {fact['at']}")
            )
        else:
            env[fact["name"]] = str(_subst(str(fact.get("value", "")), {**run.names, **env}, fact))
    script_only = {f["name"] for f in launch.get("engine-env", []) if f.get("script-only")}
    formulas = {**{k: str(v) for k, v in shape.items()}, **env}  # its inline Python reads the environment
    env = sglang_variables(env, run)
    names = {**run.names, **env}
    for role in ROLES:
        words = sglang_flags(block, role, run, formulas, where)
        flags = flag_map(words)
        role_conditions = {**conditions, "multi-node-worker": run.worker(role).nodes > 1}
        role_names = {**names, "NODES_PER_WORKER": str(run.worker(role).nodes)}
        recorded = launch.get("engine-args", {})
        flags.update(_facts(recorded.get("all", []) + recorded.get(role, []), role_names, role_conditions))
        side["engine-args"][role] = _flatten(flags)
        prefix = {}
        for fact in launch.get("engine-env-prefix", {}).get(role, []):
            if not _holds(fact, conditions):
                continue
            value = next((env[n] for n in fact.get("from", []) if env.get(n)), str(fact.get("value", "")))
            if value or not fact.get("when-set"):
                prefix[fact["name"]] = value
        if "--enable-two-batch-overlap" in flags and role == "prefill":
            prefix["MORI_ENABLE_SDMA"] = "true"  # PREFILL_SDMA_ENV (amd_utils/server_sglang.sh:274-277)
        seen = {**env, **prefix}  # what the engine process inherits, less what only InferenceX's bash reads
        side["engine-env"][role] = {k: v for k, v in seen.items() if k not in script_only}
    return _recorded(launch, side, {**names, **run.workers}, {**conditions, "multi-node-worker": False})


def atom_flags(block: dict, role: str, run: Run) -> list[str]:
    """One role's ATOM flags as server_atom.sh composes them from its models file's block for the model:
    -tp, the model's TP+DPA or EP+DPA flags (the role's own, else the shared ones) for a DP-attention worker,
    MTP's method and the draft steps on both roles, the model's KV-cache flag; its bash adds the rest."""
    w = run.worker(role)
    words = ["-tp", str(w.tp)]
    if w.dp:
        mode = "ep_dp_flags" if w.ep else "tp_dp_flags"
        words += shlex.split(str(block.get(f"{role}_{mode}", block.get(mode, ""))))
    if block.get("mtp_flags") and run.mtp > 0:
        words += [*shlex.split(str(block["mtp_flags"])), str(run.mtp)]
    return words + shlex.split(str(block.get("kv_cache_flags", "")))


def _atom_env(block: dict, w: Worker) -> dict:
    """The model's environment as server_atom.sh exports it: always its env, and a DP-attention worker's
    TP+DPA or EP+DPA environment."""
    pairs = str(block.get("env", "")).split()
    if w.dp:
        pairs += str(block.get("ep_dp_env" if w.ep else "tp_dp_env", "")).split()
    return dict(pair.split("=", 1) for pair in pairs if "=" in pair)


def _theirs_atom(
    launch: dict, inferencex: Path, entry_file: Path, key: str, point_path: tuple, job_conc: int = 0
) -> dict:
    side = _empty_side()
    _, run = _their_run(entry_file, launch.get("entry-key") or key, point_path, job_conc)
    _, block = _model_block(launch, inferencex, run, variants=False)
    names = {**run.names, "MAX_CONC": str(run.max_conc)}
    conditions = {"model": run.names["MODEL_NAME"], "agentic": run.agentic, "mtp": run.mtp > 0}
    base_env = {f["name"]: str(f["value"]) for f in launch.get("engine-env", []) if not f.get("script-only")}
    for role in ROLES:
        flags = flag_map(atom_flags(block, role, run))
        recorded = launch.get("engine-args", {})
        flags.update(_facts(recorded.get("all", []) + recorded.get(role, []), names, conditions))
        side["engine-args"][role] = _flatten(flags)
        side["engine-env"][role] = {**base_env, **_atom_env(block, run.worker(role))}
    return _recorded(launch, side, {**names, **run.workers}, conditions)


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
        match = next(
            (
                i
                for i, r in enumerate(mine)
                if r["category"] == d.category
                and r.get("role", "all") in (d.role, "all")
                and r["item"] == d.item
                and _norm(r["ours"]) == _norm(d.ours)
                and _norm(r["theirs"]) == _norm(d.theirs)
            ),
            None,
        )
        used.add(match)
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
    """InferenceX's recorded launch KEY is held against (configs/parity/inferencex.yaml lists the keys
    each launch covers). None recorded, the config itself says why, without InferenceX's files: a
    ParityError naming the recorded keys of its model and engine on its GPU when InferenceX ran that (KEY
    is to be recorded under one of them), NoCounterpart when InferenceX never ran its model with its
    engine on its GPU (or runner). A model is its `<model-prefix>-<precision>`, a GPU the one a key
    names, else the runner's profile label."""
    launches = _read_yaml(FACTS_FILE).get("launches") or {}
    launch = next((f for f in launches.values() if key in f.get("configs", [])), None)
    if launch is not None:
        return launch
    facts = _shown_path(FACTS_FILE)
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
    plan: object
    found: list
    stale: list
    their_runner: str | None = None  # InferenceX's runner, when ours is a site's copy on a runner of its own


class NotRendered(ParityError):
    """Our side of the comparison does not render (yet): the render's findings say why."""


def compare(
    key: str, variant: str | None, inferencex: Path, configs: Path | None = None, recorded: Path | None = None
) -> list[Comparison]:
    """One comparison per variant of KEY (or only VARIANT's). configs: the master file both sides are read
    from, as `make render CONFIGS=` reads it; else ours from our configs (or, for a launch whose configs are
    InferenceX's own entries, from its entry file unless our configs hold a copy of it) and theirs from the
    launch's entry file. Ours is always what `make submit` would launch: a site's copy of InferenceX's
    entry on a runner of its own is rendered on that runner and held against InferenceX's own entry on
    InferenceX's runner, the two runners a difference like any other (unexplained until reviewed).
    recorded: an InferenceX checkout whose own chain is run under recorders for each variant's matrix row
    (recipes/outside), InferenceX's side then being what its scripts ran instead of the recorded facts."""
    launch = launch_for(key, configs)
    entry_key = launch.get("entry-key") or key
    own_file = inferencex / _field(launch, "entry")  # InferenceX's own entry
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
    out = []
    for target, plan in plans:
        job_conc = max(b.concurrency for b in plan.benchmarks)
        elsewhere = bool(their_runner) and loaded.launch.label_of(their_runner) != target.runner_label
        try:
            if recorded is not None:
                their_side = _recorded_side(recorded, entry_key, target)
            else:
                their_side = theirs(launch, inferencex, entry_file, key, target.point.path, job_conc)
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


def _recorded_side(checkout: Path, key: str, target) -> dict:
    """InferenceX's side from its own chain, run from CHECKOUT for the variant's matrix row."""
    import tempfile

    from .outside import chain, matrix, sides

    try:
        row = sides.row_index(matrix.rows(checkout, key), target)
    except matrix.RowError as exc:
        raise ParityError(f"InferenceX's matrix for {key} has no row of {target.variant}: {exc}") from None
    selector = sides.row_selector(target)
    with tempfile.TemporaryDirectory(prefix="parity-recorded-") as scratch:
        launch = chain.record(checkout, key, row, scratch=Path(scratch))
    if launch.get("error"):
        raise ParityError(f"InferenceX's chain for {key} ({selector}) did not run through: {launch['error']}")
    if launch["unrecorded"]:
        unrecorded = launch["unrecorded"]
        said = "; ".join(f"{u.get('argv')} at {u.get('script')}:{u.get('line')}" for u in unrecorded)
        raise ParityError(f"InferenceX's chain for {key} ran commands no recorder covers: {said}")
    return sides.recorded_side(launch)


def report(plan, found: list[Difference], stale: list[dict], their_runner: str | None = None) -> str:
    lines = [f"parity {plan.config_key} {plan.variant} against InferenceX's known-working launch"]
    if their_runner:  # a site's copy: its own launch, on its own runner, is what is compared
        lines = [
            f"parity {plan.config_key} {plan.variant} on {plan.runner} against InferenceX's known-working "
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
    return Path(os.environ.get("INFERENCEX_REF") or ROOT_DIR.parent / "shared" / "reference" / "inferencex")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="make parity", description=__doc__.splitlines()[0])
    p.add_argument("config")
    p.add_argument("--variant", help="compare this variant only (default: every variant of the config)")
    p.add_argument("--inferencex", type=Path, help="InferenceX's files (amd_utils/, pr1924/, its entries)")
    p.add_argument(
        "--configs",
        type=Path,
        help="the master file both sides are read from (ours rendered from it, InferenceX's entry from it)",
    )
    p.add_argument(
        "--recorded",
        type=Path,
        metavar="CHECKOUT",
        help="InferenceX's side from its own chain run from this checkout under recorders (recipes/outside)",
    )
    args = p.parse_args(argv)
    inferencex = args.inferencex or default_inferencex()
    try:
        launch_for(args.config, args.configs)  # nothing to compare with is said before InferenceX's files are
        if not inferencex.is_dir():
            raise ParityError(f"{inferencex} is not a folder: point INFERENCEX= at InferenceX's files")
        compared = compare(args.config, args.variant, inferencex, args.configs, args.recorded)
    except NoCounterpart as exc:
        print(f"parity: {exc}", file=sys.stderr)
        return EXIT_NO_COUNTERPART
    except ParityError as exc:
        print(f"parity: {exc}", file=sys.stderr)
        return EXIT_CANNOT_COMPARE
    print("\n\n".join(report(c.plan, c.found, c.stale, c.their_runner) for c in compared))
    bad = [c for c in compared if c.stale or any(d.explained_by is None for d in c.found)]
    if len(compared) > 1:
        print(
            f"\n{len(compared)} variants compared, {len(bad)} with unexplained differences or stale reviews"
        )
    return EXIT_UNEXPLAINED if bad else 0


if __name__ == "__main__":
    sys.exit(main())
