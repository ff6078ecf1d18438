#!/usr/bin/env python3
"""`sync.py addr`: the IPv4 a node advertises to its peers, from its interface or SLURM's NodeAddr; stdlib
only (it runs in any container)."""

from __future__ import annotations

import argparse
import fcntl
import ipaddress
import os
import socket
import struct
import subprocess
import threading
from typing import Any

from failures import EXIT_ADDR, die, one_line
from nodeargs import positive_float

SIOCGIFADDR = 0x8915  # linux/sockios.h: read an interface's IPv4 address


class AddrError(Exception):
    """Why a node's data-plane address could not be found."""


def _interface_ipv4(interface: str) -> str:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            packed = fcntl.ioctl(sock.fileno(), SIOCGIFADDR, struct.pack("256s", interface.encode()[:15]))
        except OSError as err:
            raise AddrError(f"interface {interface!r} has no IPv4 address here ({err.strerror})") from None
    return socket.inet_ntoa(packed[20:24])


def _scontrol_nodeaddr(node: str, timeout: float) -> str:
    try:
        out = subprocess.run(
            ["scontrol", "show", "node", "--oneliner", node],
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        raise AddrError(f"scontrol show node {node}: {one_line(err)}") from None
    if out.returncode != 0:
        raise AddrError(f"scontrol show node {node} exited {out.returncode}: {one_line(out.stderr)}")
    for field in out.stdout.split():
        key, _, value = field.partition("=")
        if key == "NodeAddr" and value:
            return value
    raise AddrError(f"scontrol show node {node} reports no NodeAddr")


def _ipv4_of(host: str, timeout: float) -> str:
    try:
        return str(ipaddress.IPv4Address(host))
    except ValueError:
        pass
    # getaddrinfo has no timeout of its own (a dead DNS server holds it for the resolver's retries): it runs
    # in a thread this process abandons when the time is up.
    found: list[Any] = []
    resolver = threading.Thread(target=lambda: found.append(_resolve(host)), daemon=True)
    resolver.start()
    resolver.join(timeout)
    if not found:
        raise AddrError(f"cannot resolve {host!r} within {timeout:g} s")
    if isinstance(found[0], OSError):
        raise AddrError(f"cannot resolve {host!r}: {found[0]}")
    return str(found[0])


def _resolve(host: str) -> Any:
    """HOST's first IPv4 address, or the OSError that says why there is none."""
    try:
        return socket.getaddrinfo(host, None, socket.AF_INET, socket.SOCK_STREAM)[0][4][0]
    except OSError as err:
        return err


def _local_names() -> set[str]:
    hostname = socket.gethostname()
    return {name for name in (hostname, hostname.split(".")[0], os.environ.get("SLURMD_NODENAME")) if name}


def cmd_addr(args: argparse.Namespace) -> int:
    try:
        if args.interface:
            # An interface address can only be read where the interface is.
            if args.node not in _local_names():
                raise AddrError(
                    f"--interface reads this host's address, but {args.node!r} is not this host "
                    f"({', '.join(sorted(_local_names()))})"
                )
            addr = _interface_ipv4(args.interface)
        else:
            addr = _ipv4_of(_scontrol_nodeaddr(args.node, args.timeout), args.timeout)
        if ipaddress.IPv4Address(addr).is_loopback and not args.allow_loopback:
            # Advertised to peers: a loopback address makes Mooncake TCP transfers hang
            # (docs/upstream-facts.md#mooncake-pd).
            raise AddrError(
                f"{addr} is a loopback address; peers cannot reach it (set the runner's data-plane-interface)"
            )
    except AddrError as err:
        die(f"addr {args.node}: {err}", EXIT_ADDR)
    print(addr)
    return 0


def add_parser(sub: Any) -> None:
    p = sub.add_parser("addr", help="print a node's data-plane IPv4 address")
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--slurm-nodeaddr", action="store_true", help="the node's NodeAddr in SLURM")
    source.add_argument("--interface", help="this host's address on that interface")
    p.add_argument("--allow-loopback", action="store_true", help="simulated nodes live on 127.0.0.x")
    p.add_argument(
        "--timeout",
        type=positive_float,
        default=30.0,
        help="seconds for scontrol, and again for the name lookup",
    )
    p.add_argument("node", help="the node's SLURM name")
    p.set_defaults(func=cmd_addr)
