"""perf-changelog.yaml: entry model, canonical pr-link, config-key resolution, append-only history."""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterator
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, RootModel
from pydantic_core import PydanticCustomError

from .base import Model, bounded, clip, prose, shape
from .check import duplicate_findings, validate
from .findings import Finding, Problem
from .yamlio import Document, Path_

# The one place naming this repository; pr-links must point at its pull requests.
DEFAULT_REPO = "disagg-recipes/disagg-recipes"
PLACEHOLDERS = re.compile(r"(?i)\b(x{3,}|tbd|todo|placeholder|n/?a|none|pending)\b", re.ASCII)
# A config key, or an fnmatch pattern of them ('*', '?', '[...]').
KeyPattern = Annotated[
    str,
    shape(
        r"[a-z0-9._*?!\[\]-]+",
        "a config key or pattern",
        max_length=128,
        allowed="lowercase ASCII letters, digits, '.', '_', '-' and the wildcards '*', '?', '[...]'",
    ),
]
Description = Annotated[str, prose("a description line", 2000)]  # the longest real one has 1081 characters
Scenario = Literal["fixed-seq-len", "agentic-coding"]


def _some_scenarios(types: list[str]) -> list[str]:
    if not types:
        message = "scenario-type lists no scenario; InferenceX refuses an empty list"
        raise PydanticCustomError(
            "shape", "{message}", {"message": message, "fix": "name one, or drop the key to mean every one"}
        )
    return types


class ChangelogEntry(Model):
    """One perf-affecting change: which configs, what changed, which pull request."""

    config_keys: list[KeyPattern] = Field(min_length=1, description="Config keys; '*' wildcards allowed.")
    description: list[Description] = Field(
        min_length=1, description="What changed, one line per item, at most 2000 characters each."
    )
    pr_link: Annotated[str, Field(max_length=512)] | None = Field(
        description="https://github.com/<org>/<repo>/pull/<number>, digits in ASCII."
    )
    scenario_type: Annotated[list[Scenario], AfterValidator(_some_scenarios)] | None = Field(
        None, description="Only these scenarios; at least one when given."
    )
    evals_only: bool | None = None
    all_evals: bool | None = None
    append_only: bool | None = Field(
        None, description="Run only the points added while keeping every existing one; no eval selection."
    )
    eval_min_prefill_ep: Annotated[int, bounded(1, 1024)] | None = Field(
        None, description="Multinode evals: drop rows whose prefill ep is below this, 1 to 1024."
    )


class Changelog(RootModel[list[ChangelogEntry]]):
    """The whole file: an append-only list of entries."""


def pr_link_problem(link: str | None, repo: str, path: Path_) -> Problem | None:
    """Why `link` is not https://github.com/<repo>/pull/<n>, or None when it is."""
    canonical = f"https://github.com/{repo}/pull/"
    fix = f"{canonical}<number>"
    if link is None or not str(link).strip():
        return Problem(path, "pr-link is empty", fix)
    link = str(link)
    if re.fullmatch(re.escape(canonical) + r"[1-9][0-9]*", link):
        return None
    if PLACEHOLDERS.search(link.rsplit("/", 1)[-1]) or PLACEHOLDERS.fullmatch(link):
        return Problem(
            path, f"pr-link {clip(link)} is a placeholder", f"open the pull request first, then {fix}"
        )
    if link.startswith("http://"):
        return Problem(path, f"pr-link {clip(link)} is not https", fix)
    number = link.removeprefix(canonical).split("/")[0]
    if link.startswith(canonical) and number.isdigit() and not number.isascii():
        # '1٣' and fullwidth '１２' are digits to str.isdigit and to re's Unicode classes, not PR numbers
        return Problem(path, f"pr-link number {number!r} has non-ASCII digits", fix)
    match = re.fullmatch(r"https://github\.com/([^/]+/[^/]+)/pull/([0-9]+)(/.*)?", link)
    if match and match[1] != repo:
        return Problem(
            path,
            f"pr-link points at {match[1]}, not this repository ({repo}); `make lint REPO=<org>/<repo>` sets "
            "which repository pr-links must point at (a fork linting its own changelog)",
            fix,
        )
    if match and match[3]:
        return Problem(path, f"pr-link has a {match[3]!r} suffix", f"{canonical}{match[2]}")
    return Problem(path, f"pr-link {clip(link)} is not a pull request link of {repo}", fix)


def _unresolved_keys(entry: ChangelogEntry, config_keys: set[str], path: Path_) -> Iterator[Problem]:
    for i, pattern in enumerate(entry.config_keys):
        if not any(fnmatch.fnmatchcase(key, pattern) for key in config_keys):
            kind = "pattern matches no" if any(c in pattern for c in "*?[") else "no such"
            yield Problem(
                path + ("config-keys", i),
                f"{kind} config key {pattern!r}",
                "config keys are the top-level keys of configs/*-master.yaml",
            )


EVAL_SELECTION = ("evals-only", "all-evals", "eval-min-prefill-ep")


def _append_only_selects_no_evals(entry: ChangelogEntry, path: Path_) -> Iterator[Problem]:
    """append-only entries add throughput points to the latest curve; they select no evals (InferenceX)."""
    if not entry.append_only:
        return
    chosen = [k for k in EVAL_SELECTION if getattr(entry, k.replace("-", "_")) not in (None, False)]
    if chosen:
        yield Problem(
            path + ("append-only",),
            f"append-only cannot be combined with {', '.join(chosen)}",
            "an append-only entry runs new throughput points only: drop the eval selection, or append-only",
        )


# Checks of one appended entry beyond its model, each a named function (tests name them).
ENTRY_CHECKS = (_append_only_selects_no_evals,)


def _history_problems(old: list[Any], new: list[Any]) -> list[Problem]:
    """Entries of the base that were changed or removed: the file is append-only."""
    out = []
    for i, before in enumerate(old):
        if i >= len(new):
            out.append(Problem((), f"entry [{i}] of the base was removed", "the changelog is append-only"))
            break
        if new[i] != before:
            out.append(
                Problem(
                    (i,),
                    f"entry [{i}] was changed after it landed",
                    "the changelog is append-only: add a new entry instead",
                )
            )
    return out


def check_changelog(
    doc: Document, *, repo: str, config_keys: set[str] | None, base: list[Any] | None = None
) -> list[Finding]:
    """Every finding of the changelog. With `base` (the entries at the base ref), older entries are read
    leniently and only appended ones get the strict checks; without it, every entry does."""
    if not isinstance(doc.data, list):
        return [Problem((), "the changelog is a list of entries").at(doc)]
    # Duplicate keys anywhere, old entries too: parsers disagree on which of two equal keys counts (this
    # one keeps the last), so a duplicate slipped into a landed entry changes what other tools read while
    # the entry still compares equal to the base.
    findings = duplicate_findings(doc)
    findings += [p.at(doc) for p in _history_problems(base or [], doc.data)]
    first = len(base) if base is not None else 0
    for i in range(first, len(doc.data)):
        entry, problems = validate(doc, ChangelogEntry, doc.data[i], base=(i,))
        findings += problems
        if entry is None:
            continue
        problem = pr_link_problem(entry.pr_link, repo, (i, "pr-link"))
        if problem:
            findings.append(problem.at(doc))
        findings += [p.at(doc) for check in ENTRY_CHECKS for p in check(entry, (i,))]
        if config_keys is not None:
            findings += [p.at(doc) for p in _unresolved_keys(entry, config_keys, (i,))]
    return findings
