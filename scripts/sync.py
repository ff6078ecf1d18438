#!/usr/bin/env python3
"""Node-side sync, one command per job: addresses (address.py), the pinned-version check (preflight.py),
the pinned tools the image lacks (nodesetup.py), drained GPUs (gpus.py), on the host no leftovers and ready
NICs (leftovers.py, nics.py), free ports (ports.py), HTTP readiness waits (waithttp.py), the TCP barrier
(barrier.py; the peers' addresses, peers.py) and emptied engine caches between benchmarks (flushcache.py);
stdlib only, runs in any container. Rendered scripts call `python3 sync.py <command> ...`."""

from __future__ import annotations

import argparse
import importlib
import sys

# Each command's module, imported only when that command runs: every node starts sync.py several times
# before its engines (address, ports, barrier), and importing all ten modules cost each call
# about 0.1 s of CPU: on a wide job's nodes, or 32 simulated nodes sharing one host, that adds up.
COMMANDS = {
    "addr": "address",
    "dist-version": "preflight",
    "setup-env": "nodesetup",
    "gpu-drain": "gpus",
    "image-ready": "images",
    "rdma-register": "rdmaprobe",
    "leftovers": "leftovers",
    "nic-check": "nics",
    "ports-free": "ports",
    "wait-http": "waithttp",
    "barrier": "barrier",
    "flush-caches": "flushcache",
}


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser of every command, or of ONLY (a name of COMMANDS) with just its module imported."""
    parser = argparse.ArgumentParser(prog="sync.py", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in (only,) if only else COMMANDS:
        importlib.import_module(COMMANDS[name]).add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    only = argv[0] if argv and argv[0] in COMMANDS else None  # else: help, or an error naming them all
    args = build_parser(only).parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
