#!/usr/bin/env python3
"""The job's verdict from every node's outcome file: exit with the first failing node's code; stdlib only.

srun exits with the highest task code, which is usually 143 from a node it terminated, not the code
of the node that failed first. Each node script writes $RUN_DIR/state/<node>/outcome as it ends.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass

from failures import line


@dataclass(frozen=True)
class Outcome:
    node: str
    rc: int
    kind: str  # failure | signal (ended by others)
    at: float
    step: str


def read_outcome(run_dir: str, node: str) -> Outcome | None:
    path = os.path.join(run_dir, "state", node, "outcome")
    try:
        with open(path, encoding="utf-8") as handle:
            fields = dict(line.rstrip("\n").split("=", 1) for line in handle if "=" in line)
        return Outcome(node, int(fields["rc"]), fields["kind"], float(fields["at"] or 0), fields["step"])
    except (OSError, KeyError, ValueError):
        return None


def verdict(outcomes: dict[str, Outcome | None], srun_rc: int) -> tuple[int, str]:
    """(exit code, one line): the earliest root-cause failure, else what srun said."""
    failed = [o for o in outcomes.values() if o is not None and o.rc != 0]
    causes = sorted((o for o in failed if o.kind != "signal"), key=lambda o: o.at) or sorted(
        failed, key=lambda o: o.at
    )
    missing = [node for node, o in outcomes.items() if o is None]
    if causes:
        first = causes[0]
        return first.rc, line("verdict", node=first.node, step=first.step, code=first.rc)
    if missing:
        return srun_rc or 1, line("verdict-missing", nodes=", ".join(missing))
    if srun_rc != 0:
        return srun_rc, line("verdict-srun", code=srun_rc)
    return 0, line("verdict-ok")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="outcome.py", description=__doc__.splitlines()[0])
    p.add_argument("--run-dir", required=True)
    p.add_argument("--nodes", required=True, help="comma-separated node names")
    p.add_argument("--srun-exit", required=True, type=int)
    args = p.parse_args(argv)
    outcomes = {node: read_outcome(args.run_dir, node) for node in args.nodes.split(",")}
    code, line = verdict(outcomes, args.srun_exit)
    print(line, file=sys.stderr if code else sys.stdout)
    return code


if __name__ == "__main__":
    sys.exit(main())
