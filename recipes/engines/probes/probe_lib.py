"""What both probes share: the request file, one verdict per line, the engine's message on one line.

Runs inside an engine's virtualenv, beside probe_vllm.py / probe_sglang.py: standard library only.

Request (JSON): {"lines": [{"id", "argv", "env": {NAME: value}, "depth": "full" | "parse"}],
"dump": path or null}. Answer (JSON, written to the path given after the request):
{"engine", "version", "import_s", "results": [{"id", "verdict": "ok" | "rejected", "stage", "message",
"ms"}], "dumped": bool}. The engine's own output goes to stderr; stdout is left to the engine.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path


class Rejected(Exception):
    """The engine refused the line at `stage`; `message` is its own words."""

    def __init__(self, stage: str, message: str):
        super().__init__(message)
        self.stage = stage
        self.message = message


def one_line(text) -> str:
    """An engine message on one line: argparse's usage dropped (its `prog: error:` line kept), pydantic's
    input dumps and documentation links dropped, the rest joined with ' | '."""
    lines = [ln.strip() for ln in str(text).splitlines() if ln.strip()]
    errors = [i for i, ln in enumerate(lines) if ": error: " in ln]
    if errors:
        lines = lines[errors[-1] :]
    lines = [
        re.sub(r" \[type=[^\]]*(\]|$)", "", ln)
        for ln in lines
        if not ln.startswith("For further information visit")
    ]
    return " | ".join(lines)


def exception_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {one_line(exc)}"


def set_defaults(env: dict) -> None:
    """Environment the engine reads at import: only where the caller has not decided already."""
    for key, value in env.items():
        os.environ.setdefault(key, value)


def _with_env(env: dict, check: Callable[[], None]) -> None:
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update({k: str(v) for k, v in env.items()})
    # The line's PYTHONPATH (a runner's connector module) is on the engine's sys.path from its start.
    paths = [p for p in str(env.get("PYTHONPATH", "")).split(os.pathsep) if p]
    sys.path[:0] = paths
    try:
        check()
    finally:
        del sys.path[: len(paths)]
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _verdict(line: dict, check: Callable[[list, str], None]) -> dict:
    started = time.perf_counter()
    try:
        _with_env(line.get("env", {}), lambda: check(list(line["argv"]), line.get("depth", "full")))
        verdict = {"verdict": "ok", "stage": "", "message": ""}
    except Rejected as r:
        verdict = {"verdict": "rejected", "stage": r.stage, "message": one_line(r.message)}
    ms = round((time.perf_counter() - started) * 1000, 1)
    return {"id": line["id"], **verdict, "ms": ms}


def dump_text(description: dict) -> str:
    """A parser description as JSON with one option per line: reviewable diffs when an engine moves."""
    head = {k: v for k, v in description.items() if k != "options"}
    options = ",\n".join("  " + json.dumps(o, sort_keys=True) for o in description["options"])
    return json.dumps(head, sort_keys=True)[:-1] + ', "options": [\n' + options + "\n]}\n"


def main(prepare: Callable[[], tuple[str, Callable, Callable]]) -> int:
    """prepare() imports the engine and returns (version, check(argv, depth), describe_parser())."""
    if len(sys.argv) != 3:
        print(f"usage: {Path(sys.argv[0]).name} REQUEST.json ANSWER.json", file=sys.stderr)
        return 2
    request = json.loads(Path(sys.argv[1]).read_text())
    started = time.perf_counter()
    version, check, describe = prepare()
    import_s = round(time.perf_counter() - started, 1)
    results = [_verdict(line, check) for line in request["lines"]]
    if request.get("dump"):
        Path(request["dump"]).write_text(dump_text(describe()))
    answer = {
        "version": version,
        "import_s": import_s,
        "results": results,
        "dumped": bool(request.get("dump")),
    }
    Path(sys.argv[2]).write_text(json.dumps(answer, indent=1) + "\n")
    return 0
