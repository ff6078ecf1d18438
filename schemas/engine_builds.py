"""configs/engine-builds.yaml: which engine build each image carries, and which published parser judges
its command lines (`make check-engines`).

A build released on PyPI is judged by that release's own parser and config classes. A build that is not
(OpenBMB's MiniCPM-SALA fork of SGLang) names the nearest published parser, how far it may judge (`parse`:
flags and values only, since the build resolves differently), and declares each flag that parser lacks,
citing where the build defines it: check-engines removes those flags before parsing and reports them as
declared, unchecked, never passes them silently. Lint refuses a config whose image has no build here.
"""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Iterable, Sequence
from functools import cache
from pathlib import Path
from typing import Annotated, Literal, Self

from pydantic import Field, RootModel, ValidationError, model_validator

from .base import AbsPath, Model, RelPath, Version, prose, shape
from .findings import Finding, Problem, did_you_mean, validation_problems
from .images import parse_image
from .known_issues import BuildId, ImageGlob, Url
from .pins import requirements
from .yamlio import Document, Path_, load_file

BUILDS_FILE = "configs/engine-builds.yaml"
Engine = Literal["vllm", "sglang", "atom"]
Flag = Annotated[
    str, shape(r"--[a-z0-9][a-z0-9-]*", "a flag", max_length=64, allowed="--name in lowercase ASCII and '-'")
]
Text = Annotated[str, prose("a one-line text", 500)]


class DeclaredFlag(Model):
    """A flag of this build that its parser lacks: removed, with its values, before the line is parsed, and
    reported as declared, unchecked."""

    flag: Flag
    values: Literal["none", "one", "one-or-more"] = Field(
        description="What follows the flag: nothing (a switch), one value, or one or more."
    )
    source: Url = Field(description="Where the build defines the flag: a source file at a commit.")


class Parser(Model):
    """What judges the build's lines: a PyPI release pinned in pyproject.toml's engine-<package> extra
    (make tools installs it into .venv-engine-<package>), or, for an engine on no reachable registry, a
    recorded description of its parser at a commit (`recorded`: option strings, arity, types, choices)."""

    package: Engine
    version: Version
    depth: Literal["full", "parse"] = Field(
        "full",
        description="full: parser and config classes, as far as they go without a GPU; parse: the "
        "parser only (a build that resolves its arguments differently).",
    )
    recorded: RelPath | None = Field(
        None,
        description="A recorded description of the parser (a JSON file of the repository, made from the "
        "engine's source at `version`): lines are parsed by a parser rebuilt from it, never by the engine's "
        "own code; depth parse only.",
    )

    @model_validator(mode="after")
    def _recorded_parses_only(self) -> Self:
        if self.recorded is not None and self.depth != "parse":
            raise ValueError("a recorded parser judges flags and values only: depth parse")
        return self


class Component(Model):
    """A component an image of the build carries besides the engine (LMCache, Mooncake, amd-quark), with the
    public source of the fact: render takes a recipe's component from the image only when it is here."""

    name: Annotated[
        str,
        shape(
            r"[a-z0-9][a-z0-9._-]*",
            "a distribution name",
            max_length=64,
            allowed="lowercase ASCII, digits and '._-', as in lmcache",
        ),
    ] = Field(description="The Python distribution, as `pip show` names it (lmcache).")
    version: Version | None = Field(
        None, description="The exact version the build installs; absent: a range resolved at build time."
    )
    images: list[ImageGlob] = Field(
        default_factory=list,
        description="The build's images that carry it (globs); empty: every image of the build.",
    )
    how: Text = Field(description="How it gets into the image (a build argument, a requirements pin).")
    source: list[Url] = Field(min_length=1, description="Where that is stated: files at a release or commit.")


class EngineBuild(Model):
    """One engine build: what it is, the images that carry it, what judges its command lines."""

    id: BuildId = Field(description="Named by known issues (affected.builds, fixed-in.builds).")
    engine: Engine = Field(description="The engine the build is; a config's framework must run it.")
    version: Version | None = Field(
        None, description="The engine release it is; absent for a build of an unreleased branch."
    )
    source: Text | None = Field(None, description="Where the build comes from when it is not a release.")
    images: list[ImageGlob] = Field(min_length=1, description="Image references or fnmatch globs.")
    parser: Parser
    extra_flags: list[DeclaredFlag] = Field(
        default_factory=list, description="Flags of the build its parser lacks (a build not on PyPI only)."
    )
    python_path_first: list[AbsPath] = Field(
        default_factory=list,
        max_length=8,
        description="Folders of the image its engines' Python must import from before anything else "
        "(prepended to the image's PYTHONPATH in every engine's environment): a build whose image ships a "
        "library twice, the working copy in a source folder. Why goes in notes.",
    )
    library_path_first: list[AbsPath] = Field(
        default_factory=list,
        max_length=8,
        description="Folders of the image its engines' shared libraries must load from first (prepended to "
        "the image's LD_LIBRARY_PATH in every engine's environment).",
    )
    carries: list[Component] = Field(
        default_factory=list,
        description="Components its images carry that recipes rely on; one a recipe needs and no image lists "
        "must come from a site wheel (launch.yaml node-setup.site-wheels), or render refuses.",
    )
    notes: list[Text] = Field(default_factory=list, description="What a user of this build must know.")

    def component(self, name: str, image: str) -> Component | None:
        """The component NAME as IMAGE of this build carries it; None when it does not."""
        spelled = _spelled(image)
        for c in self.carries:
            if c.name == name and (
                not c.images or any(fnmatch.fnmatchcase(spelled, _spelled_glob(g)) for g in c.images)
            ):
                return c
        return None

    @model_validator(mode="after")
    def _judged_by_what_it_is(self) -> Self:
        if self.parser.package != self.engine:
            raise ValueError(f"a {self.engine} build is judged by a {self.engine} parser")
        released = self.version == self.parser.version
        if released and (self.extra_flags or self.parser.depth != "full"):
            raise ValueError("a released build is judged fully by its own parser: it declares no extra flags")
        if not released and self.source is None:
            raise ValueError("a build judged by another release's parser names its source")
        return self

    @property
    def judge(self) -> str:
        """`vllm==0.33.0`: the pin of the parser that judges it."""
        return f"{self.parser.package}=={self.parser.version}"


class EngineBuilds(RootModel[list[EngineBuild]]):
    """configs/engine-builds.yaml: a list of engine builds."""


# ---------------------------------------------------------------- the file


def tool_extra(package: str) -> str:
    """The pyproject.toml extra (and tool virtualenv .venv-<extra>) that holds an engine's parser."""
    return f"engine-{package}"


def _pinned(build: EngineBuild) -> Problem | None:
    if build.parser.recorded is not None:
        return _recorded_matches(build, build.parser.recorded)
    extra = tool_extra(build.parser.package)
    try:
        pins = requirements(extra)
    except KeyError:
        pins = []
    if build.judge in pins:
        return None
    have = ", ".join(p for p in pins if p.startswith(f"{build.parser.package}==")) or "nothing"
    return Problem(
        ("parser",),
        f"parser {build.judge} is not pinned in pyproject.toml (extra {extra} pins {have})",
        "pin it there (then `make lock-engines`), or name the pinned release",
    )


ROOT = Path(__file__).resolve().parent.parent


def _recorded_matches(build: EngineBuild, recorded: str) -> Problem | None:
    """A recorded parser (`recorded`) is a file of the repository describing this engine at this version."""
    path = ROOT / recorded
    try:
        described = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        return Problem(("parser", "recorded"), f"cannot read {build.parser.recorded}: {err}", "commit it")
    said = (described.get("engine"), described.get("version")) if isinstance(described, dict) else None
    if said != (build.parser.package, build.parser.version):
        return Problem(
            ("parser", "recorded"),
            f"{build.parser.recorded} describes {said}, not {build.parser.package} {build.parser.version}",
            "record the parser of the version named",
        )
    return None


def check_engine_builds(doc: Document) -> tuple[tuple[EngineBuild, ...], list[Finding]]:
    """Valid builds (the first of a repeated id) and every finding of the file, build by build."""
    findings = [
        Finding(
            doc.file, d.line, d.path, f"duplicate key '{d.path[-1]}'", f"first defined on line {d.first_line}"
        )
        for d in doc.duplicates
    ]
    if not isinstance(doc.data, list):
        shape_of = type(doc.data).__name__ if doc.data is not None else "empty"
        return (), findings + [
            Problem((), f"the engine-build list is a list of builds, got {shape_of}").at(doc)
        ]
    builds: list[EngineBuild] = []
    first: dict[str, int] = {}
    for i, item in enumerate(doc.data):
        try:
            build = EngineBuild.model_validate(item)
        except ValidationError as exc:
            findings += [p.at(doc) for p in validation_problems(exc, EngineBuild, (i,))]
            continue
        if build.id in first:
            where = (i, "id")
            findings.append(
                Problem(where, f"duplicate build id {build.id!r}", f"first at [{first[build.id]}]").at(doc)
            )
            continue
        unpinned = _pinned(build)
        if unpinned is not None:
            findings.append(Problem((i, *unpinned.path), unpinned.message, unpinned.hint).at(doc))
        first[build.id] = i
        builds.append(build)
    return tuple(builds), findings


@cache
def shipped() -> tuple[EngineBuild, ...]:
    """The repository's own builds (their findings are lint's to report)."""
    return check_engine_builds(load_file(Path(__file__).resolve().parent.parent / BUILDS_FILE))[0]


# ---------------------------------------------------------------- an image's build


def _spelled(image: str) -> str:
    parsed = parse_image(image)
    if parsed is None:
        return image
    return f"{parsed.registry}/{parsed.repo}" + (f":{parsed.tag}" if parsed.tag else "")


def _spelled_glob(glob: str) -> str:
    """A glob with Docker Hub spelled out, as _spelled does for images ('*' stays every image)."""
    first = glob.split("/", 1)[0]
    has_registry = "/" in glob and ("." in first or ":" in first or first == "localhost")
    return glob if has_registry or "/" not in glob else f"docker.io/{glob}"


def builds_of(image: str, builds: Iterable[EngineBuild]) -> list[EngineBuild]:
    """The builds whose images match `image`, compared with Docker Hub spelled out on both sides."""
    spelled = _spelled(image)
    return [b for b in builds if any(fnmatch.fnmatchcase(spelled, _spelled_glob(p)) for p in b.images)]


def build_of(image: str, builds: Iterable[EngineBuild]) -> EngineBuild | None:
    """The one build of `image` (None when none or several match: lint says which)."""
    found = builds_of(image, builds)
    return found[0] if len(found) == 1 else None


def image_build_problems(
    path: Path_, image: str, engine: str | None, builds: Sequence[EngineBuild]
) -> list[Problem]:
    """An image no build (or several) carries, or a build of another engine than the config runs."""
    found = builds_of(image, builds)
    if not found:
        images = [p for b in builds for p in b.images if engine in (None, b.engine)]
        hint = did_you_mean(image, images) or f"add it to {BUILDS_FILE} with its engine build and parser"
        return [Problem(path, f"image {image} carries no engine build listed in {BUILDS_FILE}", hint)]
    if len(found) > 1:
        ids = ", ".join(b.id for b in found)
        return [
            Problem(path, f"image {image} matches several engine builds: {ids}", "make the globs disjoint")
        ]
    if engine is not None and found[0].engine != engine:
        return [
            Problem(
                path,
                f"image {image} carries {found[0].id}, a {found[0].engine} build; "
                f"the framework runs {engine}",
                "use an image of the engine the framework runs",
            )
        ]
    return []
