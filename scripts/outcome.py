#!/usr/bin/env python3
"""The job's verdict from every node's outcome file: exit with the first failing node's code; stdlib only.

srun exits with the highest task code, which is usually 143 from a node it terminated, not the code
of the node that failed first. Each node script writes $RUN_DIR/state/<node>/outcome as it ends, with the
cause class of its failure (scripts/causes.json); the verdict's second line names the first failure's:
`cause: <id> (<detail>)`. A first failure that only saw another's (a cause blamed on a peer: a barrier
timeout, the benchmark's requests failing) gives way to a failure of another cause on another node at most
SYMPTOM_WINDOW_S later: the crashed decode, not the benchmark that saw its requests fail a moment before.

Clocks: the times compared come from different nodes. SLURM nodes are NTP-synced, typically within
milliseconds; the window assumes at most MAX_SKEW_S. Where clocks cannot tell, causal evidence does: when
no node reported a root failure in the window (an engine still dying when the stop came, say), the router's
own "<role> <url> unhealthy" line on the symptom's node -- the same clock as the symptom -- names the engine,
and the verdict names its node.
"""

from __future__ import annotations

import argparse
import datetime as dt
import ipaddress
import math
import os
import re
import sys
from typing import NamedTuple

import causes
import statefiles
from failures import line, one_line
from safejson import loads, read_regular


class Outcome(NamedTuple):
    node: str
    rc: int
    kind: str  # failure | signal (ended by others)
    at: float
    step: str
    cause: str = ""  # a cause id (scripts/causes.json); "" for a node ended by others
    detail: str = ""


MAX_SKEW_S = 1.0  # assumed bound on the difference of two nodes' clocks (NTP: milliseconds)
SYMPTOM_WINDOW_S = 5.0  # the supervisor's poll (1 s), a teardown's grace (2 s) and MAX_SKEW_S, with room
ROUTER_LOOKBACK_S = 60.0  # a router line older than this before the symptom is not what caused it
MAX_ROUTER_LOG_BYTES = 8 << 20  # read from the end: the lines that matter are the last ones


class RouterSaw(NamedTuple):
    """The router's "<role> <url> unhealthy: <problem>" line, its time on the router's node, and the node
    whose address the URL names."""

    at: float
    role: str
    url: str
    node: str
    problem: str


MAX_OUTCOME_BYTES = 4096  # a few key=value lines; a larger file is not one the node script wrote
KINDS = ("failure", "signal")


def read_outcome(run_dir: str, node: str) -> Outcome | None:
    """NODE's outcome; None when it is missing or not what a node script writes: a garbled file must not
    name a wrong first failure (a NaN time sorts anywhere) nor put control characters in the verdict."""
    path = os.path.join(statefiles.node_dir(run_dir, node), statefiles.OUTCOME)
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
    outcomes: dict[str, Outcome | None],
    srun_rc: int,
    peer_causes: frozenset[str] = frozenset(),
    router_saw: tuple[RouterSaw, ...] = (),
) -> tuple[int, str]:
    """(exit code, the verdict's lines): the earliest root-cause failure and its cause, else what srun
    said. PEER_CAUSES: the cause ids blamed on a peer (symptoms, see SYMPTOM_WINDOW_S); ROUTER_SAW: the
    router's unhealthy lines, the evidence when no node reported the root cause."""
    failed = [o for o in outcomes.values() if o is not None and o.rc != 0]
    causes_ = sorted((o for o in failed if o.kind != "signal"), key=lambda o: o.at) or sorted(
        failed, key=lambda o: o.at
    )
    missing = [node for node, o in outcomes.items() if o is None]
    if causes_:
        first = causes_[0]
        if first.cause in peer_causes:
            root = _root_of(first, causes_[1:], peer_causes)
            if root is not None:
                return root.rc, _said(root) + _symptom_note(first, f"{root.at - first.at:.2f} s earlier")
            saw = _router_saw(first, router_saw)
            if saw is not None:
                said = line(
                    "verdict-router",
                    node=saw.node,
                    role=saw.role,
                    url=saw.url,
                    seconds=f"{first.at - saw.at:.2f}",
                    symptom=first.node,
                )
                cause = (
                    f"engine-unhealthy (the router found the {saw.role} engine at {saw.url} unhealthy: "
                    f"{saw.problem})"
                )
                return first.rc, f"{said}\n{line('cause', cause=cause)}" + _symptom_note(first, "then")
        return first.rc, _said(first)
    if missing:
        said = line("verdict-missing", nodes=", ".join(missing))
        return srun_rc or 1, f"{said}\n{line('cause', cause='unknown (no node reported a failure)')}"
    if srun_rc != 0:
        said = line("verdict-srun", code=srun_rc)
        return srun_rc, f"{said}\n{line('cause', cause='unknown (no node reported a failure)')}"
    return 0, line("verdict-ok")


def _said(first: Outcome) -> str:
    said = line("verdict", node=first.node, step=first.step, code=first.rc)
    cause = f"{first.cause} ({first.detail})" if first.cause else "unknown (the node named none)"
    return f"{said}\n{line('cause', cause=cause)}"


def _symptom_note(symptom: Outcome, when: str) -> str:
    return f"\n({symptom.node} failed {when} in step '{symptom.step}', {symptom.cause}: a symptom of this)"


def _root_of(symptom: Outcome, others: list[Outcome], peer_causes: frozenset[str]) -> Outcome | None:
    """The failure SYMPTOM only saw: another node's, of a cause not blamed on a peer, at most
    SYMPTOM_WINDOW_S after it (those before it sort first already)."""
    return next(
        (
            o
            for o in others
            if o.cause not in peer_causes and o.node != symptom.node and o.at - symptom.at <= SYMPTOM_WINDOW_S
        ),
        None,
    )


def _router_saw(symptom: Outcome, saw: tuple[RouterSaw, ...]) -> RouterSaw | None:
    """The router's last unhealthy line on SYMPTOM's node before it failed (one clock), naming another
    node."""
    before = [
        s for s in saw if s.node != symptom.node and symptom.at - ROUTER_LOOKBACK_S <= s.at <= symptom.at
    ]
    return max(before, key=lambda s: s.at) if before else None


_ROUTER_UNHEALTHY = re.compile(  # proxy/backends.py set_down, in proxy/__main__.py's log format
    r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3}) WARNING \S+: (prefill|decode) "
    r"(https?://(\[[^\]/]+\]|[^\s:/]+)\S*) unhealthy: (.*)$"
)


def read_router_saw(run_dir: str, node: str) -> tuple[RouterSaw, ...]:
    """The unhealthy lines of our proxy's log on NODE (logs/<node>/router.log, its local time), each URL's
    address mapped to a node by NODE's barrier table (state/<node>/peers.json); () when either is missing or
    unreadable (another router logs otherwise: the verdict then goes by the nodes' reports alone)."""
    try:
        table = loads(
            read_regular(os.path.join(statefiles.node_dir(run_dir, node), statefiles.PEERS), 1 << 20)
        )
        by_addr = {
            str(ipaddress.ip_address(entry["data"]["addr"])): str(entry["node"])
            for entry in table["ranks"].values()
        }
        with open(os.path.join(run_dir, "logs", node, "router.log"), "rb") as f:
            f.seek(max(0, os.fstat(f.fileno()).st_size - MAX_ROUTER_LOG_BYTES))
            text = f.read().decode("utf-8", errors="replace")
    except (OSError, ValueError, KeyError, TypeError, AttributeError):  # safejson's errors are ValueErrors
        return ()
    found = []
    for text_line in text.splitlines():
        m = _ROUTER_UNHEALTHY.match(text_line)
        if m is None:
            continue
        try:
            at = dt.datetime.strptime(m[1], "%Y-%m-%d %H:%M:%S").timestamp() + int(m[2]) / 1000
            addr = str(ipaddress.ip_address(m[5].strip("[]")))
        except ValueError:
            continue
        if addr in by_addr:
            found.append(RouterSaw(at, m[3], m[4], by_addr[addr], one_line(m[6])))
    return tuple(found)


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
    nodes = args.nodes.split(",")
    outcomes = {node: read_outcome(args.run_dir, node) for node in nodes}
    saw = tuple(s for node in nodes for s in read_router_saw(args.run_dir, node))
    code, line = verdict(outcomes, args.srun_exit, peer_causes(), saw)
    print(line, file=sys.stderr if code else sys.stdout)
    return code


if __name__ == "__main__":
    sys.exit(main())
