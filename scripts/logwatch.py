#!/usr/bin/env python3
"""Fail the job the moment an engine log shows a known issue's signature; stdlib only.

Started as a service before the engine (so start-up is watched too), it follows the log as it grows
and exits EXIT_KNOWN_ISSUE naming the issue, the line and the fix. Its exit is what the node's service
supervisor turns into the job's failure: a late-onset engine bug (configs/known-issues.yaml) that would
otherwise hang a multi-node run until its time limit ends it in seconds instead. It never exits on its
own otherwise: the node's teardown stops it. A plan or a log it cannot read is a usage error (exit 2).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from collections.abc import Iterator
from typing import NamedTuple

import failures
import safejson
from failures import EXIT_KNOWN_ISSUE, EXIT_USAGE, one_line
from nodeargs import positive_float

READ_BYTES = 1 << 20  # one read; a poll reads on until the end of the log or its time budget
POLL_BUDGET_S = 0.5  # per log and poll: a log growing faster than it is read cannot starve the others
# A line longer than LONG_LINE is matched in windows of that size overlapping by OVERLAP bytes, so memory
# stays bounded; a signature's match (tens of characters) is far shorter than OVERLAP, so none is missed.
LONG_LINE = 1 << 20
OVERLAP = 64 << 10
MAX_PLAN_BYTES = 16 << 20
SIGNATURE_KEYS = ("issue", "title", "regex", "fix")
KNOWN_ISSUES = "configs/known-issues.yaml"  # where a signature comes from, unless it names its source


class WatchError(Exception):
    """A plan or a log the watcher cannot use; one line."""


class Signature(NamedTuple):
    issue: str
    title: str
    fix: str
    pattern: re.Pattern
    source: str = KNOWN_ISSUES


def _signature(index: int, entry: object) -> Signature:
    where = f"log_signatures[{index}]"
    if not isinstance(entry, dict):
        raise WatchError(f"{where} is not an object with {', '.join(SIGNATURE_KEYS)}")
    for key in SIGNATURE_KEYS:
        if not isinstance(entry.get(key), str) or not entry[key]:
            raise WatchError(f"{where}.{key} is not a non-empty string")
    try:
        pattern = re.compile(entry["regex"])
    except re.error as err:
        raise WatchError(f"{where}.regex does not compile: {err}") from None
    if pattern.search(""):
        raise WatchError(f"{where}.regex matches an empty line: it would flag every log")
    source = entry.get("source", KNOWN_ISSUES)
    if not isinstance(source, str) or not source:
        raise WatchError(f"{where}.source is not a non-empty string")
    return Signature(entry["issue"], entry["title"], entry["fix"], pattern, source)


def load_signatures(plan_path: str) -> list[Signature]:
    try:
        plan = safejson.loads(safejson.read_regular(plan_path, MAX_PLAN_BYTES))
    except OSError as err:
        raise WatchError(err.strerror or str(err)) from None
    except ValueError as err:
        raise WatchError(f"not JSON: {err}") from None
    entries = plan.get("log_signatures", []) if isinstance(plan, dict) else None
    if not isinstance(entries, list):
        raise WatchError("log_signatures is not a list (or the plan is not a JSON object)")
    return [_signature(i, entry) for i, entry in enumerate(entries)]


class Follower:
    """New text of a file that may not exist yet: its complete lines, and windows of a line too long to
    keep whole; a partial last line waits for its end."""

    def __init__(self, path: str):
        self.path, self.offset, self.pending, self.line_no = path, 0, b"", 0
        self.caught_up = True

    def pieces(self, budget_s: float) -> Iterator[tuple[int, str]]:
        """(line number, text) of what was written since the last call, read for at most BUDGET_S."""
        deadline = time.monotonic() + budget_s
        try:
            with os.fdopen(safejson.open_regular(self.path), "rb") as handle:
                if os.fstat(handle.fileno()).st_size < self.offset:  # rewritten: read it again
                    self.offset, self.pending = 0, b""
                handle.seek(self.offset)
                self.caught_up = False
                while time.monotonic() < deadline:
                    data = handle.read(READ_BYTES)
                    if not data:
                        self.caught_up = True
                        return
                    self.offset += len(data)
                    yield from self._split(data)
        except FileNotFoundError:
            self.caught_up = True
        except OSError as err:  # a directory, a FIFO, no permission: it will not get better by waiting
            raise WatchError(f"cannot read {self.path}: {err.strerror or err}") from None

    def _split(self, data: bytes) -> Iterator[tuple[int, str]]:
        *complete, rest = (self.pending + data).split(b"\n")
        for raw in complete:
            self.line_no += 1
            yield self.line_no, raw.decode("utf-8", "replace")
        if len(rest) > LONG_LINE:
            yield self.line_no + 1, rest.decode("utf-8", "replace")
            rest = rest[-OVERLAP:]
        self.pending = rest


def match(signatures: list[Signature], text: str) -> tuple[Signature, re.Match] | None:
    for sig in signatures:
        found = sig.pattern.search(text)
        if found:
            return sig, found
    return None


def _excerpt(text: str, found: re.Match, width: int = 400) -> str:
    """The line as one printable line, or in a long one the part around the match."""
    if len(text) <= width:
        return one_line(text, width)
    start = max(0, found.start() - width // 4)
    return "..." + one_line(text[start : start + width], width) + "..."


def report(sig: Signature, path: str, line_no: int, excerpt: str) -> str:
    return (
        failures.line("known-issue", issue=sig.issue, log=os.path.basename(path), line=line_no) + "\n"
        f"  {excerpt}\n"
        f"  issue: {sig.title}\n"
        f"  what to do: {sig.fix}\n"
        f"  ({sig.source}; the engine is not trusted past this point)"
    )


def watch(signatures: list[Signature], paths: list[str], interval: float) -> int:
    followers = [Follower(p) for p in paths]
    print(f"watching {', '.join(paths)} for {', '.join(s.issue for s in signatures)}", flush=True)
    while True:
        for f in followers:
            for line_no, text in f.pieces(POLL_BUDGET_S):
                hit = match(signatures, text)
                if hit is not None:
                    print(report(hit[0], f.path, line_no, _excerpt(text, hit[1])), flush=True)
                    return EXIT_KNOWN_ISSUE
        if all(f.caught_up for f in followers):  # behind on a log: read on at once
            time.sleep(interval)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="logwatch.py", description=__doc__.splitlines()[0])
    p.add_argument("--plan", required=True, help="plan.json: its log_signatures")
    p.add_argument("--log", required=True, action="append", help="a log file to follow (may not exist yet)")
    p.add_argument(
        "--interval", type=positive_float, required=True, help="seconds between reads (the plan's)"
    )
    args = p.parse_args(argv)
    try:
        signatures = load_signatures(args.plan)
    except WatchError as err:
        print(f"logwatch: cannot use the signatures of {args.plan}: {err}", file=sys.stderr)
        return EXIT_USAGE
    if not signatures:
        print(f"logwatch: {args.plan} lists no log signature: nothing to watch", file=sys.stderr)
        return EXIT_USAGE
    try:
        return watch(signatures, args.log, args.interval)
    except WatchError as err:
        print(f"logwatch: {err}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
