#!/usr/bin/env python3
"""Node-side results: the validity gate for an AIPerf result, and metrics snapshots; stdlib only.

AIPerf 0.13.0 exits 0 when its failed-request threshold cancels a run, so its exit code alone
cannot be trusted: a result counts only if `check` passes. `scrape` keeps every engine's and the
router's Prometheus counters at the end of the run, when the processes that held them are about to go.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from typing import Any

import safejson
from bounds import METRICS_S
from failures import EXIT_INVALID_RESULT as EXIT_INVALID
from failures import line, one_line
from httpget import FetchError, at_once, fetch, split_url
from nodeargs import positive_float

MAX_RESULT_BYTES = 64 << 20  # an AIPerf summary is tens of kB
MAX_METRICS_BYTES = 64 << 20  # an engine's /metrics is hundreds of kB; this bounds a broken one
# Statistics recipes/report.py reads from a result besides the gate's own: each must be a number too.
REPORTED = (
    "request_throughput",
    "output_token_throughput",
    "time_to_first_token",
    "inter_token_latency",
    "request_latency",
)
STATS = ("avg", "p50", "p90", "p99")
ERROR_KINDS = 3  # the most frequent kinds of failed request a refusal names
ERROR_TEXT_CHARS = 200  # of one kind's message: an engine's error body can be a whole traceback


def _shown(value: Any) -> str:
    return one_line(repr(value), 60)


def _number_problem(value: Any) -> str | None:
    """Why VALUE is not a count, duration or latency: a finite number >= 0 (a bool is not a number)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"is {_shown(value)}, not a number"
    try:
        finite = math.isfinite(value)
    except OverflowError:  # an integer too large for a float
        finite = False
    if not finite or value < 0:
        return f"is {_shown(value)}, not a finite number >= 0"
    return None


class _Reader:
    """The fields the gate and the report read, each checked for its type. An ill-typed field is a
    problem naming it, and reads as absent so that the gate's own verdicts do not repeat it."""

    def __init__(self, doc: dict[str, Any]) -> None:
        self.doc: dict[str, Any] = doc
        self.found: list[str] = []
        self.ill_typed: set[str] = set()

    def stats(self, name: str, keys: tuple[str, ...] = ("avg",)) -> dict[str, float]:
        """NAME's statistics among KEYS that are present and well typed, as floats. AIPerf writes a
        statistic it could not compute (NaN) as null: null is absent, not ill-typed."""
        holder = self.doc.get(name)
        if holder is None:
            return {}
        if not isinstance(holder, dict):
            self._problem(name, f"{name} is {_shown(holder)}, not an object")
            return {}
        good = {}
        for key in (k for k in keys if holder.get(k) is not None):
            problem = _number_problem(holder[key])
            if problem:
                self._problem(name, f"{name}.{key} {problem}")
            else:
                good[key] = float(holder[key])
        return good

    def avg(self, name: str) -> float | None:
        return self.stats(name).get("avg")

    def flag(self, name: str) -> bool | None:
        value = self.doc.get(name)
        if name in self.doc and not isinstance(value, bool):
            self._problem(name, f"{name} is {_shown(value)}, not true or false")
            return None
        return value

    def _problem(self, name: str, text: str) -> None:
        self.ill_typed.add(name)
        self.found.append(text)

    def absent(self, name: str) -> bool:
        """NAME gave nothing and no type problem either (a problem already names it)."""
        return name not in self.ill_typed


def problems(doc: Any, *, max_error_rate: float, min_duration: float = 0.0) -> list[str]:
    """Why a result is not a trustworthy measurement; empty when it is."""
    if not isinstance(doc, dict):
        return ["not a JSON object"]
    read = _Reader(doc)
    found = read.found  # type problems land here as they are read, in the order of the checks
    ok = read.avg("request_count")
    if not ok and read.absent("request_count"):
        found.append("no successful request")
    errors = read.avg("error_request_count") or 0.0
    total = (ok or 0.0) + errors
    if total and errors / total > max_error_rate:
        kinds = error_kinds(doc.get("error_summary"))
        found.append(
            f"{errors:g} of {total:g} requests failed (more than {max_error_rate:.0%})"
            + (f", as: {kinds}" if kinds else "")
        )
    # after the failed requests: when they made AIPerf cancel, they are the first thing to read
    cancelled, complete = read.flag("was_cancelled"), read.flag("is_complete")
    if cancelled is True or complete is False:
        found.append("AIPerf cancelled the run (failed-request threshold reached or interrupted)")
    if not read.avg("total_output_tokens") and read.absent("total_output_tokens"):
        found.append("no output tokens")
    duration = read.avg("benchmark_duration")
    if not duration:
        if read.absent("benchmark_duration"):
            found.append("no benchmark duration")
    elif duration < min_duration:
        found.append(f"it measured {duration:g} s, less than the {min_duration:g} s a valid run takes")
    for name in REPORTED:
        read.stats(name, STATS)
    return found


def scenario_problems(doc: Any, scenario: str, submission: str) -> list[str]:
    """Why the result did not come out of the scenario lock the plan asked for: the client ran without it,
    or its verdict on the submission is not the one expected (valid: a full-length run on the pinned corpus;
    invalid: a local run, --unsafe-override). Empty when it did."""
    meta = doc.get("metadata") if isinstance(doc, dict) else None
    meta = meta if isinstance(meta, dict) else {}
    found = []
    if meta.get("scenario") != scenario:
        found.append(
            f"the client did not run under scenario {scenario} "
            f"(metadata.scenario {_shown(meta.get('scenario'))})"
        )
    valid = meta.get("submission_valid")
    if submission == "valid" and valid is not True:
        found.append(f"the client marked it no valid submission ({_reasons(meta)})")
    if submission == "invalid" and valid is not False:
        found.append(f"the client marked a run with --unsafe-override valid ({_shown(valid)})")
    return found


def scenario_line(doc: dict) -> str:
    found = doc.get("metadata")
    meta: dict = found if isinstance(found, dict) else {}
    valid = meta.get("submission_valid")
    text = f"scenario {one_line(str(meta.get('scenario')), 60)}: submission_valid={str(valid).lower()}"
    return text + (f" ({_reasons(meta)})" if valid is False else "")


def _reasons(meta: dict) -> str:
    reasons = meta.get("submission_invalid_reasons")
    if isinstance(reasons, list) and reasons:
        return one_line(", ".join(str(r) for r in reasons), 200)
    return "no reason given"


def error_kinds(summary: Any, most: int = ERROR_KINDS) -> str:
    """AIPerf's error_summary as 'COUNT x [HTTP CODE] TYPE: MESSAGE' for its MOST frequent kinds, the
    others counted: why the requests failed, said where the failure is. Entries of another shape are
    skipped: this describes a refusal, it never decides one."""
    kinds = []
    for item in summary if isinstance(summary, list) else ():
        details, count = (item.get("error_details"), item.get("count")) if isinstance(item, dict) else (0, 0)
        if isinstance(details, dict) and type(count) is int and count > 0:
            code, kind, message = details.get("code"), details.get("type"), details.get("message")
            head = [f"HTTP {code}"] if type(code) is int else []
            head += [kind] if isinstance(kind, str) and kind else []
            text = [" ".join(head)] if head else []
            text += [message] if isinstance(message, str) and message.strip() else []
            said = ": ".join(text)
            kinds.append((count, one_line(said or "no message", ERROR_TEXT_CHARS)))
    kinds.sort(key=lambda k: -k[0])
    shown = [f"{count} x {said}" for count, said in kinds[:most]]
    rest = sum(count for count, _ in kinds[most:])
    return "; ".join(shown + ([f"{rest} of other kinds"] if rest else []))


def _read_result(path: str) -> Any:
    """The result document; ValueError or OSError saying why it cannot be read."""
    return safejson.loads(safejson.read_regular(path, MAX_RESULT_BYTES))


def check(args: argparse.Namespace) -> int:
    try:
        doc = _read_result(args.file)
    except (OSError, ValueError) as err:
        print(f"result {args.file}: unreadable ({one_line(err)})", file=sys.stderr)
        return EXIT_INVALID
    found = problems(doc, max_error_rate=args.max_error_rate, min_duration=args.min_duration)
    if args.scenario and not found:
        found = scenario_problems(doc, args.scenario, args.submission)
    if found:
        print(line("result-invalid", file=args.file, problems="; ".join(found)), file=sys.stderr)
        return EXIT_INVALID
    read = _Reader(doc)
    requests, tokens = read.avg("request_count"), read.avg("total_output_tokens")
    scenario = f"; {scenario_line(doc)}" if args.scenario else ""
    print(f"result {args.file}: {requests:g} requests, {tokens:g} output tokens{scenario}")
    return 0


def _scrape_one(name: str, url: str, args: argparse.Namespace) -> str | None:
    """NAME's metrics into <out>/NAME.prom; None, or why not."""
    try:
        response = fetch(url, timeout=args.timeout, max_bytes=MAX_METRICS_BYTES)
    except FetchError as err:
        return f"{name} ({url}): {err}"
    if response.status != 200:
        return f"{name} ({url}): HTTP {response.status}"
    try:
        with open(os.path.join(args.out, f"{name}.prom"), "wb") as out:
            out.write(response.body)
    except OSError as err:
        return f"{name}: cannot write it in {args.out}: {err.strerror}"
    return None


def scrape(args: argparse.Namespace) -> int:
    """NAME=URL ...: each URL's body into <out>/NAME.prom; every one must answer, each within --timeout."""
    try:
        os.makedirs(args.out, exist_ok=True)
    except OSError as err:
        print(f"metrics not collected: cannot create {args.out}: {err.strerror}", file=sys.stderr)
        return EXIT_INVALID
    failed = [why for why in at_once(lambda item: _scrape_one(item[0], item[1], args), args.endpoints) if why]
    if failed:
        print(f"metrics not collected from {'; '.join(failed)}", file=sys.stderr)
        return EXIT_INVALID
    print(f"metrics of {', '.join(name for name, _ in args.endpoints)} in {args.out}")
    return 0


def _name_url(text: str) -> tuple[str, str]:
    name, sep, url = text.partition("=")
    try:
        split_url(url)
    except ValueError:
        sep = ""
    if not sep or not name.isidentifier():
        raise argparse.ArgumentTypeError(f"expected NAME=http://... (got {text!r})")
    return name, url


def _rate(text: str) -> float:
    value = float(text)
    if not 0 <= value <= 1:  # also false for NaN, which would let every failure rate through
        raise argparse.ArgumentTypeError(f"must be between 0 and 1 (got {text!r})")
    return value


def _seconds(text: str) -> float:
    value = float(text)
    if not 0 <= value < math.inf:
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0 (got {text!r})")
    return value


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="results.py", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    gate = sub.add_parser("check", help="exit 10 unless the result is valid")
    gate.add_argument("file")
    # No default: the Plan decides the threshold (recipes/benchmark.py), the node script passes it.
    gate.add_argument("--max-error-rate", type=_rate, required=True)
    gate.add_argument(
        "--min-duration", type=_seconds, default=0.0, help="seconds; half the requested duration"
    )
    gate.add_argument("--scenario", help="the client's scenario lock the result must come from")
    gate.add_argument(
        "--submission",
        choices=("valid", "invalid"),
        default="valid",
        help="with --scenario: the client's verdict the plan expects (invalid: a run with --unsafe-override)",
    )
    gate.set_defaults(func=check)
    snap = sub.add_parser("scrape", help="save Prometheus metrics of each NAME=URL to <out>/NAME.prom")
    snap.add_argument("--out", required=True)
    snap.add_argument(
        "--timeout", type=positive_float, default=METRICS_S, help="seconds for every endpoint, all of it"
    )
    snap.add_argument("endpoints", nargs="+", type=_name_url, metavar="NAME=URL")
    snap.set_defaults(func=scrape)
    args = p.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
