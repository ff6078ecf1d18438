#!/usr/bin/env python3
"""The job's verdict from every node's outcome file: exit with the first failing node's code; stdlib only.

srun exits with the highest task code, which is usually 143 from a node it terminated, not the code
of the node that failed first. Each node script writes $RUN_DIR/state/<node>/outcome as it ends, with the
cause class of its failure (scripts/causes.json); the verdict's second line names the first failure's:
`cause: <id> (<detail>)`. A first failure that only saw another's (a cause blamed on a peer: a barrier
timeout, the benchmark's requests failing) gives way to a failure of another cause on another node at most
SYMPTOM_WINDOW_S later: the crashed decode, not the benchmark that saw its requests fail a moment before.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import sys
from dataclasses import dataclass

import causes
from failures import line, one_line
from safejson import read_regular


@dataclass(frozen=True)
class Outcome:
    node: str
    rc: int
    kind: str  # failure | signal (ended by others)
    at: float
    step: str
    cause: str = ""  # a cause id (scripts/causes.json); "" for a node ended by others
    detail: str = ""


SYMPTOM_WINDOW_S = 5.0  # the supervisor's poll (1 s) and a teardown's grace, with room
MAX_OUTCOME_BYTES = 4096  # a few key=value lines; a larger file is not one the node script wrote
KINDS = ("failure", "signal")


def read_outcome(run_dir: str, node: str) -> Outcome | None:
    """NODE's outcome; None when it is missing or not what a node script writes: a garbled file must not
    name a wrong first failure (a NaN time sorts anywhere) nor put control characters in the verdict."""
    path = os.path.join(run_dir, "state", node, "outcome")
    try:
        data = read_regular(path, MAX_OUTCOME_BYTES)
        fields = dict(line.split("=", 1) for line in data.decode("utf-8").splitlines() if "=" in line)
        outcome = Outcome(
            node,
            int(fields["rc"]),
            fields["kind"],
            float(fields["at"] or 0),
            fields["step"],
            fields.get("cause", ""),
            one_line(fields.get("detail", "")),
        )
    except (OSError, KeyError, ValueError):
        return None
    return outcome if _well_formed(outcome) else None


_CAUSE_ID = re.compile(r"(?:[a-z0-9]+(?:-[a-z0-9]+)*)?")


def _well_formed(o: Outcome) -> bool:
    """rc an exit status, kind one of KINDS, at a time in seconds, step printable text, cause an id."""
    return (
        0 <= o.rc <= 255
        and 0 <= o.at < math.inf
        and o.kind in KINDS
        and o.step.isprintable()
        and _CAUSE_ID.fullmatch(o.cause) is not None
    )


def verdict(
    outcomes: dict[str, Outcome | None], srun_rc: int, peer_causes: frozenset[str] = frozenset()
) -> tuple[int, str]:
    """(exit code, the verdict's lines): the earliest root-cause failure and its cause, else what srun
    said. PEER_CAUSES: the cause ids blamed on a peer (symptoms, see SYMPTOM_WINDOW_S)."""
    failed = [o for o in outcomes.values() if o is not None and o.rc != 0]
    causes_ = sorted((o for o in failed if o.kind != "signal"), key=lambda o: o.at) or sorted(
        failed, key=lambda o: o.at
    )
    missing = [node for node, o in outcomes.items() if o is None]
    if causes_:
        first, note = causes_[0], ""
        if first.cause in peer_causes:
            root = next(
                (
                    o
                    for o in causes_[1:]
                    if o.cause not in peer_causes
                    and o.node != first.node
                    and o.at - first.at <= SYMPTOM_WINDOW_S
                ),
                None,
            )
            if root is not None:
                note = (
                    f"\n({first.node} failed {root.at - first.at:.2f} s earlier in step '{first.step}', "
                    f"{first.cause}: a symptom of this)"
                )
                first = root
        said = line("verdict", node=first.node, step=first.step, code=first.rc)
        cause = f"{first.cause} ({first.detail})" if first.cause else "unknown (the node named none)"
        return first.rc, f"{said}\n{line('cause', cause=cause)}{note}"
    if missing:
        said = line("verdict-missing", nodes=", ".join(missing))
        return srun_rc or 1, f"{said}\n{line('cause', cause='unknown (no node reported a failure)')}"
    if srun_rc != 0:
        said = line("verdict-srun", code=srun_rc)
        return srun_rc, f"{said}\n{line('cause', cause='unknown (no node reported a failure)')}"
    return 0, line("verdict-ok")


def peer_causes() -> frozenset[str]:
    """The cause ids the registry blames on a peer; none (each failure stands for itself, as before the
    registry) when it cannot be read, which the verdict then says."""
    try:
        return frozenset(c.id for c in causes.load() if c.blame == "peer")
    except causes.CausesError as exc:
        print(f"outcome.py: {exc}: failures are not told from their symptoms", file=sys.stderr)
        return frozenset()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="outcome.py", description=__doc__.splitlines()[0])
    p.add_argument("--run-dir", required=True)
    p.add_argument("--nodes", required=True, help="comma-separated node names")
    p.add_argument("--srun-exit", required=True, type=int)
    args = p.parse_args(argv)
    outcomes = {node: read_outcome(args.run_dir, node) for node in args.nodes.split(",")}
    code, line = verdict(outcomes, args.srun_exit, peer_causes())
    print(line, file=sys.stderr if code else sys.stdout)
    return code


if __name__ == "__main__":
    sys.exit(main())
