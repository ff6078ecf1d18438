#!/usr/bin/env python3
"""`sync.py barrier`: a TCP rendezvous of SIZE ranks; rank 0 leads (barrierlead.py), collects one hello per
rank and releases everyone with the table of all ranks, or tells every waiting rank who is missing. Every
line is sealed with the job's secret (barrierwire.py): only this job's ranks join, only its leader
releases them. Stdlib only."""

from __future__ import annotations

import argparse
import json
import os
import socket
import tempfile
import threading
import time
from typing import Any

import safejson
from barrierlead import MAX_DEPTH, MAX_LINE, Leader, addr_text
from barrierwire import AuthError, Session, challenge_nonce, new_nonce, read_secret
from failures import EXIT_BARRIER, EXIT_BIND, EXIT_PEERS, EXIT_SECRET, EXIT_USAGE, die, line, one_line
from nodeargs import key_value, positive_float, say, seconds_text
from peers import PeersError, published

CONNECT_RETRY_S = 0.2
LEADER_GRACE_S = 10.0  # connected ranks wait this much longer than their own timeout for the leader's word
ADDRESS_FIELD = "addr"  # what --peer-addresses lists: each rank's --publish-field addr=...
MAX_SIZE = 4096  # ranks; it also bounds what the leader keeps open (4 x size waiting connections)
PUBLISH_MAX_DEPTH = 16  # --publish nests at most this deep: the wire allows MAX_DEPTH with the envelope


class BarrierError(Exception):
    """A barrier failure; the message is printed after 'barrier NAME: '."""


class _NotRegistered(Exception):
    """The connection ended before the leader registered this rank. The leader closes connections that
    look idle when too many are open, so the rank connects again while its own deadline allows."""


class _Closed(Exception):
    """The leader closed the connection."""


def _host_port(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, PORT 1..65535 (got {text!r})")
    return host.strip("[]"), int(port)


def _json_value(text: str) -> Any:
    try:
        return safejson.loads(text, max_depth=PUBLISH_MAX_DEPTH)
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"not JSON the barrier carries: {err}") from None


class _Lines:
    """Lines from the leader, each at most LIMIT bytes, read until a deadline."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock, self.buffer = sock, bytearray()

    def read(self, deadline: float, limit: int) -> bytes | None:
        """The next line; None once DEADLINE passed; _Closed if the leader closed the connection."""
        while True:
            end = self.buffer.find(b"\n")
            if end > limit or (end < 0 and len(self.buffer) > limit):
                raise BarrierError(f"the leader sent a line longer than {limit} bytes")
            if end >= 0:
                found = bytes(self.buffer[:end])
                del self.buffer[: end + 1]
                return found
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            self.sock.settimeout(remaining)
            try:
                data = self.sock.recv(65536)
            except socket.timeout:  # noqa: UP041 (not yet TimeoutError on Python 3.8/3.9)
                continue
            except OSError:
                data = b""
            if not data:
                raise _Closed
            self.buffer += data


def _connect_once(host: str, port: int, timeout: float) -> socket.socket:
    sock = socket.create_connection((host, port), timeout=timeout)
    # Retrying a local port nobody listens on can end in TCP connecting to itself; that is no leader.
    if sock.getsockname() == sock.getpeername():
        sock.close()
        raise ConnectionRefusedError("connected to itself: nobody listens yet")
    return sock


def _connect(args: argparse.Namespace, deadline: float, last: str | None) -> socket.socket:
    host, port = args.leader
    told = False
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0 and last:
            raise BarrierError(
                f"leader {host}:{port} did not register this rank in {seconds_text(args.timeout)} s ({last})"
            )
        if remaining <= 0:
            raise BarrierError(f"leader {host}:{port} unreachable for {seconds_text(args.timeout)} s")
        try:
            return _connect_once(host, port, min(2.0, remaining))
        except OSError as err:
            if not told:
                say(f"barrier {args.name}: waiting for leader {host}:{port} ({err})")
                told = True
        time.sleep(max(0.0, min(CONNECT_RETRY_S, deadline - time.monotonic())))


def _hello(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "barrier": args.name,
        "size": args.size,
        "rank": args.rank,
        "node": args.node,
        "data": args.publish,
    }


def _leader_says(
    args: argparse.Namespace, lines: _Lines, session: Session, deadline: float, *, registered: bool
) -> tuple[str, Any]:
    """The next sealed line: (kind, body). Before registration, an end is _NotRegistered (try again)."""
    kinds = ("release", "error") if registered else ("registered", "error")
    try:
        sealed = lines.read(deadline, MAX_LINE * (args.size + 1))
    except _Closed:
        if registered:
            raise BarrierError("leader closed the barrier before release") from None
        raise _NotRegistered("the leader closed the connection before registering it") from None
    if sealed is None and registered:
        raise BarrierError("no release from the leader before the deadline")
    if sealed is None:
        raise _NotRegistered("no answer to its hello")
    try:
        kind, data = session.opened(sealed, kinds)
    except AuthError:
        raise BarrierError(line("barrier-not-sealed", leader=addr_text(args.leader))) from None
    try:
        return kind, safejson.loads(data, max_depth=MAX_DEPTH)
    except ValueError as err:
        raise BarrierError(f"leader sent a malformed {kind}: {err}") from None


def _release_table(body: Any, size: int) -> dict[str, Any]:
    """The release as --out gets it: {"ranks": {"0": {"node", "data"}, ...}} with exactly SIZE ranks."""
    ranks = body.get("ranks") if isinstance(body, dict) else None
    expected = {str(rank) for rank in range(size)}
    if not isinstance(ranks, dict) or set(ranks) != expected:
        raise BarrierError("leader sent a malformed release (not one entry per rank)")
    for entry in ranks.values():
        if not isinstance(entry, dict) or not isinstance(entry.get("node"), (str, type(None))):
            raise BarrierError("leader sent a malformed release (an entry without node and data)")
    return {"ranks": ranks}


def _exchange(
    args: argparse.Namespace, key: bytes, sock: socket.socket, deadline: float, release_deadline: float
) -> dict[str, Any]:
    """One connection: challenge, sealed hello, registration, then the release (or the leader's error)."""
    lines = _Lines(sock)
    try:
        challenge = lines.read(deadline, MAX_LINE)
    except _Closed:
        raise _NotRegistered("the leader closed the connection before its challenge") from None
    if challenge is None:
        raise _NotRegistered("no challenge from the leader")
    try:
        session = Session(key, challenge_nonce(challenge), new_nonce())
    except AuthError:
        raise BarrierError(
            f"{addr_text(args.leader)} does not speak this barrier's protocol (no challenge)"
        ) from None
    try:
        sock.sendall(session.hello_line(_hello(args)))
    except OSError as err:
        raise _NotRegistered(f"lost the leader while sending: {err}") from None
    kind, body = _leader_says(args, lines, session, deadline, registered=False)
    if kind == "registered":
        kind, body = _leader_says(args, lines, session, release_deadline, registered=True)
    if kind == "error":
        raise BarrierError(f"leader: {one_line(body)}")
    return _release_table(body, args.size)


def _join(args: argparse.Namespace, key: bytes, deadline: float, release_deadline: float) -> dict[str, Any]:
    """This rank's side: say hello to the leader (until deadline) and wait for the release.

    Registered ranks wait past their own deadline: the leader's timeout, which knows who is missing,
    must be what every rank reports, not a shorter clock of whichever rank started first."""
    last = None
    while True:
        with _connect(args, deadline, last) as sock:
            try:
                return _exchange(args, key, sock, deadline, release_deadline)
            except _NotRegistered as why:
                last = str(why)
        time.sleep(max(0.0, min(CONNECT_RETRY_S, deadline - time.monotonic())))


def _write_atomically(path: str, text: str) -> None:
    """TEXT at PATH, whole or not at all."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".barrier-", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def _listen(args: argparse.Namespace) -> socket.socket:
    host, port = args.leader
    bind_host = args.bind or host
    try:
        listener = socket.socket(socket.AF_INET6 if ":" in bind_host else socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((bind_host, port))
        listener.listen(max(16, args.size))
    except OSError as err:
        die(f"barrier {args.name}: cannot listen on {bind_host}:{port}: {err}", EXIT_BIND)
    return listener


def _lead_and_join(args: argparse.Namespace, key: bytes, deadline: float) -> dict[str, Any]:
    leader = Leader(args, _listen(args), deadline, key)
    verdict: list[str | None] = []

    def lead() -> None:
        try:
            verdict.append(leader.run())
        except Exception as err:  # noqa: BLE001 (one line for the node's output, never a traceback)
            verdict.append(f"the leader failed: {type(err).__name__}: {one_line(err)}")

    thread = threading.Thread(target=lead, name="barrier-leader", daemon=True)
    thread.start()
    try:
        reply = _join(args, key, deadline, deadline + LEADER_GRACE_S)
    except BarrierError:
        reply = {}
    thread.join(timeout=max(0.0, deadline - time.monotonic()) + 10.0)
    if verdict and verdict[0] is not None:
        raise BarrierError(verdict[0])
    if not reply or not verdict:
        raise BarrierError("leader failed to release its own rank")
    return reply


def _check_usage(args: argparse.Namespace) -> None:
    if not 0 < args.size <= MAX_SIZE:
        die(f"barrier {args.name}: --size {args.size} not in 1..{MAX_SIZE}", EXIT_USAGE)
    if not 0 <= args.rank < args.size:
        die(f"barrier {args.name}: --rank {args.rank} not in 0..{args.size - 1}", EXIT_USAGE)
    if args.nodes and len(args.nodes) != args.size:
        die(f"barrier {args.name}: --nodes has {len(args.nodes)} names for --size {args.size}", EXIT_USAGE)
    if args.publish_field:
        args.publish = dict(args.publish_field)
    size = len(json.dumps(_hello(args)))
    if size > MAX_LINE - 300:  # room for the line's kind, nonce and MAC
        die(f"barrier {args.name}: the hello is {size} bytes; at most {MAX_LINE - 300}", EXIT_USAGE)


def cmd_barrier(args: argparse.Namespace) -> int:
    _check_usage(args)
    try:
        key = read_secret(args.secret_file)
    except AuthError as err:
        die(f"barrier {args.name}: " + line("secret-file", path=args.secret_file, problem=err), EXIT_SECRET)
    deadline = time.monotonic() + args.timeout
    try:
        if args.rank == 0:
            reply = _lead_and_join(args, key, deadline)
        else:
            reply = _join(args, key, deadline, deadline + LEADER_GRACE_S)
    except BarrierError as err:
        die(f"barrier {args.name}: {err}", EXIT_BARRIER)
    if args.out:
        try:
            _write_atomically(args.out, json.dumps(reply, indent=1, sort_keys=True) + "\n")
        except OSError as err:
            die(f"barrier {args.name}: cannot write {args.out}: {err}", EXIT_BARRIER)
    if args.peer_addresses:
        _write_addresses(args, reply)
    return 0


def _write_addresses(args: argparse.Namespace, reply: dict[str, Any]) -> None:
    """Every rank's published `addr`, one line per rank in rank order, for the node script's array: read
    here, from the released table, not by a process of its own on every node."""
    try:
        addresses = published(reply, ADDRESS_FIELD, address=True, distinct=True)
    except PeersError as err:
        die(f"barrier {args.name}: {err}", EXIT_PEERS)
    try:
        _write_atomically(args.peer_addresses, "".join(f"{address}\n" for address in addresses))
    except OSError as err:
        die(f"barrier {args.name}: cannot write {args.peer_addresses}: {err}", EXIT_BARRIER)


def add_parser(sub: Any) -> None:
    p = sub.add_parser("barrier", help="TCP rendezvous of SIZE ranks; rank 0 is the leader")
    p.add_argument("--name", required=True)
    p.add_argument("--rank", required=True, type=int)
    p.add_argument("--size", required=True, type=int)
    p.add_argument("--leader", required=True, type=_host_port, metavar="HOST:PORT")
    p.add_argument("--timeout", required=True, type=positive_float, help="seconds")
    p.add_argument(
        "--secret-file",
        required=True,
        metavar="PATH",
        help="the job's secret: one line of >= 32 hex digits, mode 0600 (barrierwire.py)",
    )
    p.add_argument("--node", help="this node's name, sent to the others")
    p.add_argument(
        "--nodes", type=lambda s: s.split(","), help="comma-separated node names by rank (for messages)"
    )
    published = p.add_mutually_exclusive_group()
    published.add_argument("--publish", type=_json_value, help="JSON value shared with every rank")
    published.add_argument(
        "--publish-field",
        type=key_value,
        action="append",
        metavar="KEY=VALUE",
        help="publish {KEY: VALUE, ...} (strings; repeatable) without writing JSON by hand",
    )
    p.add_argument("--out", help="write the released table of ranks here (atomically)")
    p.add_argument(
        "--peer-addresses",
        metavar="PATH",
        help=f"write the {ADDRESS_FIELD} every rank published (--publish-field {ADDRESS_FIELD}=...), one "
        "line per rank in rank order; each must be one canonical IP address, no two alike (exit 8 otherwise)",
    )
    p.add_argument("--bind", help="address the leader listens on (default: the leader HOST)")
    p.set_defaults(func=cmd_barrier)
