#!/usr/bin/env python3
"""`sync.py peers`: one field every rank published at a barrier, in rank order; stdlib only.

The values end up in engine command lines and bash arrays, so each must be exactly one word: printable
ASCII without whitespace, and with --address exactly an IPv4 or IPv6 address (no `10.0.0.1\\r`, no NUL)."""

from __future__ import annotations

import argparse
import ipaddress
from typing import Any

import safejson
from failures import EXIT_PEERS, die, one_line

MAX_TABLE_BYTES = 64 << 20


def _table_values(path: str, field: str) -> list[Any]:
    """FIELD of every rank 0..N-1 in the barrier's --out table; ValueError/KeyError/TypeError/OSError."""
    ranks = safejson.loads(safejson.read_regular(path, MAX_TABLE_BYTES))["ranks"]
    return [ranks[str(rank)]["data"][field] for rank in range(len(ranks))]


def value_problem(value: Any, *, address: bool) -> str | None:
    """Why VALUE cannot be handed on as one word (or, with ADDRESS, as an IP address); None if it can."""
    if not isinstance(value, str) or not value:
        return "not a non-empty string"
    if not all("!" <= c <= "~" for c in value):  # printable ASCII, no space: no \r, NUL, tab or newline
        return "not printable ASCII without whitespace"
    if address:
        if "%" in value:
            return "an IPv6 zone names an interface of one node only"
        try:
            ip = ipaddress.ip_address(value)
        except ValueError:
            return "not an IPv4 or IPv6 address"
        if str(ip) != value:  # leading zeros, upper case, a zone: not the one spelling peers compare
            return f"not written as {ip} (canonical form)"
    return None


def cmd_peers(args: argparse.Namespace) -> int:
    """Print one published field per rank, in rank order; every rank must have it, values distinct."""
    try:
        values = _table_values(args.file, args.field)
    except (OSError, ValueError, KeyError, TypeError) as err:
        problem = one_line(f"{type(err).__name__}: {err}")
        die(f"peers: {args.file} has no {args.field!r} for every rank ({problem})", EXIT_PEERS)
    seen: dict[str, int] = {}
    for rank, value in enumerate(values):
        wrong = value_problem(value, address=args.address)
        if wrong:
            die(
                f"peers: rank {rank} published {args.field}={one_line(repr(value), 80)}: {wrong}",
                EXIT_PEERS,
            )
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
    p.add_argument(
        "--address", action="store_true", help="each value must be exactly an IPv4 or IPv6 address"
    )
    p.set_defaults(func=cmd_peers)
