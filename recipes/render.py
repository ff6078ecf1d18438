"""`make render`: validated config -> Plan per variant -> out/<config-key>/<variant>/ files.

Exit 0 rendered, 1 findings (invalid or unknown config, or a config this renderer cannot launch).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import jinja2
import yaml

from schemas import lint
from schemas.config import MasterEntry
from schemas.findings import Finding, did_you_mean
from schemas.known_issues import KnownIssue
from schemas.launch import LaunchProfiles
from schemas.models import Models
from schemas.runners import Runners

from .benchmark import parse_duration
from .build import Unsupported, build_plan
from .outside import srt_recipe
from .plan import Plan
from .variants import targets
from .words import filters, finalize

ROOT_DIR = Path(__file__).resolve().parent.parent
TEMPLATES = ROOT_DIR / "recipes" / "templates"
TEMPLATES_OF = {"job.sbatch": "job.sbatch.j2", "env.sh": "env.sh.j2"}  # + the node script, server.sh.j2


@dataclass(frozen=True)
class Rendered:
    plan: Plan
    files: dict  # name -> text


def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
        finalize=finalize,  # refuses an unfiltered value that is not a bare word (recipes/words.py)
    )
    env.filters.update(filters())
    return env


def render_plan(plan: Plan, env: jinja2.Environment | None = None) -> Rendered:
    env = env or environment()
    header = (
        f"Rendered from config {plan.config_key}, variant {plan.variant}; do not edit: change the "
        "config and run `make render`."
    )
    # One node runtime for every engine: the engine lives in the Plan's commands, not in the template.
    templates = {**TEMPLATES_OF, plan.script: "server.sh.j2"}
    files = {name: env.get_template(t).render(plan=plan, header=header) for name, t in templates.items()}
    files["plan.json"] = json.dumps(plan.to_json(), indent=2) + "\n"  # in the Plan's own order
    return Rendered(plan, files)


@dataclass(frozen=True)
class Loaded:
    """What lint accepted: entries by key, and the runners, launch profiles and known-issue registry it
    checked them against."""

    entries: dict[str, MasterEntry]
    runners: Runners
    launch: LaunchProfiles
    issues: tuple[KnownIssue, ...]
    models: Models | None = None  # configs/models.yaml as lint checked it (None: the repository's)
    sources: dict = field(default_factory=dict)  # config key -> the master file it came from

    def targets(self, key: str) -> list:
        source = self.sources.get(key)
        return targets(
            key,
            self.entries[key],
            runners=self.runners,
            launch=self.launch,
            issues=self.issues,
            models=self.models,
            recipes=srt_recipe.checkout_of(Path(source)) if source else None,
        )


class RenderError(Exception):
    def __init__(self, findings: list[Finding]):
        super().__init__(f"{len(findings)} finding(s)")
        self.findings = findings

    def report(self, command: str, undone: str) -> int:
        """Every finding on stdout, the count on stderr; the exit code."""
        for finding in self.findings:
            print(finding.format())
        print(f"{command}: {len(self.findings)} finding(s); nothing {undone}", file=sys.stderr)
        return 1


def load(key: str | None, configs: list[Path] | None = None) -> Loaded:
    """Lint every config (strict) against the runners, launch profiles and the known-issue registry; return
    what passed, or raise RenderError with what is wrong. configs: master files to take the entries from
    instead of configs/*-master.yaml (an InferenceX master file as it is); only KEY's findings then count."""
    for path in configs or ():
        if not path.is_file():
            raise RenderError([Finding(str(path), 0, (), "no such master file")])
    paths = configs or lint.default_configs()
    repo = lint.lint_repository(paths)
    report = repo.report
    masters = {str(p) for p in paths}
    if (
        key is not None
        and key not in report.entries
        and not any(f.path[:1] == (key,) for f in report.findings)
    ):
        hint = did_you_mean(key, report.entries) or "see `make lint` for the config keys"
        raise RenderError([Finding("configs", 0, (key,), "unknown config key", hint)])
    relevant = [f for f in report.findings if key is None or f.path[:1] == (key,) or f.file not in masters]
    if relevant:
        raise RenderError(relevant)
    assert repo.runners is not None and repo.launch is not None  # else lint found them invalid: relevant
    sources = {key: file for key, (file, _) in report.defined_at.items()}
    return Loaded(report.entries, repo.runners, repo.launch, repo.issues, repo.models, sources)


def render_config(key: str, loaded: Loaded, *, soak_seconds: int | None = None) -> list[Rendered]:
    out = []
    targets = loaded.targets(key)
    if soak_seconds is not None:
        targets = whole_points(targets)
    for target in targets:
        try:
            out.append(render_plan(build_plan(target, soak_seconds=soak_seconds)))
        except Unsupported as exc:
            # lint (recipes/verdict.py) judged this very build; only an option of this command (a soak
            # longer than the runner's time-limit) is new here
            raise RenderError([Finding("render", 0, exc.at or (key, target.variant), str(exc))]) from None
    return out


def whole_points(targets: list) -> list:
    """The one-allocation targets of a point (agentic: one per concurrency) folded back into one, named as the
    point: a soak watches one allocation for hours under every concurrency of its point."""
    out, seen = [], set()
    for t in targets:
        if t.concurrency is None:
            out.append(t)
            continue
        base = t.variant.removesuffix(f"_conc{t.concurrency}")
        if base not in seen:
            seen.add(base)
            out.append(dataclasses.replace(t, variant=base, concurrency=None))
    return out


def write(rendered: Rendered, root: Path) -> Path:
    folder = inside(root, rendered.plan.config_key, rendered.plan.variant)
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in rendered.files.items():
        path = folder / name
        path.write_text(text)
        path.chmod(0o755 if name in ("job.sbatch", rendered.plan.script) else 0o644)
    return folder


class OutsideOut(ValueError):
    """A folder name (a config key, a variant) would lead out of the output folder."""


def inside(root: Path, *names: str) -> Path:
    """root/names..., refused unless it stays below root: config keys and variant names are folder names,
    and one like `../../x` or `/abs` must never write elsewhere (lint refuses such keys; this holds even
    for a Plan made without lint)."""
    base = root.resolve()
    folder = base.joinpath(*names).resolve()
    if any(n in ("", ".", "..") or "/" in n for n in names) or not folder.is_relative_to(base):
        raise OutsideOut(f"{'/'.join(names)!r} is not a folder name below {root}")
    return folder


RECIPE_ARG = re.compile(r"(?P<file>[^:]+\.ya?ml)(:(?P<selector>[\w.\[\]-]+))?")


def from_recipe(text: str, args: argparse.Namespace) -> tuple[str, Path]:
    """(config key, master file) of a recipe rendered on its own (make render CONFIG=<recipe.yaml>[:section]):
    its master row, written under the output folder for the user to read, and the folder its recipe is read
    from (its InferenceX checkout, else its own folder)."""
    found = RECIPE_ARG.fullmatch(text)
    assert found is not None
    path = Path(found["file"]).resolve()
    if not path.is_file():
        raise RenderError([Finding(text, 0, (), "no such recipe file")])
    root = srt_recipe.checkout_of(path) or path.parent
    pointer = str(path.relative_to(root)) + (f":{found['selector']}" if found["selector"] else "")
    inputs = srt_recipe.RowInputs(
        runner=args.runner,
        model=args.model,
        image=args.image,
        precision=args.precision,
        router_version=args.router_version,
        isl=args.isl,
        osl=args.osl,
        concurrencies=tuple(args.conc or ()),
    )
    try:
        file, merged = srt_recipe.resolve(pointer, root)
        launch = srt_recipe.launch_of(pointer, file, merged)
        row = srt_recipe.master_row(launch, merged, pointer, inputs)
    except srt_recipe.RecipeError as err:
        raise RenderError([Finding(text, 0, (), str(err))]) from None
    key = re.sub(r"[^a-z0-9._-]+", "-", launch.name.lower()).strip("-.") or "recipe"
    master = inside(Path(args.out), "from-recipe") / f"{key}.yaml"
    master.parent.mkdir(parents=True, exist_ok=True)
    master.write_text(yaml.safe_dump({key: row}, sort_keys=False))
    os.environ[srt_recipe.RECIPES_ENV] = str(root)  # where lint and render read the recipe from
    print(f"{master}: the master row of {text}", file=sys.stderr)
    return key, master


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="render", description=__doc__.splitlines()[0])
    p.add_argument(
        "config",
        nargs="?",
        help="config key (default: every config), or an srt-slurm recipe: FILE.yaml[:SECTION]",
    )
    p.add_argument("--out", default="out", help="output folder (default: out)")
    add_configs_option(p)
    add_soak_option(p)
    recipe = p.add_argument_group("a recipe rendered on its own: what its master row needs beyond the recipe")
    recipe.add_argument("--runner", default="cluster:mi355x-amds", help="runner label (default: %(default)s)")
    recipe.add_argument("--model", help="the model's id, when the recipe states no identity.model.repo")
    recipe.add_argument("--image", help="the image, when the recipe states no model.container")
    recipe.add_argument("--precision", help="when the recipe states no model.precision")
    recipe.add_argument("--router-version", help="when the recipe's identity.frameworks does not say it")
    recipe.add_argument("--isl", type=int, help="input tokens of the fixed-seq-len run")
    recipe.add_argument("--osl", type=int, help="output tokens of the fixed-seq-len run")
    recipe.add_argument("--conc", type=int, nargs="+", help="concurrencies to run")
    args = p.parse_args(argv)
    try:
        if args.config and RECIPE_ARG.fullmatch(args.config):
            args.config, master = from_recipe(args.config, args)
            args.configs = [master]
        loaded = load(args.config, args.configs)
        keys = [args.config] if args.config else sorted(loaded.entries)
        rendered = [r for key in keys for r in render_config(key, loaded, soak_seconds=args.soak)]
    except RenderError as exc:
        return exc.report("render", "rendered")
    for r in rendered:
        folder = write(r, Path(args.out))
        print(f"{folder}/  ({describe(r.plan)})")
    return 0


def describe(plan: Plan) -> str:
    """One line: nodes and what the benchmark step runs."""
    concs = ", ".join(str(c) for c in dict.fromkeys(b.concurrency for b in plan.benchmarks))
    if plan.mode == "soak":
        seconds = sum(2 * b.min_duration for b in plan.benchmarks)
        phases = len(plan.benchmarks)
        return f"{plan.slurm.nodes} nodes, soak: {phases} phases, {seconds} s, concurrencies {concs}"
    n = len(plan.benchmarks)
    return f"{plan.slurm.nodes} nodes, {n} {'concurrency' if n == 1 else 'concurrencies'}: {concs}"


def add_configs_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--configs",
        type=Path,
        nargs="+",
        metavar="FILE",
        help="master files to take the config from instead of configs/*-master.yaml (InferenceX's format, "
        "e.g. its amd-master.yaml as it is)",
    )


def add_soak_option(p: argparse.ArgumentParser) -> None:
    def duration(text: str) -> int:
        try:
            return parse_duration(text)
        except ValueError as err:
            raise argparse.ArgumentTypeError(str(err)) from None

    p.add_argument(
        "--soak",
        type=duration,
        metavar="DURATION",
        help="instead of the sweep: phases of varied concurrency and prompt length for DURATION (90m, 2h, "
        "HH:MM:SS) while the engines are watched, for configs that trigger late-onset issues",
    )


if __name__ == "__main__":
    sys.exit(main())
