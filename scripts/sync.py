#!/usr/bin/env python3
"""Node-side sync, one command per job: addresses (address.py), peers (peers.py), the pinned-version check
(preflight.py), the pinned tools the image lacks (nodesetup.py), drained GPUs (gpus.py), on the host no
leftovers and ready NICs (leftovers.py, nics.py), free ports (ports.py), HTTP readiness waits (waithttp.py),
the TCP barrier (barrier.py) and emptied engine caches between benchmarks (flushcache.py); stdlib only,
runs in any container. Rendered scripts call `python3 sync.py <command> ...`."""

from __future__ import annotations

import argparse
import sys

import address
import barrier
import flushcache
import gpus
import leftovers
import nics
import nodesetup
import peers
import ports
import preflight
import waithttp

COMMANDS = (address, peers, preflight, nodesetup, gpus, leftovers, nics, ports, waithttp, barrier, flushcache)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sync.py", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for module in COMMANDS:
        module.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
