"""`make parity`: our rendered launch held against InferenceX's known-working launch of the same entry,
difference by difference (engine flags and environment per role, container options, LMCache server, router,
benchmark client, derived values). InferenceX's side is read from its own files: its data files as data (the
master entry, models_vllm.yaml) and what lives only in its bash from configs/parity/inferencex.yaml, each fact
with its file and line. Every difference must be listed, with its reason and evidence, in
configs/parity/reviewed.yaml; anything else is unexplained and the command exits 1.

    python -m recipes.parity CONFIG [--variant V] [--inferencex DIR] [--entry FILE]
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

from schemas import yamlio

from .build import build_plan
from .render import ROOT_DIR, RenderError, load

FACTS_FILE = ROOT_DIR / "configs" / "parity" / "inferencex.yaml"
REVIEWED_FILE = ROOT_DIR / "configs" / "parity" / "reviewed.yaml"
CATEGORIES = ("engine-args", "engine-env", "container", "lmcache", "router", "client", "derived")
ROLES = ("prefill", "decode")
ABSENT = None  # a flag or variable one side does not have


class ParityError(Exception):
    """The comparison cannot be made (no InferenceX launch for the config, a file missing)."""


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
    spellings of one object compare equal. Positional words are skipped (the model path, a subcommand)."""
    out, i = {}, 0
    while i < len(words):
        word = words[i]
        if word.startswith("-") and len(word) > 1:
            flag, eq, value = word.partition("=")
            if not eq:
                value = True
                if i + 1 < len(words) and not (words[i + 1].startswith("-") and len(words[i + 1]) > 1):
                    value, i = words[i + 1], i + 1
            out[flag] = _json_or(value)
        i += 1
    return out


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


def ours(plan) -> dict:
    """category -> role -> {item: value} of our rendered plan."""
    values = {**dict(plan.env_shell), "LOCAL_ADDR": "127.0.0.1"}
    side = {c: {} for c in CATEGORIES}
    exported = {k: str(v) for k, v in plan.env_exported}
    for role in plan.roles:
        for service in role.services:
            words = [_expand(w, values) for w in service.argv]
            if service.name in ("vllm", "sglang"):
                # the engine's own words follow its program; before it, `env NAME=VALUE` of this role only
                start = next((words.index(w) + 1 for w in ("serve", "sglang.launch_server") if w in words), 0)
                prefix = {w.partition("=")[0]: w.partition("=")[2] for w in words[:start] if "=" in w}
                side["engine-args"][role.name] = _flatten(flag_map(words[start:]))
                side["engine-env"][role.name] = {**exported, **prefix}
            elif service.name == "lmcache":
                side["lmcache"]["prefill"] = flag_map(words[2:])
    if plan.router is not None:
        side["router"]["all"] = {"program": _program(plan.router.argv, values)}
    if plan.benchmarks:
        words = [_expand(w, values) for w in plan.benchmarks[0].argv]
        client = flag_map(words[words.index("profile") + 1 :])
        side["client"]["all"] = {k: v for k, v in client.items() if k not in PER_BENCHMARK}
    side["container"]["all"] = _container_words(plan, values)
    side["derived"]["all"] = {"time-limit": plan.slurm.time_limit}
    return side


def _program(argv, values) -> str:
    words = [_expand(w, values) for w in argv]
    return "python3 -m proxy" if "proxy" in words else words[0]


def _container_words(plan, values) -> dict:
    """The docker run options of the node container as {option: value} (repeatable options by value)."""
    words = [_expand(w, values) for w in plan.launch]
    if "run" not in words:
        return {}
    words = words[words.index("run") + 1 :]
    out, i = {}, 0
    while i < len(words) and words[i].startswith("-"):
        flag = words[i]
        takes = flag not in ("--init", "--privileged")
        if flag != "-e":  # the node script's variables: placement, not launch facts
            item, value = _option(flag, words[i + 1] if takes else True)
            out[item] = value
        i += 2 if takes else 1
    return out


PER_BENCHMARK = ("--concurrency", "--output-artifact-dir")  # the sweep's, one per point: not launch facts
REPEATED = ("--device", "--ulimit", "--cap-add", "--security-opt", "-v", "--group-add")


# ---- InferenceX's side -----------------------------------------------------------------------------------


def theirs(launch: dict, inferencex: Path, entry_file: Path | None, model: str) -> dict:
    """category -> role -> {item: value}: the models file and master entry read as data, the bash facts as
    recorded."""
    side = {c: {} for c in CATEGORIES}
    models = _read_yaml(inferencex / launch["models"])
    name = model.split("/")[-1]
    if name not in models:
        raise ParityError(f"{launch['models']} has no entry {name!r} (it has: {', '.join(sorted(models))})")
    recipe = models[name]
    entry = _entry_settings(entry_file or inferencex / launch["entry"], launch["entry-key"])
    for role in ROLES:
        flags = flag_map(shlex.split(recipe[f"{role}_flags"]))
        recorded = launch.get("engine-args", {})
        for fact in recorded.get(role, []) + recorded.get("all", []):
            when = fact.get("when-setting")
            if when and entry.get(when[0]) != str(when[1]):
                continue
            if fact.get("remove"):
                flags.pop(fact["flag"], None)
            else:
                flags[fact["flag"]] = _setting_value(fact.get("value", True), entry)
        side["engine-args"][role] = _flatten(flags)
        env = dict(pair.split("=", 1) for pair in recipe.get("env", "").split())
        for fact in launch.get("engine-env", []):
            env[fact["name"]] = _setting_value(str(fact["value"]), entry)
        side["engine-env"][role] = env
    side["lmcache"]["prefill"] = {
        f["flag"]: _setting_value(str(f["value"]), entry) for f in launch.get("lmcache", [])
    }
    side["router"]["all"] = {"program": launch["router"]["program"]}
    side["client"]["all"] = {
        f["flag"]: _setting_value(f.get("value", True), entry) for f in launch.get("client", [])
    }
    side["container"]["all"] = dict(
        _option(f["flag"], f.get("value", True)) for f in launch.get("container", [])
    )
    side["derived"]["all"] = {f["name"]: str(f["value"]) for f in launch.get("derived", [])}
    return side


def _setting_value(value, entry: dict):
    """A recorded value that is one of the entry's settings (`${NAME}`): the entry's value of it."""
    if isinstance(value, str) and value.startswith("${") and value.endswith("}"):
        return entry.get(value[2:-1], ABSENT)
    return _json_or(value) if isinstance(value, str) else value


def _entry_settings(path: Path, key: str) -> dict:
    """Every additional setting of the entry's first search-space item (prefill's, then decode's)."""
    data = _read_yaml(path)
    if key not in data:
        raise ParityError(f"{path}: no entry {key!r}")
    scenarios = data[key].get("scenarios", {})
    for group in (g for groups in scenarios.values() for g in groups):
        for item in group.get("search-space", []):
            out = {}
            for role in ("decode", "prefill"):
                for pair in (item.get(role) or {}).get("additional-settings") or []:
                    name, _, value = str(pair).partition("=")
                    out[name] = value
            return out
    return {}


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


def reviewed_items(reviewed: list[dict], key: str) -> list[dict]:
    """The reviewed entries of config KEY, one per item: {category, role, item, ours, theirs, reason, ...}.
    An entry groups the items one reason explains: `items: {item: [ours, theirs]}` (null: absent)."""
    out = []
    for entry in reviewed:
        if not any(fnmatch.fnmatchcase(key, p) for p in entry["configs"]):
            continue
        for item, (our, their) in entry["items"].items():
            out.append({**entry, "item": item, "ours": our, "theirs": their})
    return out


def explain(found: list[Difference], reviewed: list[dict], key: str) -> tuple[list[Difference], list[dict]]:
    """Each difference with the reviewed item that explains it (same category, role, item, and the same two
    values: a changed value needs a new review); and the reviewed items of this config nothing matched."""
    mine = reviewed_items(reviewed, key)
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


def compare(key: str, variant: str | None, inferencex: Path, entry_file: Path | None = None):
    """(plan, differences, stale reviewed entries) for one config variant."""
    facts = _read_yaml(FACTS_FILE)["launches"]
    launch = next((f for f in facts.values() if key in f["configs"]), None)
    if launch is None:
        known = sorted(k for f in facts.values() for k in f["configs"])
        raise ParityError(f"no InferenceX launch recorded for {key} in {FACTS_FILE.name} (known: {known})")
    loaded = load(key)
    targets = [t for t in loaded.targets(key) if variant in (None, t.variant)]
    if not targets:
        raise ParityError(f"{key} has no variant {variant!r}")
    plan = build_plan(targets[0])
    found = differences(ours(plan), theirs(launch, inferencex, entry_file, plan.model))
    reviewed = _read_yaml(REVIEWED_FILE).get("differences", [])
    explained, stale = explain(found, reviewed, key)
    return plan, explained, stale


def report(plan, found: list[Difference], stale: list[dict]) -> str:
    lines = [f"parity {plan.config_key} {plan.variant} against InferenceX's known-working launch"]
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
    p.add_argument("--variant")
    p.add_argument("--inferencex", type=Path, help="InferenceX's files (amd_utils/, pr1924/, its entries)")
    p.add_argument("--entry", type=Path, help="InferenceX's master file holding the same entry")
    args = p.parse_args(argv)
    inferencex = args.inferencex or default_inferencex()
    try:
        if not inferencex.is_dir():
            raise ParityError(f"{inferencex} is not a folder: point INFERENCEX= at InferenceX's files")
        plan, found, stale = compare(args.config, args.variant, inferencex, args.entry)
    except RenderError as exc:
        print("\n".join(f.format() for f in exc.findings), file=sys.stderr)
        return 1
    except ParityError as exc:
        print(f"parity: {exc}", file=sys.stderr)
        return 2
    print(report(plan, found, stale))
    return 1 if stale or any(d.explained_by is None for d in found) else 0


if __name__ == "__main__":
    sys.exit(main())
