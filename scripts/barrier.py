#!/usr/bin/env python3
"""`sync.py barrier`: a TCP rendezvous of SIZE ranks; rank 0 leads, collects one hello per rank and releases
everyone with the table of all ranks, or tells every waiting rank who is missing; stdlib only."""

from __future__ import annotations

import argparse
import json
import os
import selectors
import socket
import tempfile
import threading
import time
from typing import Any

from failures import EXIT_BARRIER, EXIT_BIND, EXIT_USAGE, die, line
from nodeargs import key_value, positive_float, say, seconds_text

MAX_LINE = 1 << 20  # a hello line is small; this bounds a misbehaving peer
CONNECT_RETRY_S = 0.2
LEADER_GRACE_S = 10.0  # connected ranks wait this much longer than their own timeout for the leader's word


class BarrierError(Exception):
    """A barrier failure; the message is printed after 'barrier: '."""


def _send_line(sock: socket.socket, obj: Any) -> None:
    sock.sendall(json.dumps(obj).encode() + b"\n")


def _host_port(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise argparse.ArgumentTypeError(f"expected HOST:PORT (got {text!r})")
    return host.strip("[]"), int(port)


def _json_value(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"not JSON: {err}") from None


class Leader:
    """Rank 0's side: collects one hello per rank, then releases everyone with the table of all ranks."""

    def __init__(self, args: argparse.Namespace, listener: socket.socket, deadline: float) -> None:
        self.args = args
        self.listener = listener
        self.deadline = deadline
        self.selector = selectors.DefaultSelector()
        self.buffers: dict[socket.socket, bytearray] = {}
        self.ranks: dict[int, tuple[socket.socket, dict[str, Any]]] = {}
        self.missing: list[int] = []

    def run(self) -> bool:
        """True once all ranks were released; False on timeout (self.missing says who)."""
        self.listener.setblocking(False)
        self.selector.register(self.listener, selectors.EVENT_READ)
        try:
            while len(self.ranks) < self.args.size:
                remaining = self.deadline - time.monotonic()
                if remaining <= 0:
                    self.missing = [r for r in range(self.args.size) if r not in self.ranks]
                    self._tell_all({"error": self.timeout_text()})
                    return False
                for key, _ in self.selector.select(timeout=remaining):
                    self._on_readable(key.fileobj)  # type: ignore[arg-type]
            self._release()
            return True
        finally:
            self._close_all()

    def _on_readable(self, sock: socket.socket) -> None:
        if sock is self.listener:
            conn, _ = self.listener.accept()
            conn.setblocking(False)
            self.buffers[conn] = bytearray()
            self.selector.register(conn, selectors.EVENT_READ)
            return
        try:
            data = sock.recv(65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._drop(sock)
        elif not self._rank_of(sock):
            self._on_data(sock, data)
        # a registered rank has nothing more to say; it stays selected so that its EOF is seen

    def _on_data(self, sock: socket.socket, data: bytes) -> None:
        buf = self.buffers[sock]
        buf += data
        if b"\n" in buf:
            self._on_hello(sock, bytes(buf.split(b"\n", 1)[0]))
        elif len(buf) > MAX_LINE:
            self._reject(sock, "hello line too long")

    def _rank_of(self, sock: socket.socket) -> list[int]:
        return [rank for rank, (registered, _) in self.ranks.items() if registered is sock]

    def _drop(self, sock: socket.socket) -> None:
        """A peer went away: if it was a registered rank, that rank is missing again."""
        for rank in self._rank_of(sock):
            del self.ranks[rank]
        self.selector.unregister(sock)
        self.buffers.pop(sock, None)
        sock.close()

    def _problem(self, hello: Any) -> str | None:
        if not isinstance(hello, dict):
            return "hello is not a JSON object"
        if hello.get("barrier") != self.args.name:
            return f"barrier {hello.get('barrier')!r} != {self.args.name!r}"
        if hello.get("size") != self.args.size:
            return f"size {hello.get('size')!r} != {self.args.size}"
        rank = hello.get("rank")
        if not isinstance(rank, int) or isinstance(rank, bool) or not 0 <= rank < self.args.size:
            return f"rank {rank!r} not in 0..{self.args.size - 1}"
        return None

    def _on_hello(self, sock: socket.socket, line: bytes) -> None:
        try:
            hello = json.loads(line)
        except ValueError:
            hello = None
        problem = self._problem(hello)
        if problem:
            self._reject(sock, problem)
            return
        earlier = self.ranks.get(hello["rank"])
        if earlier is not None:  # a retry replaces the earlier connection
            self._drop(earlier[0])
        self.ranks[hello["rank"]] = (sock, hello)

    def _reject(self, sock: socket.socket, problem: str) -> None:
        say(f"barrier {self.args.name}: rejected a peer: {problem}")
        try:
            sock.setblocking(True)
            sock.settimeout(1.0)
            _send_line(sock, {"error": f"rejected this rank: {problem}"})
        except OSError:
            pass  # the peer is gone already; it was rejected either way
        self._drop(sock)

    def timeout_text(self) -> str:
        missing = _missing_text(self.args, self.missing)
        return line("barrier-timeout", timeout=seconds_text(self.args.timeout), missing=missing)

    def _release(self) -> None:
        table = {
            str(rank): {"node": hello.get("node"), "data": hello.get("data")}
            for rank, (_, hello) in sorted(self.ranks.items())
        }
        self._tell_all({"ranks": table})

    def _tell_all(self, message: dict[str, Any]) -> None:
        for rank, (sock, _) in sorted(self.ranks.items()):
            try:
                sock.setblocking(True)
                sock.settimeout(5.0)
                _send_line(sock, message)
            except OSError as err:
                say(f"barrier {self.args.name}: could not tell rank {rank}: {err}")

    def _close_all(self) -> None:
        # Closing everything is what makes waiting ranks fail at once on a timeout.
        for sock in list(self.buffers):
            sock.close()
        self.selector.close()
        self.listener.close()


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


def _connect_once(host: str, port: int, timeout: float) -> socket.socket:
    sock = socket.create_connection((host, port), timeout=timeout)
    # Retrying a local port nobody listens on can end in TCP connecting to itself; that is no leader.
    if sock.getsockname() == sock.getpeername():
        sock.close()
        raise ConnectionRefusedError("connected to itself: nobody listens yet")
    return sock


def _connect(args: argparse.Namespace, deadline: float) -> socket.socket:
    host, port = args.leader
    told = False
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise BarrierError(f"leader {host}:{port} unreachable for {seconds_text(args.timeout)} s")
        try:
            return _connect_once(host, port, min(2.0, remaining))
        except OSError as err:
            if not told:
                say(f"barrier {args.name}: waiting for leader {host}:{port} ({err})")
                told = True
        time.sleep(max(0.0, min(CONNECT_RETRY_S, deadline - time.monotonic())))


def _read_line(sock: socket.socket, deadline: float) -> bytes:
    buf = bytearray()
    while b"\n" not in buf:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise BarrierError("no release from the leader before the deadline")
        sock.settimeout(remaining)
        try:
            data = sock.recv(65536)
        except socket.timeout:  # noqa: UP041 (not yet TimeoutError on Python 3.8/3.9)
            continue
        except OSError:
            data = b""
        if not data:
            raise BarrierError("leader closed the barrier before release")
        buf += data
    return bytes(buf.split(b"\n", 1)[0])


def _join(args: argparse.Namespace, deadline: float, release_deadline: float) -> dict[str, Any]:
    """This rank's side: say hello to the leader (until deadline) and wait for the release.

    Connected ranks wait past their own deadline: the leader's timeout, which knows who is missing,
    must be what every rank reports, not a shorter clock of whichever rank started first."""
    with _connect(args, deadline) as sock:
        hello = {
            "barrier": args.name,
            "size": args.size,
            "rank": args.rank,
            "node": args.node,
            "data": args.publish,
        }
        try:
            _send_line(sock, hello)
        except OSError as err:
            raise BarrierError(f"lost the leader while sending: {err}") from None
        line = _read_line(sock, release_deadline)
    try:
        reply = json.loads(line)
    except ValueError:
        raise BarrierError("leader sent a malformed reply") from None
    if isinstance(reply, dict) and "error" in reply:
        raise BarrierError(f"leader: {reply['error']}")
    if not isinstance(reply, dict) or not isinstance(reply.get("ranks"), dict):
        raise BarrierError("leader sent a malformed reply")
    return reply


def _write_atomically(path: str, obj: Any) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".barrier-", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump(obj, out, indent=1, sort_keys=True)
            out.write("\n")
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def _missing_text(args: argparse.Namespace, missing: list[int]) -> str:
    if args.nodes:
        return ", ".join(f"{rank} ({args.nodes[rank]})" for rank in missing)
    return ", ".join(str(rank) for rank in missing)


def _lead_and_join(args: argparse.Namespace, deadline: float) -> dict[str, Any]:
    leader = Leader(args, _listen(args), deadline)
    outcome: list[bool] = []
    thread = threading.Thread(target=lambda: outcome.append(leader.run()), name="barrier-leader", daemon=True)
    thread.start()
    try:
        reply = _join(args, deadline, deadline + LEADER_GRACE_S)
    except BarrierError:
        reply = {}
    thread.join(timeout=max(0.0, deadline - time.monotonic()) + 10.0)
    if outcome == [False]:
        raise BarrierError(leader.timeout_text())
    if not reply or outcome != [True]:
        raise BarrierError("leader failed to release its own rank")
    return reply


def cmd_barrier(args: argparse.Namespace) -> int:
    if not 0 <= args.rank < args.size:
        die(f"barrier {args.name}: --rank {args.rank} not in 0..{args.size - 1}", EXIT_USAGE)
    if args.nodes and len(args.nodes) != args.size:
        die(f"barrier {args.name}: --nodes has {len(args.nodes)} names for --size {args.size}", EXIT_USAGE)
    if args.publish_field:
        args.publish = dict(args.publish_field)
    deadline = time.monotonic() + args.timeout
    try:
        if args.rank == 0:
            reply = _lead_and_join(args, deadline)
        else:
            reply = _join(args, deadline, deadline + LEADER_GRACE_S)
    except BarrierError as err:
        die(f"barrier {args.name}: {err}", EXIT_BARRIER)
    if args.out:
        try:
            _write_atomically(args.out, reply)
        except OSError as err:
            die(f"barrier {args.name}: cannot write {args.out}: {err}", EXIT_BARRIER)
    return 0


def add_parser(sub: Any) -> None:
    p = sub.add_parser("barrier", help="TCP rendezvous of SIZE ranks; rank 0 is the leader")
    p.add_argument("--name", required=True)
    p.add_argument("--rank", required=True, type=int)
    p.add_argument("--size", required=True, type=int)
    p.add_argument("--leader", required=True, type=_host_port, metavar="HOST:PORT")
    p.add_argument("--timeout", required=True, type=positive_float, help="seconds")
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
    p.add_argument("--bind", help="address the leader listens on (default: the leader HOST)")
    p.set_defaults(func=cmd_barrier)
