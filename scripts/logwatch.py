#!/usr/bin/env python3
"""Fail the job the moment an engine log shows a known issue's signature; stdlib only.

Started as a service before the engine (so start-up is watched too), it follows the log as it grows
and exits EXIT_KNOWN_ISSUE naming the issue, the line and the fix. Its exit is what the node's service
supervisor turns into the job's failure: a late-onset engine bug (configs/known-issues.yaml) that would
otherwise hang a multi-node run until its time limit ends it in seconds instead. It never exits on its
own otherwise: the node's teardown stops it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time

import failures
from failures import EXIT_KNOWN_ISSUE, EXIT_USAGE

CHUNK = 1 << 20


def load_signatures(plan_path: str) -> list[tuple[dict, re.Pattern]]:
    with open(plan_path, encoding="utf-8") as handle:
        plan = json.load(handle)
    return [(s, re.compile(s["regex"])) for s in plan.get("log_signatures", [])]


class Follower:
    """New complete lines of a file that may not exist yet; a partial last line waits for its end."""

    def __init__(self, path: str):
        self.path, self.offset, self.pending, self.line_no = path, 0, b"", 0

    def lines(self):
        try:
            with open(self.path, "rb") as handle:
                if os.fstat(handle.fileno()).st_size < self.offset:  # rewritten: read it again
                    self.offset, self.pending = 0, b""
                handle.seek(self.offset)
                data = handle.read(CHUNK)
        except FileNotFoundError:
            return
        self.offset += len(data)
        *complete, self.pending = (self.pending + data).split(b"\n")
        for raw in complete:
            self.line_no += 1
            yield self.line_no, raw.decode("utf-8", "replace")


def match(signatures, line: str):
    for sig, pattern in signatures:
        if pattern.search(line):
            return sig
    return None


def report(sig: dict, path: str, line_no: int, text: str) -> str:
    return (
        failures.line("known-issue", issue=sig["issue"], log=os.path.basename(path), line=line_no) + "\n"
        f"  {text.strip()[:400]}\n"
        f"  issue: {sig['title']}\n"
        f"  what to do: {sig['fix']}\n"
        f"  (configs/known-issues.yaml; the engine is not trusted past this point)"
    )


def watch(signatures, paths: list[str], interval: float) -> int:
    followers = [Follower(p) for p in paths]
    print(f"watching {', '.join(paths)} for {', '.join(s['issue'] for s, _ in signatures)}", flush=True)
    while True:
        for f in followers:
            for line_no, line in f.lines():
                sig = match(signatures, line)
                if sig is not None:
                    print(report(sig, f.path, line_no, line), flush=True)
                    return EXIT_KNOWN_ISSUE
        time.sleep(interval)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="logwatch.py", description=__doc__.splitlines()[0])
    p.add_argument("--plan", required=True, help="plan.json: its log_signatures")
    p.add_argument("--log", required=True, action="append", help="a log file to follow (may not exist yet)")
    p.add_argument("--interval", type=float, default=float(os.environ.get("POLL_INTERVAL", "1")))
    args = p.parse_args(argv)
    try:
        signatures = load_signatures(args.plan)
    except (OSError, ValueError, KeyError, re.error) as err:
        print(f"logwatch: cannot read the signatures of {args.plan}: {err}", file=sys.stderr)
        return EXIT_USAGE
    if not signatures:
        print(f"logwatch: {args.plan} lists no log signature: nothing to watch", file=sys.stderr)
        return EXIT_USAGE
    return watch(signatures, args.log, args.interval)


if __name__ == "__main__":
    sys.exit(main())
