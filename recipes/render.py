"""`make render`: validated config -> Plan per variant -> out/<config-key>/<variant>/ files.

Exit 0 rendered, 1 findings (invalid or unknown config, or a config this renderer cannot launch).
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

import jinja2

from schemas import lint
from schemas.findings import Finding, did_you_mean

from .build import Unsupported, build_plan
from .plan import Plan
from .variants import targets
from .words import bash_argv, bash_word, word

ROOT_DIR = Path(__file__).resolve().parent.parent
TEMPLATES = ROOT_DIR / "recipes" / "templates"
FILES = ("job.sbatch", "server_vllm.sh", "env.sh")
EXECUTABLE = ("job.sbatch", "server_vllm.sh")


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
    )
    env.filters["q"] = lambda v: shlex.quote(str(v))
    env.filters["word"] = lambda w: bash_word(w if isinstance(w, tuple) else word(w))
    env.filters["argv"] = lambda words, indent=2: bash_argv(words, indent)
    return env


def render_plan(plan: Plan, env: jinja2.Environment | None = None) -> Rendered:
    env = env or environment()
    header = (
        f"Rendered from config {plan.config_key}, variant {plan.variant}; do not edit: change the "
        "config and run `make render`."
    )
    files = {name: env.get_template(f"{name}.j2").render(plan=plan, header=header) for name in FILES}
    files["plan.json"] = json.dumps(plan.to_json(), indent=2, sort_keys=True) + "\n"
    return Rendered(plan, files)


class RenderError(Exception):
    def __init__(self, findings: list[Finding]):
        super().__init__(f"{len(findings)} finding(s)")
        self.findings = findings


def load(key: str | None):
    """Lint every config (strict); return (entries, runners) or raise RenderError with what is wrong."""
    report = lint.Report()
    runners = lint.lint_runners(lint.ROOT / lint.DEFAULT_RUNNERS, report)
    lint.lint_configs(lint.default_configs(), runners, "strict", report)
    if (
        key is not None
        and key not in report.entries
        and not any(f.path[:1] == (key,) for f in report.findings)
    ):
        hint = did_you_mean(key, report.entries) or "see `make lint` for the config keys"
        raise RenderError([Finding("configs", 0, (key,), "unknown config key", hint)])
    relevant = [
        f for f in report.findings if key is None or f.path[:1] == (key,) or f.file.endswith("runners.yaml")
    ]
    if relevant:
        raise RenderError(relevant)
    return report.entries, runners


def render_config(key: str, entry, runners) -> list[Rendered]:
    out = []
    for target in targets(key, entry, runners):
        try:
            out.append(render_plan(build_plan(target)))
        except Unsupported as exc:
            raise RenderError([Finding("configs", 0, (key, target.variant), str(exc))]) from None
    return out


def write(rendered: Rendered, root: Path) -> Path:
    folder = root / rendered.plan.config_key / rendered.plan.variant
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in rendered.files.items():
        path = folder / name
        path.write_text(text)
        path.chmod(0o755 if name in EXECUTABLE else 0o644)
    return folder


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="render", description=__doc__.splitlines()[0])
    p.add_argument("config", nargs="?", help="config key (default: every config)")
    p.add_argument("--out", default="out", help="output folder (default: out)")
    args = p.parse_args(argv)
    try:
        entries, runners = load(args.config)
        keys = [args.config] if args.config else sorted(entries)
        rendered = [r for key in keys for r in render_config(key, entries[key], runners)]
    except RenderError as exc:
        for finding in exc.findings:
            print(finding.format())
        print(f"render: {len(exc.findings)} finding(s); nothing rendered", file=sys.stderr)
        return 1
    for r in rendered:
        folder = write(r, Path(args.out))
        print(
            f"{folder}/  ({r.plan.slurm.nodes} nodes, {len(r.plan.benchmarks)} concurrencies: "
            f"{', '.join(str(b.concurrency) for b in r.plan.benchmarks)})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
