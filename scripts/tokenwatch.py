#!/usr/bin/env python3
"""Fail the job when serving stops: requests in flight, and no token produced for GRACE seconds; stdlib.

A hang while serving shows no error: a KV transfer that never completes (Mooncake's producer waits 480 s
for an unpulled block), a wedged engine whose /health stays 200. The benchmark then waits out its whole
duration and the job its time limit. Started as a service on rank 0 before the sweep, this watches every
engine's /metrics while the node's step is a benchmark: while some engine has requests running or
waiting, its prompt and generation token counters must move; when none has moved for GRACE seconds, it
prints what it saw and exits EXIT_NO_TOKENS, which the node's supervisor turns into the job's failure
(cause serving-stalled). An idle engine (no request in flight: the client starting, between runs) is no
stall. It never exits on its own otherwise: the node's teardown stops it.

  tokenwatch.py --state-dir DIR --grace S [--interval 1] NAME=URL...   (names router* are not engines)
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from failures import EXIT_NO_TOKENS, EXIT_USAGE, die, line, one_line
from httpget import FetchError, at_once, fetch
from nodeargs import positive_float
from promtext import total
from results import MAX_METRICS_BYTES
from statefiles import STEP

# Progress and load, per engine family: counters that move with every prefill and decoded token, and the
# gauges of requests it holds.
TOKENS: tuple[str, ...] = (
    "vllm:prompt_tokens_total",
    "vllm:generation_tokens_total",
    "sglang:prompt_tokens_total",
)
TOKENS += ("sglang:generation_tokens_total",)
IN_FLIGHT: tuple[str, ...] = (
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "sglang:num_running_reqs",
)
IN_FLIGHT += ("sglang:num_queue_reqs",)
STEP_PREFIX = "benchmark "


def read_step(state_dir: str) -> str:
    try:
        with open(os.path.join(state_dir, STEP), encoding="utf-8", errors="replace") as handle:
            return handle.read(512).strip()
    except OSError:
        return ""


def sample(name: str, url: str, timeout: float) -> tuple[float, float] | str:
    """(tokens, requests in flight) of one engine, or why it could not be read."""
    try:
        response = fetch(url, timeout=timeout, max_bytes=MAX_METRICS_BYTES)
    except FetchError as err:
        return f"{name} ({url}): {err}"
    if response.status != 200:
        return f"{name} ({url}): HTTP {response.status}"
    text = response.body.decode("utf-8", "replace")
    tokens = sum(total(text, metric) or 0.0 for metric in TOKENS)
    return tokens, sum(total(text, metric) or 0.0 for metric in IN_FLIGHT)


def sample_all(engines: dict[str, str], timeout: float) -> dict[str, tuple[float, float] | str]:
    """Every engine's sample, read at once: a round takes the slowest engine's time, not their sum."""
    names = list(engines)
    found = at_once(lambda name: sample(name, engines[name], timeout), names)
    return {name: found[i] for i, name in enumerate(names)}


def watch(engines: dict[str, str], state_dir: str, grace: float, interval: float) -> int:
    print(f"watching {', '.join(engines)} for token progress while requests are in flight ({grace:g} s)")
    last_tokens: float | None = None
    since = time.monotonic()  # when the tokens last moved, or the watch (re)started
    last_step, unreadable = "", set()
    while True:
        now, step = time.monotonic(), read_step(state_dir)
        if not step.startswith(STEP_PREFIX) or step != last_step:
            last_tokens, since, last_step = None, now, step  # a new run starts its own clock
        if step.startswith(STEP_PREFIX):
            seen = sample_all(engines, min(interval * 5, 10.0))
            for problem in (v for v in seen.values() if isinstance(v, str)):
                if problem not in unreadable:  # said once: a down engine is the supervisor's to report
                    unreadable.add(problem)
                    print(f"cannot read {problem}", flush=True)
            read = {name: v for name, v in seen.items() if not isinstance(v, str)}
            tokens = sum(v[0] for v in read.values())
            in_flight = sum(v[1] for v in read.values())
            if in_flight == 0 or tokens != last_tokens:
                last_tokens, since = tokens, now
            elif now - since >= grace:
                held = ", ".join(f"{name}: {v[1]:g} in flight, {v[0]:g} tokens" for name, v in read.items())
                print(
                    line(
                        "no-tokens",
                        seconds=f"{now - since:.0f}",
                        step=step,
                        count=f"{in_flight:g}",
                        engines=held,
                    ),
                    flush=True,
                )
                return EXIT_NO_TOKENS
        time.sleep(interval)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="tokenwatch.py", description=__doc__.splitlines()[0])
    p.add_argument("--state-dir", required=True, help="the node's state folder (its step file)")
    p.add_argument("--grace", required=True, type=positive_float, help="seconds without a token")
    p.add_argument("--interval", type=positive_float, default=1.0)
    p.add_argument("endpoints", nargs="+", metavar="NAME=URL")
    args = p.parse_args(argv)
    engines = {}
    for item in args.endpoints:
        name, sep, url = item.partition("=")
        if not sep or not name or not url.startswith("http://"):
            die(f"tokenwatch.py: {one_line(item, 200)!r} is not NAME=http://...", EXIT_USAGE)
        if not name.startswith("router"):
            engines[name] = url
    if not engines:
        die("tokenwatch.py: no engine among the endpoints", EXIT_USAGE)
    return watch(engines, args.state_dir, args.grace, args.interval)


if __name__ == "__main__":
    sys.exit(main())
