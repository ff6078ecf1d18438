"""Accept/reject cases over the baseline entry, shared by the tables of test_rules.py, test_inferencex.py,
test_shapes.py and test_bounds.py: each case names the rule (a function of schemas/rules_inferencex.py or
schemas/rules_strict.py, by name in schemas.rules.RULES) or "model" (a constraint of the models) that must
refuse it, the key path below the config key, and fragments of the message and hint."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from schemas import rules
from schemas.config import MasterEntry
from schemas.findings import format_path
from schemas.launch import LaunchProfiles
from schemas.runners import Runners
from schemas.yamlio import load_text

from .conftest import (
    KEY,
    SS,
    D,
    P,
    apply,
    baseline,
    dump,
    engine_builds,
    expect,
    known_issues,
    launch_data,
    lint_entry,
    models,
    runners_data,
    shown,
)

AMDS = "cluster:mi355x-amds"
LOCAL = "cluster:local-sim"
IX = {"profile": "inferencex"}
AGENTIC = "scenarios.agentic-coding[0]"
LMC = f"{SS}.kv-offload-backend"
FSS = "scenarios.fixed-seq-len[0].search-space[0]"  # the baseline's point once FIXED_SEQ_LEN moved it


def s(path, value):
    return ("set", path, value)


def d(path):
    return ("del", path)


# The baseline as a single-node agentic entry: one tp=8 server, no offloading.
SINGLE_NODE = [
    *(s("multinode", False), s("disagg", False), d("router"), d("kv-p2p-transfer")),
    *(d(P), d(D), d(LMC), s(f"{SS}.kv-offloading", "none"), s(f"{SS}.tp", 8)),
]
# The baseline's point as a fixed-seq-len 8k/1k scenario (no kv offloading: an agentic setting).
FIXED_SEQ_LEN = [
    d(f"{SS}.kv-offloading"),
    d(LMC),
    ("rename", "scenarios.agentic-coding", "fixed-seq-len"),
    d("scenarios.fixed-seq-len[0].dram-utilization"),
    s("scenarios.fixed-seq-len[0].isl", 8192),
    s("scenarios.fixed-seq-len[0].osl", 1024),
]


@dataclass(frozen=True)
class Case:
    rule: str  # a rule's name (schemas.rules.RULES), or "model" for a pydantic constraint
    ops: tuple  # mutations of the baseline entry (conftest.apply)
    path: str = ""
    fragment: str = ""
    hint: str | None = None
    profile: str = "strict"
    runner_ops: tuple = ()  # mutations of configs/runners.yaml
    launch_ops: tuple = ()  # mutations of configs/launch.yaml
    builds: bool = False  # also against configs/engine-builds.yaml (only its rule's cases need it)
    models: bool = False  # also against configs/models.yaml (the rules that judge by a model's facts)


def cases(rule: str, *rows) -> list:
    """Rows (id, ops[, path, fragment[, hint]][, {options}]) of one rule as pytest params."""
    out = []
    for id, ops, *rest in rows:
        options = rest.pop() if rest and isinstance(rest[-1], dict) else {}
        out.append(pytest.param(Case(rule, tuple(ops), *rest, **options), id=id))
    return out


def add(settings_path, index, item):
    """Set additional-settings[index] (appended when index is the list's length)."""
    return s(f"{settings_path}[{index}]", item)


# The runner facts the arithmetic of the tables relies on (configs/runners.yaml holds these today).
PINNED = (
    s(f"labels.{AMDS}", [f"mi355x-amds_0{i}" for i in range(9)]),
    s(f"hardware.{AMDS}.gpus-per-node", 8),
    s(f"hardware.{AMDS}.available-cpu-dram-mib", 3_095_781),
    s(f"hardware.{LOCAL}.gpus-per-node", 8),
    s(f"hardware.{LOCAL}.available-cpu-dram-mib", 4096),
)


def _build(case: Case) -> tuple[dict, dict, dict]:
    launch = apply(launch_data(), case.launch_ops)
    return apply(baseline(), case.ops), apply(runners_data(), PINNED + case.runner_ops), launch


def check_reject(case: Case) -> None:
    """The case's finding is there; a rule's case is said by that rule itself, not by another one."""
    entry, runners, launch = _build(case)
    builds = engine_builds() if case.builds else None
    found = models() if case.models else None
    findings = lint_entry(
        entry, profile=case.profile, runners=runners, launch=launch, builds=builds, models=found
    )
    expect(findings, case.path, case.fragment, case.hint)
    if case.rule != "model":
        validated = MasterEntry.model_validate(load_text(dump(entry)).data)
        profiles = LaunchProfiles.model_validate(launch)
        hardware = Runners.model_validate(runners)
        ctx = rules.Context(KEY, validated, hardware, known_issues(), profiles, builds, found)
        own = [format_path(p.path[1:]) for p in rules.RULES[case.rule](ctx) if case.fragment in p.message]
        assert own == [case.path]


def check_accept(case: Case) -> None:
    entry, runners, launch = _build(case)
    builds = engine_builds() if case.builds else None
    found = models() if case.models else None
    findings = lint_entry(
        entry, profile=case.profile, runners=runners, launch=launch, builds=builds, models=found
    )
    assert findings == [], shown(findings)
