"""Judge benchmark-client lines with AIPerf's own configuration resolution: what `aiperf profile` does before
it contacts a server (its command line, its config conversion, then its pre-run resolver chain: tokenizer,
datasets, the scenario lock, timing). A line the client would refuse after the engines have loaded is refused
here, in its own words.

Runs inside the client's virtualenv (.venv-bench), as a file: standard library and AIPerf only. AIPerf reads
its AIPERF_* environment once, at import, so one process judges lines of one environment (the request's
`env`).

Request (JSON): {"env": {NAME: value}, "lines": [{"id", "argv": [words after `aiperf`]}]}. Answer (JSON):
{"version", "import_s", "results": [{"id", "verdict": "ok" | "rejected", "stage", "message", "ms",
"scenario": {"name", "submission_valid", "violations": [flag...]} | null, "datasets": {name: hf_dataset}}]}.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


class Rejected(Exception):
    def __init__(self, stage: str, message: str):
        super().__init__(message)
        self.stage, self.message = stage, message


def _one_line(text: Any) -> str:
    lines = [ln.strip() for ln in str(text).splitlines() if ln.strip()]
    return " | ".join(lines)[:1500]


def _parse(argv: list[str]) -> Any:
    """The CLIConfig cyclopts builds from the words, as `aiperf profile` gets it."""
    from aiperf.cli import app

    try:
        _, bound, _ = app.parse_args(argv, exit_on_error=False, print_error=False)
    except BaseException as exc:  # cyclopts' own errors, whatever their class
        raise Rejected("command line", f"{type(exc).__name__}: {_one_line(exc)}") from None
    if "cli_config" not in bound.arguments:
        raise Rejected("command line", f"not a profile command line: {' '.join(argv[:2])}")
    return bound.arguments["cli_config"]


def _runs(cli_config: Any) -> list:
    """The BenchmarkRuns `aiperf profile` would start, resolved by its own resolver chain."""
    from aiperf.cli_runner import _make_benchmark_run
    from aiperf.config.flags.resolver import resolve_config
    from aiperf.config.loader import build_benchmark_plan
    from aiperf.config.resolution.resolvers import build_default_resolver_chain

    try:
        plan = build_benchmark_plan(resolve_config(cli_config, cli_config.config_file))
    except Exception as exc:
        raise Rejected("configuration", f"{type(exc).__name__}: {_one_line(exc)}") from None
    runs = []
    for config in plan.configs:
        run = _make_benchmark_run(config, random_seed=42)
        try:
            build_default_resolver_chain().resolve_all(run)
        except Exception as exc:
            raise Rejected("resolution", f"{type(exc).__name__}: {_one_line(exc)}") from None
        runs.append(run)
    return runs


def _scenario(run: Any) -> dict | None:
    outcome = getattr(run.resolved, "scenario_outcome", None)
    if outcome is None or outcome.scenario_name is None:
        return None
    return {
        "name": outcome.scenario_name,
        "submission_valid": bool(outcome.submission_valid),
        "violations": sorted({v.flag for v in outcome.violations}),
    }


def _datasets(run: Any) -> dict:
    """Each public dataset the run reads, and the Hugging Face dataset AIPerf's plugin table names for it."""
    from aiperf.config.dataset import PublicDataset
    from aiperf.plugin import plugins

    out = {}
    for ds in run.cfg.datasets:
        if isinstance(ds, PublicDataset):
            meta = plugins.get_public_dataset_loader_metadata(ds.dataset)
            out[str(ds.dataset)] = getattr(meta, "hf_dataset_name", None)
    return out


def judge(line: dict) -> dict:
    started = time.perf_counter()
    result: dict[str, Any] = {"id": line["id"], "verdict": "ok", "stage": "", "message": ""}
    try:
        runs = _runs(_parse(list(line["argv"])))
        result["scenario"] = _scenario(runs[0]) if runs else None
        result["datasets"] = _datasets(runs[0]) if runs else {}
    except Rejected as r:
        result.update(verdict="rejected", stage=r.stage, message=r.message, scenario=None, datasets={})
    result["ms"] = round((time.perf_counter() - started) * 1000, 1)
    return result


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(f"usage: {Path(sys.argv[0]).name} REQUEST.json ANSWER.json", file=sys.stderr)
        return 2
    request = json.loads(Path(argv[0]).read_text())
    os.environ.update({k: str(v) for k, v in request.get("env", {}).items()})
    started = time.perf_counter()
    from importlib.metadata import version

    import aiperf.cli  # noqa: F401 -- the import the line's first word pays for, timed apart

    import_s = round(time.perf_counter() - started, 1)
    with tempfile.TemporaryDirectory() as home:  # the resolver writes artifact folders: never the caller's
        os.chdir(home)
        results = [judge(line) for line in request["lines"]]
    answer = {"version": version("aiperf"), "import_s": import_s, "results": results}
    Path(argv[1]).write_text(json.dumps(answer, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
