#!/usr/bin/env python3
"""The job's verdict from every node's outcome file: exit with the first failing node's code; stdlib only.

srun exits with the highest task code, which is usually 143 from a node it terminated, not the code
of the node that failed first. Each node script writes $RUN_DIR/state/<node>/outcome as it ends.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from dataclasses import dataclass

from failures import line
from safejson import read_regular


@dataclass(frozen=True)
class Outcome:
    node: str
    rc: int
    kind: str  # failure | signal (ended by others)
    at: float
    step: str


MAX_OUTCOME_BYTES = 4096  # a few key=value lines; a larger file is not one the node script wrote
KINDS = ("failure", "signal")


def read_outcome(run_dir: str, node: str) -> Outcome | None:
    """NODE's outcome; None when it is missing or not what a node script writes: a garbled file must not
    name a wrong first failure (a NaN time sorts anywhere) nor put control characters in the verdict."""
    path = os.path.join(run_dir, "state", node, "outcome")
    try:
        data = read_regular(path, MAX_OUTCOME_BYTES)
        fields = dict(line.split("=", 1) for line in data.decode("utf-8").splitlines() if "=" in line)
        outcome = Outcome(node, int(fields["rc"]), fields["kind"], float(fields["at"] or 0), fields["step"])
    except (OSError, KeyError, ValueError):
        return None
    return outcome if _well_formed(outcome) else None


def _well_formed(o: Outcome) -> bool:
    """rc an exit status, kind one of KINDS, at a time in seconds, step printable text."""
    return 0 <= o.rc <= 255 and 0 <= o.at < math.inf and o.kind in KINDS and o.step.isprintable()


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
