"""The known-issue registry (configs/known-issues.yaml): engine bugs, what triggers and fixes them, and the
checks of one config entry against it (the strict rule rules._known_issues_handled).

How an issue is matched against a config entry, per engine instance (a prefill or decode worker):
- `engine`: a word of the entry's framework (sglang matches sglang, sglang-disagg, dynamo-sglang);
- `trigger.model`: the entry's model, exactly or as an fnmatch glob (absent: any model);
- `trigger.flags-all`: every flag is among the engine flags the worker's additional-settings stand for
  (settings.engine_flags: a setting with a `flag` gives `--name` when it is a true switch, `--name=value`
  otherwise). Flags compare as written: `--attention-backend=minicpm_flashinfer` is matched by
  ATTENTION_BACKEND=minicpm_flashinfer and by nothing else; `--dense-as-sparse` by DENSE_AS_SPARSE=true;
- `trigger.env`: every KEY=VALUE is the worker's value of that registered setting (compared typed);
- `affected.images` / `fixed-in.images`: fnmatch globs over the image reference, as written or with its
  registry spelled out (docker.io/...); an image that matches fixed-in.images is fixed.
Flags that configs/models.yaml adds on its own are invisible here: a trigger flag must come from a setting,
and the registry model refuses a flag no setting stands for.
"""

from __future__ import annotations

import datetime
import fnmatch
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Literal, Self

from pydantic import AfterValidator, Field, RootModel, field_validator, model_validator

from . import settings as reg
from .base import Id, Model, Version, prose, shape
from .config import MasterEntry
from .findings import Problem, did_you_mean, format_path, one_of
from .images import engine_version, parse_image
from .kv_path import Connector
from .launch import PythonModule
from .yamlio import Path_

if TYPE_CHECKING:  # engine_builds imports this module
    from .engine_builds import EngineBuild

RECORDS = "known-issue-workarounds"  # the entry key that records applied workarounds
REGISTRY_FILE = "configs/known-issues.yaml"


def _engine_flag(value: str) -> str:
    """Some setting stands for the flag (a flag lint cannot see could never match)."""
    try:
        reg.flag_setting(value)
    except reg.SettingError as exc:
        raise ValueError(str(exc)) from None
    return value


def _setting_item(value: str) -> str:
    """KEY=VALUE of a registered setting whose value parses (it is compared with the config's, typed)."""
    try:
        key, raw = reg.split_setting(value)
        reg.lookup(key).parse(raw)
    except reg.SettingError as exc:
        raise ValueError(str(exc)) from None
    return value


def _log_regex(value: str) -> str:
    try:
        pattern = re.compile(value)
    except re.error as exc:
        raise ValueError(f"log-signature does not compile: {exc}") from None
    if pattern.search(""):
        raise ValueError("log-signature matches an empty line: it would flag every log")
    return value


# A flag's value is what a setting's value can be: a number, a choice, a name or a path.
_FLAG = Annotated[
    str,
    shape(
        r"--[a-z0-9][a-z0-9-]*(=[A-Za-z0-9._/:+-]+)?",
        "an engine flag",
        max_length=128,
        allowed="--name or --name=value, in ASCII letters, digits and '._/:+-'",
    ),
]
EngineFlag = Annotated[_FLAG, AfterValidator(_engine_flag)]
SettingItem = Annotated[
    str, AfterValidator(_setting_item), Field(json_schema_extra={"pattern": "^[A-Z][A-Z0-9_]*="})
]
Commit = Annotated[
    str, shape(r"[0-9a-f]{40}", "a full commit", max_length=40, allowed="40 lowercase hex digits")
]
# No quote, space, '$', '`', '\\', brackets or braces: a URL here is a plain link.
Url = Annotated[
    str,
    shape(
        r"https://[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)+(/[A-Za-z0-9._~:/?#@!&*+,;=%-]*)?",
        "an https:// URL",
        max_length=512,
        allowed="https://host/path in URL-safe ASCII",
    ),
]
_GLOB = "'*', '?' and '[...]' globs"
ImageGlob = Annotated[
    str,
    shape(
        r"[A-Za-z0-9._/:@*?!\[\]-]+",
        "an image reference or glob",
        max_length=256,
        allowed=f"an image reference in ASCII, with {_GLOB}",
    ),
]
ModelGlob = Annotated[
    str,
    shape(
        r"[A-Za-z0-9._/*?!\[\]-]+",
        "a model id or glob",
        max_length=128,
        allowed=f"org/name in ASCII letters, digits and '._-', with {_GLOB}",
    ),
]
# An engine build of configs/engine-builds.yaml (schemas/engine_builds.py), as in vllm-0.33.0.
BuildId = Annotated[
    str,
    shape(
        r"[a-z0-9]+([.-][a-z0-9]+)*",
        "a build id",
        max_length=64,
        allowed="lowercase ASCII words of letters and digits joined by '-' or '.', as in vllm-0.33.0",
    ),
]
Title = Annotated[str, prose("a title", 200)]
Text = Annotated[str, prose("a one-line text", 500)]
Signature = Annotated[str, prose("a one-line regex", 256)]


class Trigger(Model):
    """What one engine instance must be launched with to walk into the bug (all of it)."""

    model: ModelGlob | None = Field(
        None, description="The config's model, exact or fnmatch glob; absent: any."
    )
    flags_all: list[EngineFlag] = Field(
        default_factory=list, description="Engine flags that must all be set."
    )
    env: list[SettingItem] = Field(
        default_factory=list, description="additional-settings KEY=VALUE, all set."
    )
    kv_connectors: list[Connector] = Field(
        default_factory=list,
        description="vLLM KV connectors all in one worker's kv-transfer-config, MultiConnector children "
        "included (schemas/kv_path.py decides them from the entry).",
    )

    @model_validator(mode="after")
    def _names_a_launch(self) -> Self:
        if not (self.flags_all or self.env or self.kv_connectors):
            raise ValueError(
                "a trigger needs flags-all, env or kv-connectors: what in the launch walks into the bug?"
            )
        return self


class BuildCommit(Model):
    commit: Commit
    date: datetime.date = Field(description="Commit date, YYYY-MM-DD.")


class Affected(Model):
    """Which builds carry the bug."""

    source: Text | None = Field(None, description="Which engine source the affected builds come from.")
    images: list[ImageGlob] = Field(
        min_length=1, description="Image refs or fnmatch globs; '*' is every image."
    )
    engine_commits_before: BuildCommit | None = Field(
        None, description="Builds from commits before this one carry the bug."
    )
    builds: list[BuildId] = Field(
        default_factory=list, description="Engine builds (configs/engine-builds.yaml) known to carry it."
    )
    engine_versions_before: Version | None = Field(
        None,
        description="Only engine releases before this one carry it; an image's release is its engine "
        "build's version (configs/engine-builds.yaml), else its tag's.",
    )


class FixedIn(Model):
    """What fixes it, and the images verified to carry the fix (only these pass lint)."""

    change: Text = Field(description="The upstream change that fixes it.")
    images: list[ImageGlob] = Field(default_factory=list, description="Image refs or fnmatch globs.")
    builds: list[BuildId] = Field(
        default_factory=list, description="Engine builds (configs/engine-builds.yaml) without the bug."
    )


class Workaround(Model):
    id: Id
    description: Text
    flags_add: list[EngineFlag] = Field(default_factory=list)
    flags_remove: list[EngineFlag] = Field(default_factory=list)
    kv_connector_module: PythonModule | None = Field(
        None,
        description="Applied by the runner instead of the config: its launch profile's kv-connector-module "
        "(a local runner's own MooncakeConnector module, configs/launch.yaml) is this module.",
    )
    changes_performance: bool = Field(description="true: results are not comparable with runs without it.")

    @model_validator(mode="after")
    def _changes_flags(self) -> Self:
        if not (self.flags_add or self.flags_remove or self.kv_connector_module):
            raise ValueError(
                "a workaround needs flags-add, flags-remove or kv-connector-module: lint checks that a "
                "config applies it"
            )
        return self


class KnownIssue(Model):
    """One engine bug recipes must not walk into."""

    id: Id
    title: Title
    engine: Literal["sglang", "vllm"]
    trigger: Trigger
    affected: Affected
    fixed_in: FixedIn | None = Field(None, description="Absent: no fix is known.")
    workarounds: list[Workaround] = Field(default_factory=list)
    log_signature: Annotated[Signature, AfterValidator(_log_regex)] = Field(
        description="Python regex a node-side watcher searches engine logs for; one line, at most 256 "
        "characters."
    )
    links: list[Url] = Field(default_factory=list, description="Upstream issue / pull request URLs.")

    @field_validator("workarounds")
    @classmethod
    def _workaround_ids_unique(cls, value: list[Workaround]) -> list[Workaround]:
        ids = [w.id for w in value]
        twice = sorted({i for i in ids if ids.count(i) > 1})
        if twice:
            raise ValueError(f"workaround id {twice[0]!r} is used twice")
        return value


class KnownIssues(RootModel[list[KnownIssue]]):
    """configs/known-issues.yaml: a list of known engine issues."""


# ---------------------------------------------------------------- matching (pure)


@dataclass(frozen=True)
class Launch:
    """One engine instance as lint sees it: where it is configured and its resolved settings."""

    path: Path_
    settings: dict[str, Any]  # setting name -> typed value, defaults filled in (settings.resolve)
    connectors: frozenset[Connector] = frozenset()  # vLLM KV connectors (schemas/kv_path.py)

    @property
    def flags(self) -> frozenset[str]:
        return reg.engine_flags(self.settings)


def image_matches(image: str, patterns: Iterable[str]) -> bool:
    parsed = parse_image(image)
    spelled = f"{parsed.registry}/{parsed.repo}" if parsed else image
    if parsed and parsed.tag:
        spelled += f":{parsed.tag}"
    if parsed and parsed.digest:
        spelled += f"@{parsed.digest}"
    return any(fnmatch.fnmatchcase(image, p) or fnmatch.fnmatchcase(spelled, p) for p in patterns)


def image_fixed(issue: KnownIssue, image: str, build: EngineBuild | None = None) -> bool:
    """`build`: the image's engine build (schemas/engine_builds.py), when known."""
    if issue.fixed_in is None:
        return False
    return image_matches(image, issue.fixed_in.images) or (
        build is not None and build.id in issue.fixed_in.builds
    )


def image_affected(issue: KnownIssue, image: str, build: EngineBuild | None = None) -> bool:
    a = issue.affected
    listed = image_matches(image, a.images) or (build is not None and build.id in a.builds)
    return listed and _release_before(a.engine_versions_before, image, build)


def _release_before(limit: str | None, image: str, build: EngineBuild | None) -> bool:
    """The image's engine release is before `limit`. An image whose release is unknown (a nightly, a
    digest) is not taken for an old one: lint asks every image for an engine build, which says it."""
    if limit is None:
        return True
    release = _release(build.version) if build is not None and build.version else None
    release = release or engine_version(image)
    bound = _release(limit)
    return release is not None and bound is not None and release < bound


def _release(version: str) -> tuple[int, ...] | None:
    """'0.33.0' -> (0, 33, 0): what engine_version reads from an image tag, from a plain version."""
    match = re.match(r"v?([0-9]+)\.([0-9]+)(?:\.([0-9]+))?", version)
    return tuple(int(g) for g in match.groups(default="0")) if match else None


def applies(issue: KnownIssue, entry: MasterEntry, build: EngineBuild | None = None) -> bool:
    """Engine, model and an affected image without the fix: the flags decide the rest."""
    model = issue.trigger.model
    return (
        issue.engine in entry.framework.split("-")
        and (model is None or fnmatch.fnmatchcase(entry.model, model))
        and image_affected(issue, entry.image, build)
        and not image_fixed(issue, entry.image, build)
    )


def triggered(
    issue: KnownIssue,
    flags: frozenset[str],
    settings: dict[str, Any],
    connectors: frozenset[Connector] = frozenset(),
) -> bool:
    def is_set(item: str) -> bool:
        key, raw = reg.split_setting(item)
        return key in settings and settings[key] == reg.lookup(key).parse(raw)

    return (
        set(issue.trigger.flags_all) <= flags
        and all(is_set(item) for item in issue.trigger.env)
        and set(issue.trigger.kv_connectors) <= connectors
    )


def applied(workaround: Workaround, flags: frozenset[str]) -> bool:
    return set(workaround.flags_add) <= flags and not set(workaround.flags_remove) & flags


def without(workaround: Workaround, flags: frozenset[str]) -> frozenset[str]:
    """The flags an engine instance would have without the workaround."""
    return (flags - set(workaround.flags_add)) | set(workaround.flags_remove)


# ---------------------------------------------------------------- one entry against the registry


def entry_problems(
    path: Path_,
    entry: MasterEntry,
    launches: list[Launch],
    registry: Iterable[KnownIssue],
    build: EngineBuild | None = None,
) -> Iterator[Problem]:
    """Unhandled issues, and recorded workarounds that are unknown, repeated, not applied or not needed.
    `build`: the entry image's engine build, when known."""
    by_id = {issue.id: issue for issue in registry}
    problems, records = _records(path, entry, by_id)
    yield from problems
    for issue in registry:
        mine = [(where, w) for where, of, w in records if of is issue]
        if mine:
            yield from _recorded_problems(path, issue, entry, launches, mine, build)
        elif applies(issue, entry, build):
            hit = [x for x in launches if triggered(issue, x.flags, x.settings, x.connectors)]
            if hit:
                yield Problem(path + ("image",), _unhandled_message(issue, hit, path), fix_hint(issue))


def _records(
    path: Path_, entry: MasterEntry, by_id: dict[str, KnownIssue]
) -> tuple[list[Problem], list[tuple[Path_, KnownIssue, Workaround]]]:
    """(problems, [(where, issue, workaround)]) of the entry's known-issue-workarounds."""
    problems: list[Problem] = []
    records: list[tuple[Path_, KnownIssue, Workaround]] = []
    seen: dict[tuple[str, str], int] = {}
    for i, record in enumerate(entry.known_issue_workarounds):
        where = path + (RECORDS, i)
        issue = by_id.get(record.issue)
        if issue is None:
            hint = did_you_mean(record.issue, by_id) or (one_of(by_id) if by_id else "the registry is empty")
            problems.append(Problem(where + ("issue",), f"unknown known issue {record.issue!r}", hint))
            continue
        listed = {w.id: w for w in issue.workarounds}
        if record.workaround not in listed:
            hint = did_you_mean(record.workaround, listed) or (one_of(listed) if listed else "it lists none")
            problems.append(
                Problem(where + ("workaround",), f"{issue.id} has no workaround {record.workaround!r}", hint)
            )
            continue
        pair = (record.issue, record.workaround)
        if pair in seen:
            problems.append(
                Problem(where, f"{record.workaround} is recorded twice", f"first at {RECORDS}[{seen[pair]}]")
            )
            continue
        seen[pair] = i
        records.append((where, issue, listed[record.workaround]))
    return problems, records


def _recorded_problems(
    path: Path_,
    issue: KnownIssue,
    entry: MasterEntry,
    launches: list[Launch],
    mine: list[tuple[Path_, Workaround]],
    build: EngineBuild | None = None,
) -> Iterator[Problem]:
    for where, workaround in mine:
        needs = [
            launch
            for launch in launches
            if triggered(issue, without(workaround, launch.flags), launch.settings, launch.connectors)
        ]
        if not needs or not applies(issue, entry, build):
            yield Problem(
                where,
                f"recorded workaround {workaround.id} is for an issue this config does not trigger: "
                f"{issue.id}",
                f"{_why_not(issue, entry, build)}; remove the record, it marks results as not comparable",
            )
            continue
        missing = [launch for launch in needs if not applied(workaround, launch.flags)]
        if missing:
            yield Problem(
                where,
                f"recorded workaround {workaround.id} of {issue.id} is not applied at "
                f"{_where(missing, path)}",
                f"in its additional-settings: {workaround_settings(workaround)}",
            )


def _why_not(issue: KnownIssue, entry: MasterEntry, build: EngineBuild | None = None) -> str:
    if issue.engine not in entry.framework.split("-"):
        return f"framework {entry.framework} does not run {issue.engine}"
    if issue.trigger.model and not fnmatch.fnmatchcase(entry.model, issue.trigger.model):
        return f"model {entry.model} is not {issue.trigger.model}"
    if image_fixed(issue, entry.image, build):
        return f"image {entry.image} carries the fix"
    if not image_affected(issue, entry.image, build):
        return f"image {entry.image} is not among the affected images"
    return f"no engine of it sets {trigger_settings(issue)}"


# ---------------------------------------------------------------- words


def _where(launches: list[Launch], path: Path_) -> str:
    first = format_path(launches[0].path[len(path) :])
    return first if len(launches) == 1 else f"{first} and {len(launches) - 1} more"


def trigger_settings(issue: KnownIssue) -> str:
    """The trigger in config terms: 'DENSE_AS_SPARSE=true + ATTENTION_BACKEND=minicpm_flashinfer'; KV
    connectors as what renders them (schemas/kv_path.py)."""
    words = [reg.flag_setting(f) for f in issue.trigger.flags_all] + list(issue.trigger.env)
    if issue.trigger.kv_connectors:
        words.append(f"KV connectors {' + '.join(issue.trigger.kv_connectors)}")
    return " + ".join(words)


def workaround_settings(workaround: Workaround) -> str:
    """What a config sets to apply it: 'ATTENTION_BACKEND=minicpm_flashattn instead of ...'."""
    if workaround.kv_connector_module:
        return (
            f"kv-connector-module {{module: {workaround.kv_connector_module}}} in the runner's launch "
            "profile "
            "(local runners only)"
        )
    add = ", ".join(reg.flag_setting(f) for f in workaround.flags_add)
    drop = ", ".join(reg.flag_setting(f) for f in workaround.flags_remove)
    if add and drop:
        return f"{add} instead of {drop}"
    return add or f"no {drop}"


def performance_note(workaround: Workaround) -> str:
    return "changes performance" if workaround.changes_performance else "same performance"


def _unhandled_message(issue: KnownIssue, hit: list[Launch], path: Path_) -> str:
    return (
        f"known issue {issue.id}: {issue.title}; triggered by {trigger_settings(issue)} at "
        f"{_where(hit, path)} on an image without the fix"
    )


def fix_hint(issue: KnownIssue) -> str:
    """The fix (fixed-in) and every workaround with its performance note."""
    fix = "no fix is known"
    if issue.fixed_in is not None:
        before = issue.affected.engine_commits_before
        at = f" ({before.commit[:12]}, {before.date.isoformat()})" if before else ""
        images, builds = issue.fixed_in.images, issue.fixed_in.builds
        ways = [f"one of {', '.join(images)}"] if images else []
        ways += [f"an image of {', '.join(builds)} (configs/engine-builds.yaml)"] if builds else []
        use = (
            f"use {' or '.join(ways)}"
            if ways
            else f"use an image built with it, listed under fixed-in.images in {REGISTRY_FILE} once verified"
        )
        fix = f"fixed by {issue.fixed_in.change}{at}: {use}"
    if not issue.workarounds:
        return fix
    each = "; ".join(
        f"{w.id} sets {workaround_settings(w)}, {performance_note(w)}" for w in issue.workarounds
    )
    return f"{fix}; or record a workaround, {RECORDS}: [{{issue: {issue.id}, workaround: <id>}}]: {each}"


# ---------------------------------------------------------------- for the renderer and the log watcher


def signatures(registry: Iterable[KnownIssue]) -> list[tuple[str, str]]:
    """(issue id, log regex) of every issue: what a node-side watcher searches engine logs for."""
    return [(issue.id, issue.log_signature) for issue in registry]


def recorded_workarounds(entry: MasterEntry, registry: Iterable[KnownIssue]) -> tuple[dict[str, Any], ...]:
    """The entry's recorded workarounds as the lock file and summary carry them (lint has checked them)."""
    by_id = {issue.id: issue for issue in registry}
    out = []
    for record in entry.known_issue_workarounds:
        issue = by_id[record.issue]
        workaround = next(w for w in issue.workarounds if w.id == record.workaround)
        out.append(
            {
                "issue": issue.id,
                "title": issue.title,
                "workaround": workaround.id,
                "description": workaround.description,
                "changes-performance": workaround.changes_performance,
                "settings": workaround_settings(workaround),
                "flags-add": list(workaround.flags_add),
                "flags-remove": list(workaround.flags_remove),
                **(
                    {"kv-connector-module": workaround.kv_connector_module}
                    if workaround.kv_connector_module
                    else {}
                ),
            }
        )
    return tuple(out)
