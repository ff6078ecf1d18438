#!/usr/bin/env python3
"""`sync.py peers`: one field every rank published at a barrier, in rank order; stdlib only."""

from __future__ import annotations

import argparse
import json
from typing import Any

from failures import EXIT_PEERS, die


def cmd_peers(args: argparse.Namespace) -> int:
    """Print one published field per rank, in rank order; every rank must have it, values distinct."""
    try:
        with open(args.file, encoding="utf-8") as table:
            ranks = json.load(table)["ranks"]
        values = [ranks[str(rank)]["data"][args.field] for rank in range(len(ranks))]
    except (OSError, ValueError, KeyError, TypeError) as err:
        problem = f"{type(err).__name__}: {err}"
        die(f"peers: {args.file} has no {args.field!r} for every rank ({problem})", EXIT_PEERS)
    seen: dict[str, int] = {}
    for rank, value in enumerate(values):
        if not isinstance(value, str) or not value or "\n" in value:
            die(f"peers: rank {rank} published {args.field}={value!r}", EXIT_PEERS)
        if args.distinct and value in seen:
            die(f"peers: ranks {seen[value]} and {rank} both published {args.field}={value}", EXIT_PEERS)
        seen[value] = rank
    print("\n".join(values))
    return 0


def add_parser(sub: Any) -> None:
    p = sub.add_parser("peers", help="print a field every rank published at a barrier, one line per rank")
    p.add_argument("--file", required=True, help="the barrier's --out table")
    p.add_argument("--field", required=True)
    p.add_argument("--distinct", action="store_true", help="fail if two ranks published the same value")
    p.set_defaults(func=cmd_peers)
