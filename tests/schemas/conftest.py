"""Helpers for the schema tests: a valid baseline entry, mutations by key path, linting in process."""

from __future__ import annotations

import contextlib
import copy
import io
import re
from functools import cache
from pathlib import Path

import yaml

from schemas import lint
from schemas.check import check_known_issues, check_master, check_models
from schemas.engine_builds import check_engine_builds
from schemas.findings import Finding, format_path
from schemas.launch import LaunchProfiles
from schemas.runners import Runners
from schemas.yamlio import load_file, load_text

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).resolve().parent / "fixtures"
MASTER = ROOT / "configs" / "amd-master.yaml"
RUNNERS = ROOT / "configs" / "runners.yaml"
LAUNCH = ROOT / "configs" / "launch.yaml"
KNOWN_ISSUES = ROOT / "configs" / "known-issues.yaml"
ENGINE_BUILDS = ROOT / "configs" / "engine-builds.yaml"
KEY = "kimik2.5-fp4-mi355x-vllm-disagg-agentic"  # the baseline every mutation starts from

# Paths inside the baseline entry, written as findings print them.
SS = "scenarios.agentic-coding[0].search-space[0]"
P = f"{SS}.prefill"
D = f"{SS}.decode"


@cache
def _baseline() -> dict:
    return load_file(MASTER).data[KEY]


def baseline() -> dict:
    """A fresh copy of the agentic MI355X entry, as the yamlio loader reads it."""
    return copy.deepcopy(_baseline())


@cache
def _runners_data() -> dict:
    return load_file(RUNNERS).data


def runners_data() -> dict:
    return copy.deepcopy(_runners_data())


@cache
def _launch_data() -> dict:
    return load_file(LAUNCH).data


def launch_data() -> dict:
    return copy.deepcopy(_launch_data())


@cache
def known_issues() -> tuple:
    """The shipped known-issue registry's valid issues (test_known_issues: it lints clean)."""
    return check_known_issues(load_file(KNOWN_ISSUES))[0]


@cache
def models():
    """The shipped configs/models.yaml (test_one_verdict: it lints clean)."""
    return check_models(load_file(ROOT / "configs" / "models.yaml"))[0]


@cache
def engine_builds() -> tuple:
    """The shipped engine builds (tests/engines: the file lints clean)."""
    return check_engine_builds(load_file(ENGINE_BUILDS))[0]


def parse_path(text: str) -> tuple:
    """'a.b[0].c' -> ('a', 'b', 0, 'c'): the inverse of findings.format_path for our keys."""
    tokens = re.findall(r"\[\d+\]|[^.\[\]]+", text)
    return tuple(int(tok[1:-1]) if tok.startswith("[") else tok for tok in tokens)


def _parent(data, path: str):
    parts = parse_path(path)
    for part in parts[:-1]:
        data = data[part]
    return data, parts[-1]


def mutate(data, path: str, value):
    """Set `path` to `value` (a new key is added; index len(list) appends); returns data."""
    node, last = _parent(data, path)
    if isinstance(node, list) and last == len(node):
        node.append(value)
    else:
        node[last] = value
    return data


def delete(data, path: str):
    node, last = _parent(data, path)
    del node[last]
    return data


def rename(data, path: str, new: str):
    """Rename the key at `path`, keeping its place and value."""
    node, last = _parent(data, path)
    items = [(new if k == last else k, v) for k, v in node.items()]
    node.clear()
    node.update(items)
    return data


def apply(data, ops):
    """Apply ("set", path, value) / ("del", path) / ("rename", path, new) operations in order."""
    for op, path, *rest in ops:  # a value is copied in: cases share their ops, never what they set
        {"set": mutate, "del": delete, "rename": rename}[op](data, path, *copy.deepcopy(rest))
    return data


def dump(data) -> str:
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)


def lint_entry(
    entry,
    *,
    profile="strict",
    runners: dict | None = None,
    key=KEY,
    issues: tuple | None = None,
    launch: dict | None = None,
    builds: tuple | None = None,
    models=None,
) -> list[Finding]:
    """Findings of a one-entry master config, linted in process through the YAML loader (against the
    shipped runners, launch profiles and known-issue registry unless given; against engine builds and
    models only when given)."""
    doc = load_text(dump({key: entry}), file="master.yaml")
    hardware = Runners.model_validate(runners if runners is not None else _runners_data())
    profiles = LaunchProfiles.model_validate(launch if launch is not None else _launch_data())
    registry = known_issues() if issues is None else issues
    return check_master(doc, hardware, profile, registry, profiles, builds, models)[1]


def rel(finding: Finding) -> str:
    """The finding's key path below the config key."""
    return format_path(finding.path[1:])


def shown(findings) -> str:
    return "\n".join(f.format() for f in findings) or "(no findings)"


def expect(findings, path: str, fragment: str, hint: str | None = None) -> Finding:
    """The finding at `path` (below the config key) whose message holds `fragment` (and hint, `hint`)."""
    for f in findings:
        if rel(f) == path and fragment in f.message and (hint is None or hint in f.hint):
            return f
    raise AssertionError(f"no finding at {path!r} with {fragment!r} (hint {hint!r}) in:\n{shown(findings)}")


def finding_line(file: str | Path) -> re.Pattern:
    """`<file>:<line>: <key.path>: <message>( (<hint>))?` for findings in `file`."""
    return re.compile(
        rf"^{re.escape(str(file))}:(?P<line>[1-9]\d*): (?P<path>.+?): (?P<msg>.+?)"
        r"( \((?P<hint>.+)\))?$"
    )


def rows(out: str, file: str | Path) -> list[tuple[int, str, str, str]]:
    """(line, key path, message, hint) of every printed finding; fails on a line out of format."""
    pattern = finding_line(file)
    found = []
    for text in out.split("\n")[:-1]:
        match = pattern.match(text)
        assert match, f"line out of format: {text!r}"
        found.append((int(match["line"]), match["path"], match["msg"], match["hint"] or ""))
    return found


def run_lint(*argv) -> tuple[int, str, str]:
    """The lint CLI in process: (exit code, stdout, stderr); argparse's usage errors give 2."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = lint.main([str(a) for a in argv])
        except SystemExit as exc:
            code = exc.code
    return code, out.getvalue(), err.getvalue()


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(text, encoding="utf-8")
    return path
