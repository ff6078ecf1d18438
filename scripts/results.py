#!/usr/bin/env python3
"""Node-side results: the validity gate for an AIPerf result, and metrics snapshots; stdlib only.

AIPerf 0.13.0 exits 0 when its failed-request threshold cancels a run, so its exit code alone
cannot be trusted: a result counts only if `check` passes. `scrape` keeps every engine's and the
router's Prometheus counters at the end of the run, when the processes that held them are about to go.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import urllib.error
import urllib.request
from typing import Any

from failures import EXIT_INVALID_RESULT as EXIT_INVALID
from failures import line


def _metric(doc: dict[str, Any], name: str, default: float | None = None) -> float | None:
    value = doc.get(name)
    if isinstance(value, dict) and isinstance(value.get("avg"), (int, float)):
        return float(value["avg"])
    return default


def problems(doc: Any, *, max_error_rate: float, min_duration: float = 0.0) -> list[str]:
    """Why a result is not a trustworthy measurement; empty when it is."""
    if not isinstance(doc, dict):
        return ["not a JSON object"]
    found = []
    if doc.get("was_cancelled") is True or doc.get("is_complete") is False:
        found.append("AIPerf cancelled the run (failed-request threshold reached or interrupted)")
    ok = _metric(doc, "request_count")
    if not ok:
        found.append("no successful request")
    errors = _metric(doc, "error_request_count", 0.0) or 0.0
    total = (ok or 0.0) + errors
    if total and errors / total > max_error_rate:
        found.append(f"{errors:g} of {total:g} requests failed (more than {max_error_rate:.0%})")
    if not _metric(doc, "total_output_tokens"):
        found.append("no output tokens")
    duration = _metric(doc, "benchmark_duration")
    if not duration:
        found.append("no benchmark duration")
    elif duration < min_duration:
        found.append(f"it measured {duration:g} s, less than the {min_duration:g} s a valid run takes")
    return found


def _name_url(text: str) -> tuple[str, str]:
    name, sep, url = text.partition("=")
    if not sep or not name.isidentifier() or not url.startswith("http"):
        raise argparse.ArgumentTypeError(f"expected NAME=http://... (got {text!r})")
    return name, url


def scrape(args: argparse.Namespace) -> int:
    """NAME=URL ...: each URL's body into <out>/NAME.prom; every one must answer."""
    os.makedirs(args.out, exist_ok=True)
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # node-local: no proxies
    failed = []
    for name, url in args.endpoints:
        try:
            with opener.open(url, timeout=10) as response:
                body = response.read()
        except (urllib.error.URLError, OSError, ValueError) as err:
            failed.append(f"{name} ({url}): {getattr(err, 'reason', err)}")
            continue
        with open(os.path.join(args.out, f"{name}.prom"), "wb") as out:
            out.write(body)
    if failed:
        print(f"metrics not collected from {'; '.join(failed)}", file=sys.stderr)
        return EXIT_INVALID
    print(f"metrics of {', '.join(name for name, _ in args.endpoints)} in {args.out}")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="results.py", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    check = sub.add_parser("check", help="exit 10 unless the result is valid")
    check.add_argument("file")
    # No default: the Plan decides the threshold (recipes/benchmark.py), the node script passes it.
    check.add_argument("--max-error-rate", type=float, required=True)
    check.add_argument("--min-duration", type=float, default=0.0, help="seconds; half the requested duration")
    snap = sub.add_parser("scrape", help="save Prometheus metrics of each NAME=URL to <out>/NAME.prom")
    snap.add_argument("--out", required=True)
    snap.add_argument("endpoints", nargs="+", type=_name_url, metavar="NAME=URL")
    args = p.parse_args(argv)
    if args.command == "scrape":
        return scrape(args)
    try:
        with open(args.file, encoding="utf-8") as handle:
            doc = json.load(handle)
    except (OSError, ValueError) as err:
        print(f"result {args.file}: unreadable ({err})", file=sys.stderr)
        return EXIT_INVALID
    found = problems(doc, max_error_rate=args.max_error_rate, min_duration=args.min_duration)
    if found:
        print(line("result-invalid", file=args.file, problems="; ".join(found)), file=sys.stderr)
        return EXIT_INVALID
    requests, tokens = _metric(doc, "request_count"), _metric(doc, "total_output_tokens")
    print(f"result {args.file}: {requests:g} requests, {tokens:g} output tokens")
    return 0


if __name__ == "__main__":
    sys.exit(main())
