#!/usr/bin/env python3
"""Node-side resume list: the benchmarks whose results an earlier run already collected; stdlib only.

`make submit RESUME=<run>` writes resume.json into the NEW run folder (recipes/resume.py); the rendered
node script is the same with or without it (the lock's rendered_sha256 must match), so what to skip is
read here, at run time. `reused` prints one `NAME RUN` line per reused benchmark (RUN: the run that measured
it); no file means a fresh run and prints nothing. The values reach bash, so each must be one word.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

import safejson
from failures import EXIT_USAGE, die, one_line
from peers import value_problem

MAX_RESUME_BYTES = 1 << 20  # a few hundred bytes per concurrency


def reused(doc: Any) -> list[tuple[str, str]]:
    """(name, measured_in) of every point in a resume.json document; ValueError naming what is wrong."""
    points = doc.get("points") if isinstance(doc, dict) else None
    if not isinstance(points, list):
        raise ValueError("no list of points")
    out = []
    for i, point in enumerate(points):
        if not isinstance(point, dict):
            raise ValueError(f"points[{i}] is not an object")
        for key in ("name", "measured_in"):
            problem = value_problem(point.get(key), address=False)
            if problem:
                raise ValueError(f"points[{i}].{key}={one_line(repr(point.get(key)), 80)}: {problem}")
        out.append((point["name"], point["measured_in"]))
    return out


def cmd_reused(args: argparse.Namespace) -> int:
    if not os.path.lexists(args.file):
        return 0  # not a resumed run: every benchmark runs
    try:
        points = reused(safejson.loads(safejson.read_regular(args.file, MAX_RESUME_BYTES)))
    except (OSError, ValueError) as err:
        die(f"resume: {args.file}: {one_line(err)}", EXIT_USAGE)
    for name, measured_in in points:
        print(f"{name} {measured_in}")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="resume.py", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command")
    sub.required = True
    cmd = sub.add_parser("reused", help="print `NAME RUN` per benchmark an earlier run already collected")
    cmd.add_argument("--file", required=True, help="the run folder's resume.json (absent: a fresh run)")
    cmd.set_defaults(func=cmd_reused)
    args = p.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
