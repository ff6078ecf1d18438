#!/usr/bin/env python3
"""`sync.py ports-free`: every address and port this node's services will listen on is free now, before
anything starts; stdlib only.

Otherwise a port held by a leftover of an earlier job (or another user's server) is found only when the
service that needs it starts: the router after every engine has loaded its weights, minutes to an hour in.
"""

from __future__ import annotations

import argparse
import errno
import ipaddress
import socket
from typing import Any

from failures import EXIT_BIND, die, line, one_line


def _listen(text: str) -> tuple[str, str, int]:
    """SERVICE=ADDR:PORT, ADDR an IP address ([v6] in brackets) -> (service, addr, port)."""
    service, sep, where = text.partition("=")
    addr, sep2, port = where.rpartition(":")
    addr = addr[1:-1] if addr.startswith("[") and addr.endswith("]") else addr
    try:
        ipaddress.ip_address(addr)
        number = int(port)
    except ValueError:
        number = -1
    if not (sep and sep2 and service and 0 < number < 65536):
        raise argparse.ArgumentTypeError(
            f"expected SERVICE=ADDR:PORT with an IP address, got {one_line(text)!r}"
        )
    return service, addr, number


def taken(addr: str, port: int) -> str | None:
    """Why ADDR:PORT cannot be listened on now (None: it can). SO_REUSEADDR as servers set it, so a port
    in TIME_WAIT from an earlier job's connections is not counted as taken; a listening socket is."""
    family = socket.AF_INET6 if ":" in addr else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((addr, port))
        except OSError as err:
            return errno.errorcode.get(err.errno or 0, str(err.errno)) + f" ({err.strerror})"
    return None


def cmd_ports_free(args: argparse.Namespace) -> int:
    problems = [
        line("port-taken", service=service, addr=addr, port=port, error=why)
        for service, addr, port in args.listen
        if (why := taken(addr, port)) is not None
    ]
    if problems:
        die("; ".join(problems), EXIT_BIND)
    print(f"free: {', '.join(f'{a}:{p} ({s})' for s, a, p in args.listen) or 'nothing to listen on'}")
    return 0


def add_parser(sub: Any) -> None:
    p = sub.add_parser("ports-free", help="every address:port the node's services will listen on is free")
    p.add_argument("listen", nargs="*", type=_listen, help="SERVICE=ADDR:PORT, e.g. router=10.0.0.1:30000")
    p.set_defaults(func=cmd_ports_free)
