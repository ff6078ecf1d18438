"""`python -m recipes.engines [--config KEY] [--dir DIR]` (`make check-engines`): judge every engine command
line of every config's variants (rendered now, or the plan.json files under DIR) with the real engine
its image carries, and every benchmark-client line with the client's own configuration resolution (AIPerf:
its flags, dataset detection, scenario lock). One line per command line, `<config>/<variant>/<role>:
ok|REJECTED: <engine's words>`, then `engines: <N> command lines checked, <M> rejected` and `clients: ...`.
Exit 0 all accepted, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

from recipes.render import RenderError, add_configs_option, load, render_config
from schemas.engine_builds import BUILDS_FILE, check_engine_builds
from schemas.yamlio import YamlSyntaxError, load_file

from . import clients
from .judge import DEFAULT_CACHE, ROOT, ToolMissing, Verdict, judge, tools_of
from .lines import PlanError, engine_lines


class Refused(Exception):
    """Nothing to judge (bad input, an invalid config, a missing tool): the lines say why."""

    def __init__(self, *lines: str):
        super().__init__(lines[0] if lines else "")
        self.lines = lines


def engine_builds() -> tuple:
    try:
        builds, findings = check_engine_builds(load_file(ROOT / BUILDS_FILE))
    except YamlSyntaxError as exc:
        raise Refused(f"{exc.file}:{exc.line}: {exc.message}") from None
    if findings:
        raise Refused(*(f.format() for f in findings))
    return builds


def rendered_plans(key: str | None, configs: list[Path] | None = None) -> list[dict]:
    """plan.json of every variant of `key` (every config when None), rendered as `make render` does (from
    `configs`, master files, instead of the repository's when given)."""
    try:
        loaded = load(key, configs)
        keys = [key] if key else sorted(loaded.entries)
        return [json.loads(r.files["plan.json"]) for k in keys for r in render_config(k, loaded)]
    except RenderError as exc:
        raise Refused(*(f.format() for f in exc.findings)) from None


def plans_in(folder: Path, key: str | None) -> list[dict]:
    """Every plan.json below `folder` (a render's out/, one config's, one variant's, a run's recipe/)."""
    if not folder.is_dir():
        raise Refused(f"check-engines: no such folder: {folder}")
    plans = [json.loads(p.read_text()) for p in sorted(folder.rglob("plan.json"))]
    plans = [p for p in plans if key is None or p["config_key"] == key]
    if not plans:
        raise Refused(f"check-engines: no plan.json{f' of {key}' if key else ''} below {folder}")
    return plans


def verdict_line(v: Verdict) -> str:
    if not v.ok:
        return f"{v.line.name}: REJECTED: {v.message} [{v.stage}]"
    notes = []
    p = v.line.build.parser
    if p.recorded is not None:
        notes.append(
            f"{v.line.build.id}: parsed by {p.package} {p.version[:8]}'s parser rebuilt from its recorded "
            f"description ({p.package} is on no registry reachable here: its own code did not run)"
        )
    elif v.line.depth == "parse":
        notes.append(f"{v.line.build.id}: parsed by {p.package} {p.version}'s parser only")
    if v.line.unchecked:
        notes.append("declared, unchecked: " + " ".join(v.line.unchecked))
    return f"{v.line.name}: ok" + (f" ({'; '.join(notes)})" if notes else "")


def summary(verdicts: list[Verdict]) -> str:
    rejected = sum(not v.ok for v in verdicts)
    unchecked = [flag for v in verdicts for flag in v.line.unchecked]
    text = f"engines: {len(verdicts)} command lines checked, {rejected} rejected"
    if unchecked:
        text += f"; {len(unchecked)} declared flags unchecked ({', '.join(dict.fromkeys(unchecked))})"
    return text


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="check-engines", description=__doc__.splitlines()[0])
    p.add_argument("--config", help="one config key (default: every config)")
    add_configs_option(p)
    p.add_argument(
        "--dir", type=Path, help="judge the plan.json files below this folder instead of rendering"
    )
    p.add_argument(
        "--dump-parsers",
        type=Path,
        metavar="DIR",
        help="also describe every engine parser into DIR/<engine>-<version>.json (sim/parity/ keeps them)",
    )
    p.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help=f"default: {DEFAULT_CACHE}")
    return p


def run(args: argparse.Namespace) -> int:
    builds = engine_builds()
    plans = plans_in(args.dir, args.config) if args.dir else rendered_plans(args.config, args.configs)
    try:
        lines = [line for plan in plans for line in engine_lines(plan, builds, args.cache / "stubs")]
    except PlanError as exc:
        raise Refused(f"check-engines: {exc}") from None
    tools = tools_of(builds)
    try:
        verdicts = judge(
            lines, cache=args.cache, dump_dir=args.dump_parsers, tools=tools if args.dump_parsers else ()
        )
    except (ToolMissing, RuntimeError) as exc:
        raise Refused(f"check-engines: {exc}") from None
    for v in verdicts:
        print(verdict_line(v))
    print(summary(verdicts))
    client_verdicts = judge_clients(plans, args.cache)
    for c in client_verdicts:
        print(clients.verdict_line(c))
    print(clients.summary(client_verdicts))
    return 1 if any(not v.ok for v in verdicts) or any(not c.ok for c in client_verdicts) else 0


def judge_clients(plans: list[dict], cache: Path) -> list[clients.ClientVerdict]:
    """Every plan's benchmark-client lines, through the client's own resolution."""
    with tempfile.TemporaryDirectory(prefix="clients-") as tmp:
        try:
            lines = [
                line for plan in plans for line in clients.client_lines(plan, cache / "stubs", Path(tmp))
            ]
        except PlanError as exc:
            raise Refused(f"check-engines: {exc}") from None
        try:
            return clients.judge_clients(lines, cache)
        except (ToolMissing, RuntimeError) as exc:
            raise Refused(f"check-engines: {exc}") from None


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    try:
        return run(args)
    except Refused as exc:
        for line in exc.lines:
            print(line)
        print("engines: nothing judged", file=sys.stderr)
        return 1
    except Exception as exc:  # a bug, not bad input: one line unless debugging
        if os.environ.get("RECIPES_DEBUG"):
            raise
        print(f"check-engines: internal error: {type(exc).__name__}: {exc} (rerun with RECIPES_DEBUG=1)")
        return 3


if __name__ == "__main__":
    sys.exit(main())
