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
Flags that recipes/models.py adds on its own are invisible here: a trigger flag must come from a setting,
and the registry model refuses a flag no setting stands for.
"""

from __future__ import annotations

import datetime
import fnmatch
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, RootModel, field_validator, model_validator

from . import settings as reg
from .base import Model
from .config import MasterEntry
from .findings import Problem, did_you_mean, format_path, one_of
from .images import parse_image

RECORDS = "known-issue-workarounds"  # the entry key that records applied workarounds
REGISTRY_FILE = "configs/known-issues.yaml"
_ID = re.compile(r"[a-z0-9]+(-[a-z0-9]+)*")
_FLAG = re.compile(r"--[a-z0-9][a-z0-9-]*(=[^\s=]+)?")
_COMMIT = re.compile(r"[0-9a-f]{40}")
_URL = re.compile(r"https://[^\s/]+\.[^\s/]+(/\S*)?")


def _id(value: str) -> str:
    if not _ID.fullmatch(value):
        raise ValueError(f"{value!r} is not a kebab-case id: lowercase words joined by '-'")
    return value


def _engine_flag(value: str) -> str:
    """--name or --name=value, and some setting stands for it (a flag lint cannot see could never match)."""
    if not _FLAG.fullmatch(value):
        raise ValueError(f"{value!r} is not an engine flag; write --name or --name=value")
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


def _commit(value: str) -> str:
    if not _COMMIT.fullmatch(value):
        raise ValueError(f"{value!r} is not a full 40-hex commit")
    return value


def _https(value: str) -> str:
    if not _URL.fullmatch(value):
        raise ValueError(f"{value!r} is not an https:// URL")
    return value


def _schema(pattern: str, text: str):
    return Field(json_schema_extra={"pattern": pattern}, description=text)


Id = Annotated[str, AfterValidator(_id), _schema(f"^{_ID.pattern}$", "kebab-case id")]
EngineFlag = Annotated[
    str, AfterValidator(_engine_flag), _schema(f"^{_FLAG.pattern}$", "--name or --name=value")
]
SettingItem = Annotated[str, AfterValidator(_setting_item), _schema(r"^[A-Z][A-Z0-9_]*=", "KEY=VALUE")]
Commit = Annotated[str, AfterValidator(_commit), _schema(f"^{_COMMIT.pattern}$", "40-hex commit")]
Url = Annotated[str, AfterValidator(_https), _schema(r"^https://", "https:// URL")]
NonEmpty = Annotated[str, Field(min_length=1)]


class Trigger(Model):
    """What one engine instance must be launched with to walk into the bug (all of it)."""

    model: NonEmpty | None = Field(
        None, description="The config's model, exact or fnmatch glob; absent: any."
    )
    flags_all: list[EngineFlag] = Field(
        default_factory=list, description="Engine flags that must all be set."
    )
    env: list[SettingItem] = Field(
        default_factory=list, description="additional-settings KEY=VALUE, all set."
    )

    @model_validator(mode="after")
    def _names_a_launch(self):
        if not (self.flags_all or self.env):
            raise ValueError("a trigger needs flags-all or env: what in the launch walks into the bug?")
        return self


class BuildCommit(Model):
    commit: Commit
    date: datetime.date = Field(description="Commit date, YYYY-MM-DD.")


class Affected(Model):
    """Which builds carry the bug."""

    source: NonEmpty | None = Field(None, description="Which engine source the affected builds come from.")
    images: list[NonEmpty] = Field(
        min_length=1, description="Image refs or fnmatch globs; '*' is every image."
    )
    engine_commits_before: BuildCommit | None = Field(
        None, description="Builds from commits before this one carry the bug."
    )


class FixedIn(Model):
    """What fixes it, and the images verified to carry the fix (only these pass lint)."""

    change: NonEmpty = Field(description="The upstream change that fixes it.")
    images: list[NonEmpty] = Field(default_factory=list, description="Image refs or fnmatch globs.")


class Workaround(Model):
    id: Id
    description: NonEmpty
    flags_add: list[EngineFlag] = Field(default_factory=list)
    flags_remove: list[EngineFlag] = Field(default_factory=list)
    changes_performance: bool = Field(description="true: results are not comparable with runs without it.")

    @model_validator(mode="after")
    def _changes_flags(self):
        if not (self.flags_add or self.flags_remove):
            raise ValueError(
                "a workaround needs flags-add or flags-remove: lint checks that a config applies it"
            )
        return self


class KnownIssue(Model):
    """One engine bug recipes must not walk into."""

    id: Id
    title: NonEmpty
    engine: Literal["sglang", "vllm"]
    trigger: Trigger
    affected: Affected
    fixed_in: FixedIn | None = Field(None, description="Absent: no fix is known.")
    workarounds: list[Workaround] = Field(default_factory=list)
    log_signature: Annotated[str, AfterValidator(_log_regex)] = Field(
        description="Python regex a node-side watcher searches engine logs for."
    )
    links: list[Url] = Field(default_factory=list, description="Upstream issue / pull request URLs.")

    @field_validator("workarounds")
    @classmethod
    def _workaround_ids_unique(cls, value: list[Workaround]):
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

    path: tuple
    settings: dict  # setting name -> typed value, defaults filled in (settings.resolve)

    @property
    def flags(self) -> frozenset[str]:
        return reg.engine_flags(self.settings)


def image_matches(image: str, patterns) -> bool:
    parsed = parse_image(image)
    spelled = f"{parsed.registry}/{parsed.repo}" if parsed else image
    if parsed and parsed.tag:
        spelled += f":{parsed.tag}"
    if parsed and parsed.digest:
        spelled += f"@{parsed.digest}"
    return any(fnmatch.fnmatchcase(image, p) or fnmatch.fnmatchcase(spelled, p) for p in patterns)


def image_fixed(issue: KnownIssue, image: str) -> bool:
    return issue.fixed_in is not None and image_matches(image, issue.fixed_in.images)


def applies(issue: KnownIssue, entry: MasterEntry) -> bool:
    """Engine, model and an affected image without the fix: the flags decide the rest."""
    model = issue.trigger.model
    return (
        issue.engine in entry.framework.split("-")
        and (model is None or fnmatch.fnmatchcase(entry.model, model))
        and image_matches(entry.image, issue.affected.images)
        and not image_fixed(issue, entry.image)
    )


def triggered(issue: KnownIssue, flags: frozenset, settings: dict) -> bool:
    def is_set(item: str) -> bool:
        key, raw = reg.split_setting(item)
        return key in settings and settings[key] == reg.lookup(key).parse(raw)

    return set(issue.trigger.flags_all) <= flags and all(is_set(item) for item in issue.trigger.env)


def applied(workaround: Workaround, flags: frozenset) -> bool:
    return set(workaround.flags_add) <= flags and not set(workaround.flags_remove) & flags


def without(workaround: Workaround, flags: frozenset) -> frozenset:
    """The flags an engine instance would have without the workaround."""
    return (flags - set(workaround.flags_add)) | set(workaround.flags_remove)


# ---------------------------------------------------------------- one entry against the registry


def entry_problems(path: tuple, entry: MasterEntry, launches, registry) -> Iterator[Problem]:
    """Unhandled issues, and recorded workarounds that are unknown, repeated, not applied or not needed."""
    by_id = {issue.id: issue for issue in registry}
    problems, records = _records(path, entry, by_id)
    yield from problems
    for issue in registry:
        mine = [(where, w) for where, of, w in records if of is issue]
        if mine:
            yield from _recorded_problems(path, issue, entry, launches, mine)
        elif applies(issue, entry):
            hit = [launch for launch in launches if triggered(issue, launch.flags, launch.settings)]
            if hit:
                yield Problem(path + ("image",), _unhandled_message(issue, hit, path), fix_hint(issue))


def _records(path: tuple, entry: MasterEntry, by_id: dict) -> tuple[list, list]:
    """(problems, [(where, issue, workaround)]) of the entry's known-issue-workarounds."""
    problems, records, seen = [], [], {}
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
    path: tuple, issue: KnownIssue, entry: MasterEntry, launches, mine
) -> Iterator[Problem]:
    for where, workaround in mine:
        needs = [
            launch
            for launch in launches
            if triggered(issue, without(workaround, launch.flags), launch.settings)
        ]
        if not needs or not applies(issue, entry):
            yield Problem(
                where,
                f"recorded workaround {workaround.id} is for an issue this config does not trigger: "
                f"{issue.id}",
                f"{_why_not(issue, entry)}; remove the record, it marks results as not comparable",
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


def _why_not(issue: KnownIssue, entry: MasterEntry) -> str:
    if issue.engine not in entry.framework.split("-"):
        return f"framework {entry.framework} does not run {issue.engine}"
    if issue.trigger.model and not fnmatch.fnmatchcase(entry.model, issue.trigger.model):
        return f"model {entry.model} is not {issue.trigger.model}"
    if image_fixed(issue, entry.image):
        return f"image {entry.image} carries the fix"
    if not image_matches(entry.image, issue.affected.images):
        return f"image {entry.image} is not among the affected images"
    return f"no engine of it sets {trigger_settings(issue)}"


# ---------------------------------------------------------------- words


def _where(launches, path: tuple) -> str:
    first = format_path(launches[0].path[len(path) :])
    return first if len(launches) == 1 else f"{first} and {len(launches) - 1} more"


def trigger_settings(issue: KnownIssue) -> str:
    """The trigger in config terms: 'DENSE_AS_SPARSE=true + ATTENTION_BACKEND=minicpm_flashinfer'."""
    return " + ".join([reg.flag_setting(f) for f in issue.trigger.flags_all] + list(issue.trigger.env))


def workaround_settings(workaround: Workaround) -> str:
    """What a config sets to apply it: 'ATTENTION_BACKEND=minicpm_flashattn instead of ...'."""
    add = ", ".join(reg.flag_setting(f) for f in workaround.flags_add)
    drop = ", ".join(reg.flag_setting(f) for f in workaround.flags_remove)
    if add and drop:
        return f"{add} instead of {drop}"
    return add or f"no {drop}"


def performance_note(workaround: Workaround) -> str:
    return "changes performance" if workaround.changes_performance else "same performance"


def _unhandled_message(issue: KnownIssue, hit, path: tuple) -> str:
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
        images = issue.fixed_in.images
        use = (
            f"use one of {', '.join(images)}"
            if images
            else f"use an image built with it, listed under fixed-in.images in {REGISTRY_FILE} once verified"
        )
        fix = f"fixed by {issue.fixed_in.change}{at}: {use}"
    if not issue.workarounds:
        return fix
    ways = "; ".join(
        f"{w.id} sets {workaround_settings(w)}, {performance_note(w)}" for w in issue.workarounds
    )
    return f"{fix}; or record a workaround, {RECORDS}: [{{issue: {issue.id}, workaround: <id>}}]: {ways}"


# ---------------------------------------------------------------- for the renderer and the log watcher


def signatures(registry) -> list[tuple[str, str]]:
    """(issue id, log regex) of every issue: what a node-side watcher searches engine logs for."""
    return [(issue.id, issue.log_signature) for issue in registry]


def recorded_workarounds(entry: MasterEntry, registry) -> tuple[dict, ...]:
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
            }
        )
    return tuple(out)
