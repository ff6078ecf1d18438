"""configs/engine-builds.yaml and the tools' locks: each build says what judges it, the known-issue
registry names only builds that exist, and the hashed locks install exactly what pyproject.toml pins."""

from __future__ import annotations

import re

import pytest

from schemas.engine_builds import EngineBuild, check_engine_builds
from schemas.lint import lint_repository
from schemas.pins import requirements
from schemas.yamlio import load_file, load_text

from .conftest import ROOT

LOCKS = ROOT / "recipes" / "engines" / "locks"
TOOLS = ("engine-vllm", "engine-sglang")


def test_the_shipped_file_lints_clean(builds):
    _, findings = check_engine_builds(load_file(ROOT / "configs" / "engine-builds.yaml"))
    assert findings == [] and {b.id for b in builds} >= {
        "vllm-0.33.0",
        "sglang-0.5.23",
        "sglang-minicpm-sala-fork",
    }


def test_every_config_image_has_one_build():
    repo = lint_repository()
    assert repo.report.findings == []


def test_known_issues_name_only_listed_builds(builds):
    ids = {b.id for b in builds}
    for issue in lint_repository().issues:
        named = set(issue.affected.builds) | set(issue.fixed_in.builds if issue.fixed_in else ())
        assert named <= ids, issue.id


def test_the_fork_declares_every_flag_with_its_source(builds):
    fork = next(b for b in builds if b.id == "sglang-minicpm-sala-fork")
    assert fork.parser.depth == "parse" and "--dense-as-sparse" in {f.flag for f in fork.extra_flags}
    assert all(f.source.startswith("https://github.com/") for f in fork.extra_flags)


BUILD = {"id": "x", "engine": "vllm", "version": "0.33.0", "images": ["vllm/x:v1"]}


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"parser": {"package": "sglang", "version": "0.33.0"}}, "a vllm build is judged by a vllm parser"),
        (
            {"parser": {"package": "vllm", "version": "0.33.0", "depth": "parse"}},
            "a released build is judged fully by its own parser",
        ),
        ({"version": None, "parser": {"package": "vllm", "version": "0.33.0"}}, "names its source"),
    ],
)
def test_a_build_says_what_judges_it(changes, message):
    with pytest.raises(ValueError, match=message):
        EngineBuild.model_validate({**BUILD, **changes})


def test_a_parser_not_pinned_in_pyproject_is_a_finding():
    text = (
        "- {id: v, engine: vllm, version: 0.32.0, images: [vllm/x:v0.32.0],\n"
        "   parser: {package: vllm, version: 0.32.0}}\n"
    )
    _, findings = check_engine_builds(load_text(text, "engine-builds.yaml"))
    assert [f.format() for f in findings] == [
        "engine-builds.yaml:2: [0].parser: parser vllm==0.32.0 is not pinned in pyproject.toml (extra "
        "engine-vllm pins vllm==0.33.0) (pin it there (then `make lock-engines`), or name the pinned release)"
    ]


def _locked(tool: str) -> dict:
    text = (LOCKS / f"{tool}.txt").read_text()
    return dict(re.findall(r"^([A-Za-z0-9_.-]+)==(\S+) \\$", text, flags=re.M))


@pytest.mark.parametrize("tool", TOOLS)
def test_lock_inputs_are_the_pinned_extra(tool):
    lines = (LOCKS / f"{tool}.in").read_text().splitlines()
    assert [line for line in lines if not line.startswith("#")] == requirements(tool), (
        "run `make lock-engines`"
    )


@pytest.mark.parametrize("tool", TOOLS)
def test_locks_name_exactly_the_pinned_versions(tool):
    locked = _locked(tool)
    for pin in requirements(tool):
        name, version = pin.split("==")
        assert locked.get(name) == version, (
            f"{LOCKS / tool}.txt locks {name}=={locked.get(name)}, pyproject {pin}"
        )
    assert locked["torch"] == "2.13.0+cpu"  # overrides-<tool>.txt: the CPU wheel, not the CUDA stack


@pytest.mark.parametrize("tool", TOOLS)
def test_locks_carry_hashes_and_no_gpu_stack(tool):
    text = (LOCKS / f"{tool}.txt").read_text()
    excluded = [
        line.strip()
        for line in (LOCKS / f"excludes-{tool}.txt").read_text().splitlines()
        if line and line[0] != "#"
    ]
    pins = re.findall(r"^\S+==\S+ \\$", text, flags=re.M)
    hashed = re.findall(r"^\S+==\S+ \\\n    --hash=sha256:[0-9a-f]{64}", text, flags=re.M)
    assert len(pins) == len(hashed) > 100  # uv pip sync --require-hashes installs nothing else
    assert not [name for name in excluded if re.search(rf"^{re.escape(name)}==", text, flags=re.M)]
