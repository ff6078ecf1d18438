"""`make lint`: validate master configs, runners, launch profiles, the known-issue registry and the
changelog; print every finding, one per line.

Exit 0 when valid, 1 with findings, 2 on a usage error. Tracebacks only with RECIPES_DEBUG=1.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from .changelog import DEFAULT_REPO, check_changelog
from .check import PROFILES, check_known_issues, check_launch, check_master, check_models, check_runners
from .engine_builds import check_engine_builds
from .findings import Finding, format_path, one_line, unreadable
from .known_issues import KnownIssue
from .launch import LaunchProfiles
from .models import Models
from .runners import Runners
from .yamlio import Document, YamlSyntaxError, load_file, load_text

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CONFIG_GLOB = "configs/*-master.yaml"
DEFAULT_RUNNERS = "configs/runners.yaml"
DEFAULT_LAUNCH = "configs/launch.yaml"
DEFAULT_CHANGELOG = "perf-changelog.yaml"
DEFAULT_KNOWN_ISSUES = "configs/known-issues.yaml"
DEFAULT_ENGINE_BUILDS = "configs/engine-builds.yaml"
DEFAULT_MODELS = "configs/models.yaml"


class UsageError(Exception):
    """Bad arguments or missing files: exit 2."""


@dataclass
class Report:
    findings: list[Finding] = field(default_factory=list)
    entries: dict = field(default_factory=dict)  # config key -> MasterEntry, over every config checked
    defined_at: dict = field(default_factory=dict)  # config key -> (file, line) of the entry in `entries`
    checked: list[str] = field(default_factory=list)


def read(path: str | Path) -> Document:
    if not Path(path).is_file():
        raise UsageError(f"no such file: {path}")
    return load_file(path)


def default_configs() -> list[Path]:
    return sorted(ROOT.glob(DEFAULT_CONFIG_GLOB))


def lint_runners(path, report: Report, profile: str = "strict"):
    try:
        runners, findings = check_runners(read(path), profile)
    except YamlSyntaxError as exc:
        runners, findings = None, [unreadable(exc)]
    report.findings += findings
    report.checked.append(str(path))
    return runners


def _lint_file(path, report: Report, check, invalid=None):
    """What `check` makes of the file (`invalid` when it is not YAML), its findings added to the report."""
    report.checked.append(str(path))
    try:
        value, findings = check(read(path))
    except YamlSyntaxError as exc:
        value, findings = invalid, [unreadable(exc)]
    report.findings += findings
    return value


def lint_launch(path, report: Report):
    """The launch profiles, or None when the file is invalid (its findings say why)."""
    return _lint_file(path, report, check_launch)


def lint_known_issues(path, report: Report) -> tuple:
    """The registry's valid issues (a malformed one is reported and left out, never fatal to the others)."""
    return _lint_file(path, report, check_known_issues, ())


def lint_engine_builds(path, report: Report) -> tuple:
    """The engine builds (schemas/engine_builds.py): which build, and parser, each image carries."""
    return _lint_file(path, report, check_engine_builds, ())


def lint_models(path, report: Report):
    """configs/models.yaml (schemas/models.py), or None when the file is invalid (its findings say why)."""
    return _lint_file(path, report, check_models)


_SHIPPED = object()  # lint_configs' default: the repository's own file, loaded (and reported) under strict


def lint_configs(
    paths,
    runners,
    profile: str,
    report: Report,
    issues=_SHIPPED,
    launch=_SHIPPED,
    builds=_SHIPPED,
    models=_SHIPPED,
) -> None:
    """issues, launch, models: the known-issue registry, launch profiles and models the strict rules check
    against (None: not checked, an invalid file reported elsewhere); by default the repository's own. Under
    strict, an entry every rule passes is then judged by the renderer (recipes/verdict.py): whatever `make
    render` would refuse is a finding here, at its line."""
    if issues is _SHIPPED:
        issues = lint_known_issues(ROOT / DEFAULT_KNOWN_ISSUES, report) if profile == "strict" else ()
    if launch is _SHIPPED:
        launch = lint_launch(ROOT / DEFAULT_LAUNCH, report) if profile == "strict" else None
    if builds is _SHIPPED:  # configs/engine-builds.yaml, under strict
        builds = lint_engine_builds(ROOT / DEFAULT_ENGINE_BUILDS, report) if profile == "strict" else None
    if models is _SHIPPED:
        models = lint_models(ROOT / DEFAULT_MODELS, report) if profile == "strict" else None
    for path in paths:
        report.checked.append(str(path))
        try:
            doc = read(path)
        except YamlSyntaxError as exc:
            report.findings.append(unreadable(exc))
            continue
        entries, findings = check_master(doc, runners, profile, issues or (), launch, builds, models)
        if profile == "strict" and None not in (runners, launch, models):
            findings += _render_refusals(doc, entries, findings, runners, launch, issues or (), models)
        for key in entries.keys() & report.entries.keys():
            # The key names the entry's output folder, page and job: two files may not both claim it.
            file, line = report.defined_at[key]
            findings.append(
                Finding(
                    str(path),
                    doc.line_of((key,)),
                    (key,),
                    "config key defined in another file too",
                    f"also at {file}:{line}; a config key is one entry across every master file: rename "
                    "one of them or remove it",
                )
            )
        for key in entries.keys() - report.entries.keys():
            report.defined_at[key] = (str(path), doc.line_of((key,)))
        report.entries.update(entries)
        report.findings += findings


def _render_refusals(doc, entries: dict, findings: list, runners, launch, issues, models) -> list[Finding]:
    """What the renderer refuses of each entry no rule found fault with (one verdict: render never refuses
    what lint passed). Imported here, not at the top: the schemas stand without the renderer."""
    from recipes.outside.srt_recipe import checkout_of
    from recipes.verdict import refusals

    faulty = {f.path[0] for f in findings if f.path}
    recipes = checkout_of(Path(doc.file))
    out = []
    for key, entry in entries.items():
        if key not in faulty:
            problems = refusals(
                key, entry, runners=runners, launch=launch, issues=issues, models=models, recipes=recipes
            )
            out += [p.at(doc) for p in problems]
    return out


@dataclass(frozen=True)
class Repository:
    """The repository's own configs linted under the strict profile, with what they were checked against:
    what `make render` and `make docs` build from."""

    report: Report
    runners: Runners | None  # None when runners.yaml is invalid
    launch: LaunchProfiles | None  # None when launch.yaml is invalid
    issues: tuple[KnownIssue, ...]
    models: Models | None  # None when models.yaml is invalid


def lint_repository(configs: list[Path] | None = None) -> Repository:
    """configs: master files to build from instead of the repository's own (an InferenceX master file as it
    is), checked against the repository's runners, launch profiles, registry and models all the same."""
    report = Report()
    runners = lint_runners(ROOT / DEFAULT_RUNNERS, report)
    launch = lint_launch(ROOT / DEFAULT_LAUNCH, report)
    issues = lint_known_issues(ROOT / DEFAULT_KNOWN_ISSUES, report)
    models = lint_models(ROOT / DEFAULT_MODELS, report)
    paths = configs if configs is not None else default_configs()
    lint_configs(paths, runners, "strict", report, issues, launch, models=models)
    return Repository(report, runners, launch, issues, models)


def base_entries(path: Path, base: str) -> list:
    """The changelog's entries at git ref `base` ([] when the file did not exist there)."""
    where = path.resolve().parent
    verify = subprocess.run(
        ["git", "rev-parse", "--verify", "--quiet", f"{base}^{{commit}}"],
        cwd=where,
        capture_output=True,
        text=True,
    )
    if verify.returncode != 0:
        raise UsageError(f"BASE {base!r} is not a commit in this repository")
    shown = subprocess.run(
        ["git", "show", f"{base}:./{path.name}"], cwd=where, capture_output=True, text=True
    )
    if shown.returncode != 0:
        return []
    try:
        data = load_text(shown.stdout, f"{base}:{path.name}").data
    except YamlSyntaxError:
        return []  # unreadable history: every entry counts as appended
    return data if isinstance(data, list) else []


def lint_changelog(path, *, repo: str, config_keys, base: str | None, report: Report) -> None:
    report.checked.append(str(path))
    try:
        doc = read(path)
    except YamlSyntaxError as exc:
        report.findings.append(unreadable(exc))
        return
    history = base_entries(Path(path), base) if base else None
    report.findings += check_changelog(doc, repo=repo, config_keys=config_keys, base=history)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="lint", description=__doc__.splitlines()[0])
    p.add_argument("configs", nargs="*", help="master config files (default: configs/*-master.yaml)")
    p.add_argument("--runners", help=f"runners file (default: {DEFAULT_RUNNERS})")
    p.add_argument("--launch", help=f"launch profiles (default: {DEFAULT_LAUNCH})")
    p.add_argument("--changelog", help=f"changelog file (default: {DEFAULT_CHANGELOG})")
    p.add_argument("--known-issues", help=f"known-issue registry (default: {DEFAULT_KNOWN_ISSUES})")
    p.add_argument("--models", help=f"models file (default: {DEFAULT_MODELS})")
    p.add_argument("--profile", choices=PROFILES, default="strict")
    p.add_argument("--base", help="git ref: only changelog entries appended since it get the strict checks")
    p.add_argument(
        "--repo", default=DEFAULT_REPO, help=f"org/repo pr-links must point at (default {DEFAULT_REPO})"
    )
    return p


def run(args: argparse.Namespace) -> Report:
    report = Report()
    selected = bool(
        args.configs or args.runners or args.changelog or args.known_issues or args.launch or args.models
    )
    check_configs = bool(args.configs) or not selected
    runners_path = args.runners or ROOT / DEFAULT_RUNNERS
    runners = None
    if check_configs or args.runners:
        runners = lint_runners(runners_path, report, args.profile)
    # The inferencex profile has no known-issue or launch rule: InferenceX has neither file.
    issues, launch = (), None
    strict_configs = check_configs and args.profile == "strict"
    if strict_configs or args.known_issues:
        issues = lint_known_issues(args.known_issues or ROOT / DEFAULT_KNOWN_ISSUES, report)
    if strict_configs or args.launch:
        launch = lint_launch(args.launch or ROOT / DEFAULT_LAUNCH, report)
    builds = lint_engine_builds(ROOT / DEFAULT_ENGINE_BUILDS, report) if strict_configs else None
    models = None
    if strict_configs or args.models:
        models = lint_models(args.models or ROOT / DEFAULT_MODELS, report)
    config_paths = [Path(c) for c in args.configs] or (default_configs() if check_configs else [])
    lint_configs(config_paths, runners, args.profile, report, issues, launch, builds, models)
    if args.changelog or not selected:
        keys = report.entries.keys() if args.configs or not selected else _keys_of(default_configs())
        lint_changelog(
            args.changelog or ROOT / DEFAULT_CHANGELOG,
            repo=args.repo,
            config_keys={str(k) for k in keys},
            base=args.base,
            report=report,
        )
    return report


def _keys_of(paths) -> set[str]:
    """Config keys of files that are not themselves being linted (their findings are not reported)."""
    scratch = Report()
    lint_configs(paths, None, "inferencex", scratch)
    return set(scratch.entries)


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    try:
        report = run(args)
    except UsageError as exc:
        print(one_line(f"lint: {exc}"), file=sys.stderr)
        return 2
    # Key paths may mix str, int and None keys (YAML allows any scalar as a key): sort them as text.
    for finding in sorted(report.findings, key=lambda f: (f.file, f.line, format_path(f.path), f.message)):
        print(finding.format())
    n = len(report.findings)
    files = len(report.checked)
    print(
        f"lint: {n} finding{'s' * (n != 1)} in {files} file{'s' * (files != 1)} ({args.profile})"
        if n
        else f"lint: ok, {files} file{'s' * (files != 1)} ({args.profile})",
        file=sys.stderr,
    )
    return 1 if n else 0


def entrypoint() -> None:
    try:
        code = main()
    except Exception as exc:  # a bug, not bad input: say so in one line unless debugging
        if os.environ.get("RECIPES_DEBUG"):
            raise
        what = f"{type(exc).__name__}: {exc}"
        print(
            one_line(f"lint: internal error: {what} (rerun with RECIPES_DEBUG=1 and report it)"),
            file=sys.stderr,
        )
        code = 3
    sys.exit(code)


if __name__ == "__main__":
    entrypoint()
