#!/usr/bin/env python3
"""`sync.py flush-caches`: empty every engine's prefix caches (GPU radix and host tiers) before a benchmark
runs, so each concurrency is measured cold, as InferenceX's agentic sweep measures it; stdlib only.

SGLang's POST /flush_cache does nothing while a request is in flight (it answers 400): the flush is retried
until it answers 200 "Cache flushed", within --timeout for each engine; an engine that never does fails the
step (the next concurrency would otherwise be measured over the last one's cache)."""

from __future__ import annotations

import argparse
import time
from typing import Any

from failures import EXIT_NOT_FLUSHED, die, line, one_line
from httpget import FetchError, fetch
from nodeargs import http_url, positive_float, seconds_text

FLUSHED = b"Cache flushed"
ANSWER_S, MAX_ANSWER = 10.0, 1 << 16  # one flush's exchange at most; its answer is a sentence


def _flush_once(base: str) -> str | None:
    """None when the engine emptied its caches, else what it said instead."""
    try:
        response = fetch(f"{base}/flush_cache", timeout=ANSWER_S, max_bytes=MAX_ANSWER, data=b"")
    except FetchError as err:
        return str(err)
    if response.status == 200 and FLUSHED in response.body:
        return None
    return f"HTTP {response.status}: {one_line(response.body.decode('utf-8', 'replace'), 120)}"


def flush(base: str, timeout: float, interval: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        last = _flush_once(base)
        if last is None:
            return
        if time.monotonic() + interval > deadline:
            die("flush-caches: " + line("not-flushed", url=base, timeout=seconds_text(timeout), last=last),
                EXIT_NOT_FLUSHED)  # fmt: skip
        time.sleep(interval)


def cmd_flush_caches(args: argparse.Namespace) -> int:
    for base in args.url:
        flush(base.rstrip("/"), args.timeout, args.interval)
    print(f"flush-caches: {len(args.url)} engine(s) emptied their caches")
    return 0


def add_parser(sub: Any) -> None:
    p = sub.add_parser("flush-caches", help="empty every engine's prefix caches before a benchmark")
    p.add_argument(
        "--url", required=True, action="append", type=http_url, help="an engine's http://HOST:PORT"
    )
    p.add_argument("--timeout", required=True, type=positive_float, help="seconds each engine may take")
    p.add_argument("--interval", type=positive_float, default=3.0, help="seconds between tries")
    p.set_defaults(func=cmd_flush_caches)
