"""Learned, scoped, expiring node exclusion: the node ledger of an out folder (<out>/node-ledger.json).

A node whose failure a job classified as the node's own (a cause of scripts/causes.json with blame
"node": a GPU still in use, GPUs gone, a full disk, a container it cannot remove) is recorded with its
evidence (the run's state/<node>/outcome), its scope (the runner, and the model and framework it ran) and
an expiry. `make submit` learns from the run folders under the same out folder first, then leaves the
recorded nodes of its runner out (`sbatch --exclude`) and says why, but never so many that the job could
not be placed on the runner's nodes. A failure that is not the node's fault (a flag, a config, a known
issue, a peer) never excludes it. `make nodes` lists entries, explains them and clears them.

    python -m recipes.nodes [--out out] [--runner LABEL] [--all]   list (and learn from runs)
    python -m recipes.nodes --clear NODE|all [--runner LABEL] [--why TEXT]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from schemas.runners import Runners
from schemas.yamlio import load_file
from scripts import causes as cause_registry
from scripts import statefiles
from scripts.safejson import JSONError, loads, read_regular

from .render import ROOT_DIR

LEDGER = "node-ledger.json"  # in the out folder, beside the runs/ it learns from
TTL_S = 24 * 3600  # an entry expires after a day: a drained GPU or a cleaned disk must not stay excluded
MAX_OUTCOME_BYTES = 4096
MAX_PLAN_BYTES = 16 << 20
MAX_LEDGER_BYTES = 4 << 20
MAX_RUNS_SCANNED = 10_000  # outcome files per learning pass: a huge out folder is read in bounded time
_NODE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_Text = Annotated[str, Field(min_length=1, max_length=400)]


class Entry(BaseModel):
    """One node fault seen by one job."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    node: str = Field(pattern=_NODE.pattern)
    runner: _Text
    model: _Text
    framework: _Text
    cause: str = Field(pattern=r"[a-z0-9]+(?:-[a-z0-9]+)*")
    detail: str = Field(max_length=400)
    evidence: _Text  # the outcome file that named the cause; the node's logs are beside it
    at: float = Field(ge=0)  # when the node failed (its outcome's time)
    expires: float = Field(ge=0)
    cleared: float | None = None
    cleared_why: str | None = Field(default=None, max_length=400)

    def active(self, now: float) -> bool:
        return self.cleared is None and now < self.expires

    def applies_to(self, runner: str) -> bool:
        """Runner scope: a node's own fault is the node's whatever runs on it next; model and framework are
        recorded so that an entry says what it was running (and a site can narrow it by hand)."""
        return self.runner == runner


class Ledger(BaseModel):
    model_config = ConfigDict(extra="forbid")

    entries: list[Entry] = Field(default_factory=list, max_length=100_000)


class LedgerError(Exception):
    """The ledger cannot be read or written; one line naming the file."""


@dataclass(frozen=True)
class Exclusion:
    """What a submission leaves out, and the recorded faults it could not leave out (the job needs them)."""

    excluded: tuple[Entry, ...]
    kept: tuple[Entry, ...]
    needed: int
    runner_nodes: tuple[str, ...]

    @property
    def nodes(self) -> list[str]:
        return sorted({e.node for e in self.excluded})

    def lines(self) -> list[str]:
        out = [f"excluding {e.node}: {_says(e)}" for e in _latest(self.excluded)]
        for e in _latest(self.kept):
            out.append(
                f"NOT excluding {e.node} ({_says(e)}): the job needs {self.needed} of the runner's "
                f"{len(self.runner_nodes)} nodes"
            )
        if out:
            out.append("(`make nodes` lists and explains these; `make nodes CLEAR=<node>` forgets one)")
        return out


def _says(e: Entry) -> str:
    return f"{e.cause} ({e.detail}) at {_when(e.at)}, until {_when(e.expires)}; evidence {e.evidence}"


def _when(epoch: float) -> str:
    return dt.datetime.fromtimestamp(epoch, dt.UTC).strftime("%Y-%m-%d %H:%M UTC")


def _latest(entries) -> list[Entry]:
    """One entry per node: its latest."""
    by_node: dict[str, Entry] = {}
    for e in sorted(entries, key=lambda e: e.at):
        by_node[e.node] = e
    return [by_node[n] for n in sorted(by_node)]


# ---------------------------------------------------------------- the ledger file


def ledger_path(out: Path) -> Path:
    return Path(out) / LEDGER


def read(out: Path) -> Ledger:
    path = ledger_path(out)
    if not path.exists():
        return Ledger()
    try:
        return Ledger.model_validate(loads(read_regular(str(path), MAX_LEDGER_BYTES)))
    except (OSError, JSONError) as exc:
        raise LedgerError(f"{path}: cannot read it: {exc}") from None
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise LedgerError(
            f"{path}: not a node ledger ({where}: {first['msg']}); move it away to start a new one"
        ) from None


def write(out: Path, ledger: Ledger) -> None:
    path = ledger_path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(ledger.model_dump(), indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)  # whole or not at all: a reader never sees half a ledger


# ---------------------------------------------------------------- learning from run folders


def _outcome(path: Path) -> dict[str, str] | None:
    try:
        text = read_regular(str(path), MAX_OUTCOME_BYTES).decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def _plan(run_dir: Path) -> dict | None:
    try:
        plan = loads(read_regular(str(run_dir / "recipe" / "plan.json"), MAX_PLAN_BYTES))
    except (OSError, JSONError):
        return None
    return plan if isinstance(plan, dict) else None


def learn(out: Path, ledger: Ledger, *, ttl_s: float = TTL_S) -> list[Entry]:
    """New entries from the run folders under OUT (<out>/runs/<key>/<variant>/<id>/state/<node>/outcome):
    a failed node whose cause the registry blames on the node. The registry, not the outcome file, says
    whose fault a cause is. Every outcome is learned once: a cleared entry is not learned again."""
    blame = {c.id: c.blame for c in cause_registry.load()}
    seen = {e.evidence for e in ledger.entries}
    new: list[Entry] = []
    outcomes = sorted((Path(out) / "runs").glob(f"*/*/*/{statefiles.FOLDER}/*/{statefiles.OUTCOME}"))[
        -MAX_RUNS_SCANNED:
    ]
    for path in outcomes:
        if str(path) in seen:
            continue
        fields = _outcome(path)
        if not fields or fields.get("kind") != "failure" or fields.get("rc", "0") == "0":
            continue
        if blame.get(fields.get("cause", "")) != "node":
            continue
        run_dir = path.parents[2]
        plan = _plan(run_dir)
        node = path.parent.name
        if plan is None or not _NODE.fullmatch(node):
            continue  # not a run folder this repository wrote: nothing to learn from it
        try:
            at = float(fields.get("at") or path.stat().st_mtime)
            new.append(
                Entry(
                    node=node,
                    runner=str(plan.get("runner", "")),
                    model=str(plan.get("model", "")) or "?",
                    framework=str(plan.get("engine", "")) or "?",
                    cause=fields["cause"],
                    detail=cause_registry.one_line(fields.get("detail", ""), 400),
                    evidence=str(path),
                    at=at,
                    expires=at + ttl_s,
                )
            )
        except (ValueError, ValidationError):
            continue  # a garbled outcome names no node fault
    return new


def read_learned(out: Path) -> tuple[Ledger, list[Entry]]:
    """OUT's ledger with what its runs teach added (and written back), and what was new."""
    ledger = read(out)
    new = learn(out, ledger)
    if new:
        ledger = Ledger(entries=[*ledger.entries, *new])
        write(out, ledger)
    return ledger, new


# ---------------------------------------------------------------- what a submission leaves out


def runner_nodes(runner: str, runners_file: Path | None = None) -> tuple[str, ...]:
    path = runners_file or ROOT_DIR / "configs" / "runners.yaml"
    runners = Runners.model_validate(load_file(path).data)
    return tuple(runners.labels.get(runner, ()))


def exclusions(
    out: Path, runner: str, needed: int, nodes: tuple[str, ...], *, now: float | None = None
) -> Exclusion:
    """Learn from OUT's runs (the ledger is updated), then what to leave out for a job of NEEDED nodes on
    RUNNER (whose nodes are NODES): the most recently failed nodes are the ones kept in when not all can
    be left out."""
    now = time.time() if now is None else now
    ledger, _ = read_learned(out)
    recorded = [e for e in ledger.entries if e.active(now) and e.applies_to(runner) and e.node in nodes]
    latest = sorted(_latest(recorded), key=lambda e: e.at)  # oldest fault first
    spare = max(0, len(nodes) - needed)
    # The oldest faults are left out first; the most recent ones are what placement cannot spare.
    out_nodes = {e.node for e in latest[:spare]}
    return Exclusion(
        tuple(e for e in recorded if e.node in out_nodes),
        tuple(e for e in recorded if e.node not in out_nodes),
        needed,
        nodes,
    )


def clear(out: Path, node: str, runner: str | None, why: str, *, now: float | None = None) -> list[Entry]:
    """Mark NODE's active entries (every node's for "all") cleared; returns them."""
    now = time.time() if now is None else now
    ledger = read(out)
    done, entries = [], []
    for e in ledger.entries:
        hit = e.active(now) and (node == "all" or e.node == node) and (runner is None or e.runner == runner)
        if hit:
            e = e.model_copy(update={"cleared": now, "cleared_why": why})
            done.append(e)
        entries.append(e)
    if done:
        write(out, Ledger(entries=entries))
    return done


# ---------------------------------------------------------------- make nodes


def describe(e: Entry, now: float, titles: dict[str, str]) -> str:
    state = (
        f"cleared {_when(e.cleared)} ({e.cleared_why})"
        if e.cleared is not None
        else ("expired" if now >= e.expires else f"excluded until {_when(e.expires)}")
    )
    return (
        f"{e.node:12} {e.runner}: {e.cause} -- {titles.get(e.cause, '?')}\n"
        f"             {e.detail}\n"
        f"             seen {_when(e.at)} running {e.model} ({e.framework}); {state}\n"
        f"             evidence: {e.evidence} (the node's logs: {Path(e.evidence).parents[2] / 'logs'}/"
        f"{e.node})"
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="nodes", description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=Path("out"), help="the out folder whose runs and ledger")
    p.add_argument("--runner", help="only this runner's entries (a runners.yaml label)")
    p.add_argument("--all", action="store_true", help="expired and cleared entries too")
    p.add_argument("--clear", metavar="NODE", help="forget NODE's active entries (all: every node's)")
    p.add_argument("--why", default="cleared by hand", help="recorded with --clear")
    args = p.parse_args(argv)
    now = time.time()
    try:
        ledger, new = read_learned(args.out)
        if new:
            print(f"learned {len(new)} node fault(s) from the runs under {args.out}/runs")
        if args.clear:
            done = clear(args.out, args.clear, args.runner, args.why, now=now)
            if not done:
                print(
                    f"nodes: {args.clear} has no active entry to clear (`make nodes ALL=1` lists every one)"
                )
                return 1
            print(f"cleared {len(done)} entr{'y' if len(done) == 1 else 'ies'} of {args.clear}: {args.why}")
            return 0
    except LedgerError as exc:
        print(f"nodes: {exc}", file=sys.stderr)
        return 1
    shown = [
        e
        for e in ledger.entries
        if (args.all or e.active(now)) and (args.runner is None or e.runner == args.runner)
    ]
    if not shown:
        print(f"no node excluded{'' if args.all else ' now'} ({ledger_path(args.out)})")
        return 0
    print(f"{ledger_path(args.out)}: {len(shown)} entr{'y' if len(shown) == 1 else 'ies'}")
    titles = {c.id: c.title for c in cause_registry.load()}
    for e in sorted(shown, key=lambda e: (e.runner, e.node, e.at)):
        print(describe(e, now, titles))
    return 0


if __name__ == "__main__":
    sys.exit(main())
