#!/usr/bin/env python3
"""The addresses the ranks published at a barrier, in rank order (`sync.py barrier --peer-addresses`);
stdlib only.

The values end up in engine command lines and bash arrays, so each must be exactly one word: printable
ASCII without whitespace, and an address exactly an IPv4 or IPv6 address (no `10.0.0.1\\r`, no NUL)."""

from __future__ import annotations

import ipaddress
from typing import Any

from failures import one_line


class PeersError(Exception):
    """Why the published values cannot be handed on; the message names the rank and the value."""


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


def published(table: Any, field: str, *, address: bool, distinct: bool) -> list[str]:
    """FIELD as every rank 0..N-1 of a released barrier TABLE published it; PeersError when a rank lacks
    it, a value is not one word (with ADDRESS: not one IP address) or, with DISTINCT, two ranks share one."""
    try:
        ranks = table["ranks"]
        values = [ranks[str(rank)]["data"][field] for rank in range(len(ranks))]
    except (KeyError, TypeError) as err:
        problem = one_line(f"{type(err).__name__}: {err}")
        raise PeersError(f"no {field!r} for every rank ({problem})") from None
    seen: dict[str, int] = {}
    for rank, value in enumerate(values):
        wrong = value_problem(value, address=address)
        if wrong:
            raise PeersError(f"rank {rank} published {field}={one_line(repr(value), 80)}: {wrong}")
        if distinct and value in seen:
            raise PeersError(f"ranks {seen[value]} and {rank} both published {field}={value}")
        seen[value] = rank
    return values
