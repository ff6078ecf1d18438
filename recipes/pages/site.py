"""`make docs`: docs/recipes/<config-key>.md, one page per master-config key, from the same validated
entry and Plans that launch the job (so the page cannot drift from the launcher).

    python -m recipes.pages [--run RUN_DIR] [--check]

--run first records a verified run into docs/results/ (recipes/verified.py); --check writes nothing and
exits 1 when a page is stale. Pages are deterministic: no time but the recorded runs' own.
"""

from __future__ import annotations

import argparse
import fnmatch
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import jinja2

from schemas import engine_builds as eb
from schemas import known_issues as ki
from schemas import lint
from schemas.yamlio import YamlSyntaxError, load_file

from ..build import Unsupported, build_plan
from ..render import ROOT_DIR, add_configs_option, render_plan
from ..report import table
from ..variants import targets
from . import verified
from .views import grouped, launch_lines, merged_failures, overview, variant_view

PAGES = ROOT_DIR / "docs" / "recipes"
TEMPLATES = Path(__file__).resolve().parent / "templates"
UP = "../../"  # from docs/recipes/ to the repository root


@dataclass(frozen=True)
class Sources:
    """What the pages are made of: the entries lint accepts, and where in configs/ each is written."""

    entries: dict  # key -> MasterEntry, only keys without findings
    runners: object
    launch: object
    issues: tuple
    origin: dict  # key -> (repository-relative file, line)
    skipped: dict  # key -> number of lint findings (no page)
    changelog: list  # perf-changelog entries as plain data
    up: str = UP  # from the pages' folder to the repository root
    configs_arg: str = ""  # what the pages' make commands add to name the master file (CONFIGS=...)


def sources(configs: list[Path] | None = None, folder: Path = PAGES) -> Sources:
    """Lint every config (strict) as `make render` does, keeping the keys without findings: an invalid
    entry loses its own page, not the others'. configs: master files to take the entries from instead of
    configs/*-master.yaml (an InferenceX master file as it is), for pages written into `folder`."""
    repo = lint.lint_repository(configs)
    report = repo.report
    if repo.runners is None or repo.launch is None:
        raise SystemExit("pages: configs/runners.yaml or configs/launch.yaml is invalid: run `make lint`")
    origin: dict[str, tuple[str, int]] = {}
    skipped: dict[str, int] = {}
    for path in configs or lint.default_configs():
        try:
            doc = load_file(path)
        except YamlSyntaxError:
            continue
        for key in doc.data if isinstance(doc.data, dict) else {}:
            origin[str(key)] = (os.path.relpath(path.resolve(), ROOT_DIR), doc.line_of((key,)))
    for f in report.findings:
        if f.path and f.path[0] in origin and _same_file(f.file, origin[f.path[0]][0]):
            skipped[f.path[0]] = skipped.get(f.path[0], 0) + 1
    entries = {k: e for k, e in report.entries.items() if k not in skipped and k in origin}
    up = os.path.relpath(ROOT_DIR, folder.resolve()) + "/"
    named = " CONFIGS=" + " ".join(os.path.relpath(p.resolve(), ROOT_DIR) for p in configs) if configs else ""
    return Sources(
        entries, repo.runners, repo.launch, tuple(repo.issues), origin, skipped, _changelog(), up, named
    )


def _same_file(finding_file: str, relative: str) -> bool:
    """Whether a finding's file (as lint names it) is the repository-relative path `relative`."""
    return Path(finding_file).resolve() == (ROOT_DIR / relative).resolve()


def _changelog() -> list:
    try:
        data = load_file(ROOT_DIR / lint.DEFAULT_CHANGELOG).data
    except (YamlSyntaxError, FileNotFoundError):
        return []
    return [e for e in data if isinstance(e, dict)] if isinstance(data, list) else []


def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )
    env.filters["codes"] = lambda items, sep=", ": sep.join(f"`{i}`" for i in items)
    return env


def page(key: str, src: Sources, results: dict, env: jinja2.Environment | None = None) -> str:
    """The page of one config key; `results`: its recorded verified runs, by variant."""
    env = env or environment()
    entry = src.entries[key]
    common = _common(key, entry, src)
    ts, rendered = [], []
    try:
        ts = targets(key, entry, runners=src.runners, launch=src.launch, issues=src.issues)
        for t in ts:
            rendered.append(render_plan(build_plan(t)))
    except Unsupported as exc:  # `make render` refuses the whole config: the page says why instead
        refused = ts[len(rendered)].variant if len(ts) > len(rendered) else None
        return env.get_template("unsupported.md.j2").render(
            **common, reason=str(exc), refused=refused, variants=[t.variant for t in ts]
        )
    seen: dict = {}
    variants = [variant_view(r, t, seen) for r, t in zip(rendered, ts, strict=True)]
    over = overview(entry, rendered, ts, src.runners)
    return env.get_template("recipe.md.j2").render(
        **common,
        over=over,
        variants=variants,
        launch=launch_lines(key, variants, over["simulated"], src.configs_arg),
        failures=merged_failures(variants),
        smoke=grouped(variants, "smoke"),
        l2=grouped(variants, "l2"),
        results=verified_views(results, rendered),
        issues=issue_views(entry, src.issues),
        build=eb.build_of(entry.image, eb.shipped()),
    )


def _common(key: str, entry, src: Sources) -> dict:
    path, line = src.origin[key]
    changes = [
        {"text": (e.get("description") or [""])[0], "link": e.get("pr-link")}
        for e in src.changelog
        if any(fnmatch.fnmatchcase(key, str(p)) for p in e.get("config-keys") or [])
    ]
    return {
        "key": key,
        "entry": entry,
        "source": path,
        "line": line,
        "up": src.up,
        "configs_arg": src.configs_arg,
        "changes": changes,
    }


def issue_views(entry, issues: tuple) -> list[dict]:
    """Known issues of the config's engine and model, whatever its image: what to watch for."""
    out = []
    recorded = {(r.issue, r.workaround) for r in entry.known_issue_workarounds}
    for issue in issues:
        model = issue.trigger.model
        if issue.engine not in entry.framework.split("-"):
            continue
        if model is not None and not fnmatch.fnmatchcase(entry.model, model):
            continue
        out.append(
            {
                "issue": issue,
                "trigger": ki.trigger_settings(issue),
                "fixed": ki.image_fixed(issue, entry.image, eb.build_of(entry.image, eb.shipped())),
                "fix": ki.fix_hint(issue).split("; or record a workaround")[0],
                "workarounds": [
                    {
                        "w": w,
                        "settings": ki.workaround_settings(w),
                        "performance": ki.performance_note(w),
                        "recorded": (issue.id, w.id) in recorded,
                    }
                    for w in issue.workarounds
                ],
            }
        )
    return out


def verified_views(results: dict, rendered: list) -> list[dict]:
    """Recorded runs by variant, each flagged when the config changed since (another sha256)."""
    current = {r.plan.variant: r.plan.config_sha256 for r in rendered}
    simulated = rendered[0].plan.engine_build == "simulator"
    out = []
    for variant in sorted(results):
        rec = results[variant]
        now = current.get(variant)
        out.append(
            {
                "rec": rec,
                # the report's own table, with its notes on soak runs and workarounds
                "table": table(
                    {**rec, "workarounds": [f"{w['issue']}: {w['workaround']}" for w in rec["workarounds"]]}
                ),
                "gone": now is None,
                "stale": now is not None and now != rec["config_sha256"],
                "now_sha256": now,
                "simulated": simulated,
                "components": ", ".join(f"{k} {v}" for k, v in sorted(rec["components"].items())),
                "workarounds": ", ".join(f"{w['issue']}: {w['workaround']}" for w in rec["workarounds"])
                or "none",
            }
        )
    return out


def render_all(src: Sources, results_root: Path = verified.RESULTS) -> dict[str, str]:
    """File name -> text of every page, and README.md: the index of them."""
    env = environment()
    pages = {
        f"{key}.md": page(key, src, verified.load(key, results_root), env) for key in sorted(src.entries)
    }
    return {**pages, "README.md": index(pages, src)}


def index(pages: dict, src: Sources) -> str:
    """One line per page: its key and its opening sentence (what it serves, where, how)."""
    files = f"`{src.configs_arg.removeprefix(' CONFIGS=')}`" if src.configs_arg else "`configs/*-master.yaml`"
    lines = [
        f"<!-- Generated by `make docs{src.configs_arg and ' CONFIGS=... OUT=...'}`; do not edit. -->",
        "# Recipes",
        "",
        f"One page per config key of {files}, generated from the same config and Plans that",
        f"launch the job. The options every key takes: [config reference]({src.up}docs/config-reference.md).",
        "",
        "| recipe | what it runs |",
        "|---|---|",
    ]
    for name, text in sorted(pages.items()):
        intro = " ".join(text.split("\n\n")[1].split())
        lines.append(f"| [{name.removesuffix('.md')}]({name}) | {intro} |")
    return "\n".join(lines) + "\n"


def stale(pages: dict, folder: Path | None = None) -> list[str]:
    """Pages whose file differs from what the configs give now, and pages of keys no config has."""
    folder = folder or PAGES
    out = [n for n, text in pages.items() if not (folder / n).is_file() or (folder / n).read_text() != text]
    return out + sorted(p.name for p in folder.glob("*.md") if p.name not in pages)


def write(pages: dict, folder: Path | None = None) -> None:
    """The pages into `folder` (docs/recipes: the pages of keys that are gone removed; another folder: only
    written)."""
    own = folder is None
    folder = folder or PAGES
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in pages.items():
        (folder / name).write_text(text)
    for old in folder.glob("*.md") if own else ():
        if old.name not in pages:
            old.unlink()  # a config key that is gone, or no longer valid


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="pages", description=__doc__.splitlines()[0])
    p.add_argument("--run", type=Path, help="record this verified run folder's result first")
    p.add_argument("--check", action="store_true", help="write nothing; exit 1 when docs/recipes is stale")
    add_configs_option(p)
    p.add_argument(
        "--out",
        type=Path,
        help="with --configs: the folder the pages go to, outside the repository (required)",
    )
    args = p.parse_args(argv)
    if args.configs:
        return _external(args.configs, args.out)
    if args.out:
        p.error("--out is for --configs: the pages of configs/ are docs/recipes/")
    src = sources()
    if args.run:
        try:
            key = verified.record_of(args.run)["config_key"]
            if key not in src.entries:
                raise verified.RecordError(f"config key {key!r} of that run has no page (make lint)")
            print(f"recorded {verified.record(args.run).relative_to(ROOT_DIR)}")
        except verified.RecordError as exc:
            print(f"pages: {exc}", file=sys.stderr)
            return 1
    for key, n in sorted(src.skipped.items()):
        print(f"pages: no page for {key}: {n} lint finding(s) (make lint)", file=sys.stderr)
    pages = render_all(src)
    if args.check:
        old = stale(pages)
        if old:
            print(f"stale docs/recipes pages (run `make docs`): {', '.join(old)}", file=sys.stderr)
        return 1 if old else 0
    write(pages)
    where = PAGES.relative_to(ROOT_DIR) if PAGES.is_relative_to(ROOT_DIR) else PAGES
    print(f"wrote {len(pages)} page(s) in {where}/")
    return 0


def _external(configs: list[Path], out: Path | None) -> int:
    """Pages of another project's master file (InferenceX's as it is): written where the user says, never
    into this repository (its config text is that project's)."""
    if out is None or out.resolve().is_relative_to(ROOT_DIR):
        where = "none given" if out is None else f"{out} is inside the repository"
        print(f"pages: --configs needs --out, a folder outside the repository ({where})", file=sys.stderr)
        return 2
    for path in configs:
        if not path.is_file():
            print(f"pages: no such master file: {path}", file=sys.stderr)
            return 1
    src = sources(configs, out)
    for key, n in sorted(src.skipped.items()):
        print(f"pages: no page for {key}: {n} lint finding(s) (make lint CONFIGS=...)", file=sys.stderr)
    pages = render_all(src, results_root=out / "results")
    write(pages, out)
    print(f"wrote {len(pages)} page(s) in {out}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
