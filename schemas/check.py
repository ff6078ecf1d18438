"""Documents in, findings out: structural validation by the models, then the profile's rules."""

from __future__ import annotations

from typing import Any, TypeVar, overload

from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError

from .base import ConfigKey
from .config import MasterEntry
from .engine_builds import EngineBuild
from .findings import Finding, Problem, validation_problems
from .known_issues import KnownIssue
from .launch import LaunchProfiles
from .models import Models
from .rules import Context, check_entry
from .rules_inferencex import NEWEST
from .runners import Runners
from .yamlio import Document, Path_

PROFILES = ("strict", "inferencex", "inferencex-legacy")


def duplicate_findings(doc: Document) -> list[Finding]:
    """Repeated keys (YAML keeps the last silently)."""
    return [
        Finding(
            doc.file, d.line, d.path, f"duplicate key '{d.path[-1]}'", f"first defined on line {d.first_line}"
        )
        for d in doc.duplicates
    ]


M = TypeVar("M", bound=BaseModel)
T = TypeVar("T")


@overload
def validate(
    doc: Document, model: type[M], data: object, base: Path_ = ()
) -> tuple[M | None, list[Finding]]: ...


@overload
def validate(
    doc: Document, model: TypeAdapter[T], data: object, base: Path_ = ()
) -> tuple[T | None, list[Finding]]: ...


def validate(
    doc: Document, model: type[BaseModel] | TypeAdapter[Any], data: object, base: Path_ = ()
) -> tuple[Any, list[Finding]]:
    """(instance or None, findings) for `data` at `base` in `doc`."""
    try:
        if isinstance(model, TypeAdapter):
            return model.validate_python(data), []
        return model.model_validate(data), []
    except ValidationError as exc:
        return None, [p.at(doc) for p in validation_problems(exc, model, base)]


def check_runners(doc: Document, profile: str = "strict") -> tuple[Runners | None, list[Finding]]:
    """The runners file; under `inferencex` also in the one form InferenceX's newest validator takes (labels
    and `clusters:`, no `hardware:`)."""
    runners, findings = validate(doc, Runners, doc.data)
    if runners is not None and profile == "inferencex":
        if not runners.clusters:
            findings.append(
                Problem(("labels",), NEWER_RUNNERS + "needs `clusters:` beside labels", CLUSTERS_FIX).at(doc)
            )
        if runners.hardware:
            findings.append(
                Problem(("hardware",), NEWER_RUNNERS + "refuses `hardware:`", CLUSTERS_FIX).at(doc)
            )
    return runners, duplicate_findings(doc) + findings


NEWER_RUNNERS = f"InferenceX's validator since {NEWEST} "
CLUSTERS_FIX = (
    "give each node shape as clusters.<id> (gpus-per-node, available-cpu-dram-mib, arch, scheduler and its "
    "record) with its cluster:<id> label; or lint under inferencex-legacy, InferenceX's older form"
)


def check_launch(doc: Document) -> tuple[LaunchProfiles | None, list[Finding]]:
    profiles, findings = validate(doc, LaunchProfiles, doc.data)
    return profiles, duplicate_findings(doc) + findings


def check_models(doc: Document) -> tuple[Models | None, list[Finding]]:
    models, findings = validate(doc, Models, doc.data)
    return models, duplicate_findings(doc) + findings


def check_known_issues(doc: Document) -> tuple[tuple[KnownIssue, ...], list[Finding]]:
    """Valid issues (the first of a repeated id) and every finding of the registry, issue by issue."""
    findings = duplicate_findings(doc)
    if not isinstance(doc.data, list):
        shape = type(doc.data).__name__ if doc.data is not None else "empty"
        findings.append(Problem((), f"the known-issue registry is a list of issues, got {shape}").at(doc))
        return (), findings
    issues: list[KnownIssue] = []
    first: dict[str, int] = {}
    for i, item in enumerate(doc.data):
        issue, problems = validate(doc, KnownIssue, item, base=(i,))
        findings += problems
        if issue is None:
            continue
        if issue.id in first:
            line = doc.line_of((first[issue.id], "id"))
            where = (i, "id")
            findings.append(
                Finding(
                    doc.file,
                    doc.line_of(where),
                    where,
                    f"duplicate issue id {issue.id!r}",
                    f"first defined on line {line}",
                )
            )
            continue
        first[issue.id] = i
        issues.append(issue)
    return tuple(issues), findings


def check_master(
    doc: Document,
    runners: Runners | None,
    profile: str,
    issues: tuple[KnownIssue, ...] = (),
    launch: LaunchProfiles | None = None,
    builds: tuple[EngineBuild, ...] | None = None,
    models: Models | None = None,
) -> tuple[dict[str, MasterEntry], list[Finding]]:
    """Valid entries by key, and every finding of the file (an invalid entry never hides another's);
    `issues` and `launch`: the known-issue registry and launch profiles strict rules check entries against."""
    findings = duplicate_findings(doc)
    if not isinstance(doc.data, dict):
        shape = type(doc.data).__name__ if doc.data is not None else "empty"
        findings.append(Problem((), f"a master config is a map of config-key -> entry, got {shape}").at(doc))
        return {}, findings
    entries = {}
    for key, value in doc.data.items():
        _, bad_key = validate(doc, _CONFIG_KEY, key, base=(key,))
        entry, problems = validate(doc, MasterEntry, value, base=(key,))
        findings += bad_key + problems
        if entry is None:
            continue
        findings += [
            p.at(doc)
            for p in check_entry(Context(str(key), entry, runners, issues, launch, builds, models), profile)
        ]
        if not bad_key:  # a key of the wrong shape is never rendered (it names folders, files, jobs)
            entries[key] = entry
    return entries, findings


# Config keys are mapping keys, so no model field holds them: they are checked on their own.
_CONFIG_KEY = TypeAdapter(ConfigKey, config=ConfigDict(strict=True))
