#!/usr/bin/env python3
"""`sync.py wait-http`: poll a URL until it answers 200 (and its JSON holds what --expect says), failing at
once when the process that should answer is gone, and (--stall) when a start has stalled: nothing answers,
its log does not grow and its processes use no CPU time for that long; stdlib only."""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any

import safejson
from failures import EXIT_NOT_READY, EXIT_PROCESS_GONE, EXIT_STALLED, die, line
from httpget import FetchError, fetch
from nodeargs import http_url, key_value, positive_float, seconds_text

PROBE_S = 5.0  # one probe's whole exchange at most: between probes, --pid is checked again
MAX_BODY = 1 << 20  # a health or readiness answer is small; more is not one
MAX_TREE = 4096  # processes of one service read for its CPU time


def _process_gone(pid: int) -> bool:
    """True once pid no longer runs; a zombie counts as gone (its parent has not reaped it yet)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as stat:
            fields = stat.read().rsplit(")", 1)[-1].split()
    except OSError:
        return not os.path.isdir("/proc/self")  # no /proc: trust kill(); else it vanished meanwhile
    return bool(fields) and fields[0] == "Z"


def _progress(pid: int, log: str | None) -> tuple[int, int]:
    """(log size, CPU ticks of the service PID leads): what a starting service moves while it works. A hang
    moves neither; a slow start moves one or the other."""
    try:
        size = os.stat(log).st_size if log else 0
    except OSError:
        size = -1
    ticks = 0
    for stat_path in _service_stats(pid):
        try:
            with open(stat_path, "rb") as stat:
                fields = stat.read().rsplit(b")", 1)[-1].split()
        except OSError:
            continue  # ended while we looked
        if len(fields) > 14:
            ticks += sum(int(x) for x in fields[11:15])  # utime stime cutime cstime
    return size, ticks


def _service_stats(pid: int, proc: str = "/proc") -> list[str]:
    """The stat files of PID and its descendants, found through <proc>/<pid>/task/<tid>/children: the
    service's own few files, every poll. Scanning /proc for its session instead read every process of the
    host four times a second on every node: where many nodes share a host, that grew with their number and
    took a good part of its CPU. A kernel without those files (no CONFIG_PROC_CHILDREN) gets that scan:
    every process of the session PID leads (a service starts in a session of its own)."""
    me = os.getpid()
    if not os.path.exists(f"{proc}/{me}/task/{me}/children"):
        return [f"{e.path}/stat" for e in os.scandir(proc) if e.name.isdigit() and _session(e.path) == pid]
    pids, i = [pid], 0
    while i < min(len(pids), MAX_TREE):  # bounded: pids reused while it is read could look like a loop
        tasks = f"{proc}/{pids[i]}/task"
        try:
            tids = os.listdir(tasks)
        except OSError:
            tids = []  # ended while we looked
        for tid in tids:
            try:
                with open(f"{tasks}/{tid}/children", "rb") as children:
                    pids.extend(int(child) for child in children.read().split())
            except OSError:
                continue
        i += 1
    return [f"{proc}/{p}/stat" for p in pids]


def _session(proc_entry: str) -> int | None:
    """The session of the process whose /proc folder is PROC_ENTRY; None once it has ended."""
    try:
        with open(f"{proc_entry}/stat", "rb") as stat:
            return int(stat.read().rsplit(b")", 1)[-1].split()[3])
    except (OSError, IndexError, ValueError):
        return None


def _lookup(body: Any, path: str) -> tuple[bool, Any]:
    node = body
    for part in path.split("."):
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return False, None
    return True, node


def _matches(actual: Any, expected: str) -> bool:
    if isinstance(actual, bool) or actual is None or isinstance(actual, float):
        return json.dumps(actual) == expected
    if isinstance(actual, int):
        try:
            return actual == int(expected)
        except ValueError:
            return False
    if isinstance(actual, str):
        return actual == expected
    return False  # objects and lists are not scalars


def _unmet_expectation(body: bytes, expects: list[tuple[str, str]]) -> str | None:
    """None when every KEY=VALUE holds against the JSON body, else what did not."""
    if not expects:
        return None
    try:
        doc = safejson.loads(body)
    except ValueError as err:
        return f"body is not JSON we read ({err})"
    for key, expected in expects:
        found, actual = _lookup(doc, key)
        if not found:
            return f"{key} missing"
        if not _matches(actual, expected):
            return f"{key}={json.dumps(actual)}, expected {expected}"
    return None


def _probe(url: str, timeout: float, expects: list[tuple[str, str]]) -> tuple[str | None, bool]:
    """One GET, all of it within TIMEOUT: (None when ready, else a short description of why not; whether
    anything answered HTTP at all)."""
    try:
        response = fetch(url, timeout=timeout, max_bytes=MAX_BODY, read_body=bool(expects))
    except FetchError as err:
        return str(err), False
    if response.status != 200:
        return f"HTTP {response.status}", True
    return _unmet_expectation(response.body, expects), True


def cmd_wait_http(args: argparse.Namespace) -> int:
    name = args.name or args.url
    deadline = time.monotonic() + args.timeout
    last = "no attempt"
    watch = args.stall > 0 and args.pid is not None
    seen, moved = (_progress(args.pid, args.log), time.monotonic()) if watch else (None, 0.0)
    while True:
        if args.pid is not None and _process_gone(args.pid):
            die(f"wait-http: {name} (pid {args.pid}) exited while waiting for {args.url}", EXIT_PROCESS_GONE)
        if watch:
            now, current = time.monotonic(), _progress(args.pid, args.log)
            if current != seen:
                seen, moved = current, now
            elif now - moved >= args.stall:
                die(
                    "wait-http: " + line("no-progress", service=name, seconds=seconds_text(args.stall)),
                    EXIT_STALLED,
                )
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        problem, answered = _probe(args.url, min(PROBE_S, remaining), args.expect)
        if problem is None:
            return 0
        if answered:  # a server that answers is not hung: only a readiness timeout ends that wait
            seen, moved = _progress(args.pid, args.log) if watch else None, time.monotonic()
        if time.monotonic() < deadline or last == "no attempt":
            last = problem  # a probe the end of the wait cut short says less than the one before it
        time.sleep(max(0.0, min(args.interval, deadline - time.monotonic())))
    die(
        "wait-http: "
        + line("not-ready", service=name, url=args.url, timeout=seconds_text(args.timeout), last=last),
        EXIT_NOT_READY,
    )


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "wait-http", help="poll an HTTP endpoint until ready, failing at once if its process dies"
    )
    p.add_argument("--url", required=True, type=http_url, help="http://HOST:PORT/PATH")
    p.add_argument("--timeout", required=True, type=positive_float, help="seconds")
    p.add_argument("--pid", type=int, help="fail with exit 3 as soon as this process is gone")
    p.add_argument(
        "--stall",
        type=float,
        default=0.0,
        help="with --pid: fail with exit 14 once nothing answered at --url, --log did not grow and the pid's "
        "session used no CPU time, for this many seconds (0: never)",
    )
    p.add_argument("--log", help="the service's log, whose growth is progress (with --stall)")
    p.add_argument("--name", help="service name for messages (default: the URL)")
    p.add_argument("--interval", type=positive_float, default=0.25, help="seconds between polls")
    p.add_argument(
        "--expect",
        type=key_value,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="dotted JSON path that must equal VALUE (repeatable)",
    )
    p.set_defaults(func=cmd_wait_http)
