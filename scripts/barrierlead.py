"""`sync.py barrier`, rank 0's side: collects one authenticated hello per rank and releases every rank with
the table of all, or tells every waiting rank why not; stdlib only.

Only a hello sealed with the job's secret (barrierwire.py) fills a rank, and nothing a peer sends before
that can exhaust or block the leader: at most max(8, 4 x size) connections wait for their hello (the
oldest is closed when another comes), each for at most HELLO_TIMEOUT_S, with lines of at most MAX_LINE
bytes; the leader never waits on such a peer (non-blocking reads and sends)."""

from __future__ import annotations

import argparse
import contextlib
import selectors
import socket
import time
from typing import Any

import safejson
from barrierwire import AuthError, Session, challenge_line, hello_parts, new_nonce
from failures import line
from nodeargs import say, seconds_text

MAX_LINE = 64 << 10  # a hello: names and a few published values
MAX_DEPTH = 32  # of any JSON on the wire; --publish is held to less
HELLO_TIMEOUT_S = 5.0  # a real rank answers the challenge within milliseconds of connecting
SEND_TIMEOUT_S = 5.0  # to an authenticated rank
NOTES_SHOWN = 10  # rejected or closed peers named one by one; after that only counted


class Pending:
    """A connection that has not proved it belongs to the job yet."""

    __slots__ = ("addr", "nonce", "since", "buffer")

    def __init__(self, addr: str, nonce: str, since: float) -> None:
        self.addr, self.nonce, self.since = addr, nonce, since
        self.buffer = bytearray()


class Member:
    """A rank whose hello was sealed with the job's secret."""

    __slots__ = ("sock", "addr", "session", "hello")

    def __init__(self, sock: socket.socket, addr: str, session: Session, hello: dict[str, Any]) -> None:
        self.sock, self.addr, self.session, self.hello = sock, addr, session, hello


def addr_text(peer: Any) -> str:
    host, port = peer[0], peer[1]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _still_open(sock: socket.socket) -> bool:
    """Whether the peer of a non-blocking socket has not closed it (a peek reads nothing away)."""
    try:
        return sock.recv(1, socket.MSG_PEEK) != b""
    except BlockingIOError:
        return True
    except OSError:
        return False


class Leader:
    """Rank 0's side: run() collects one hello per rank, then releases everyone with the table of all."""

    def __init__(
        self, args: argparse.Namespace, listener: socket.socket, deadline: float, key: bytes
    ) -> None:
        self.args, self.listener, self.deadline, self.key = args, listener, deadline, key
        self.selector = selectors.DefaultSelector()
        self.pending: dict[socket.socket, Pending] = {}  # in arrival order: the oldest first
        self.members: dict[int, Member] = {}
        self.max_pending = max(8, 4 * args.size)
        self.failure: str | None = None
        self.notes = 0

    def run(self) -> str | None:
        """None once every rank was released; else why not, which every registered rank was told."""
        self.listener.setblocking(False)
        self.selector.register(self.listener, selectors.EVENT_READ)
        try:
            while self.failure is None and len(self.members) < self.args.size:
                self._step()
            if self.failure is None:
                self._release()
            else:
                self._tell_all("error", self.failure)
            return self.failure
        finally:
            self._close_all()

    def _step(self) -> None:
        now = time.monotonic()
        if now >= self.deadline:
            self.failure = self.timeout_text()
            return
        self._expire_idle(now)
        wait = self.deadline - now
        if self.pending:
            wait = min(wait, next(iter(self.pending.values())).since + HELLO_TIMEOUT_S - now)
        for key, _ in self.selector.select(timeout=max(0.0, wait)):
            if self.failure is None:
                self._on_readable(key.fileobj)  # type: ignore[arg-type]

    def _on_readable(self, sock: socket.socket) -> None:
        if sock is self.listener:
            self._accept()
        elif sock in self.pending:
            self._on_pending(sock)
        else:
            for rank, member in list(self.members.items()):
                if member.sock is sock and _recv(sock) == b"":
                    self._drop_member(rank)  # gone: the rank is missing again until it comes back
            # a registered rank has nothing more to say; what it sends is read and ignored

    def _accept(self) -> None:
        try:
            conn, peer = self.listener.accept()
        except BlockingIOError:
            return
        except OSError as err:  # out of descriptors: make room rather than spin on the listener
            self._note(f"cannot accept a connection ({err.strerror})")
            if self.pending:
                self._close_pending(next(iter(self.pending)), "closed to make room")
            return
        if len(self.pending) >= self.max_pending:
            self._close_pending(
                next(iter(self.pending)), "closed, the oldest of too many connections without a hello"
            )
        conn.setblocking(False)
        nonce = new_nonce()
        try:
            conn.send(challenge_line(nonce))  # a new connection's send buffer is empty: this never blocks
        except OSError:
            conn.close()
            return
        self.pending[conn] = Pending(addr_text(peer), nonce, time.monotonic())
        self.selector.register(conn, selectors.EVENT_READ)

    def _on_pending(self, sock: socket.socket) -> None:
        entry = self.pending[sock]
        data = _recv(sock)
        if data is None:
            return
        if not data:
            self._close_pending(sock)  # it left before saying anything: nothing to note
            return
        entry.buffer += data
        end = entry.buffer.find(b"\n")
        if 0 <= end <= MAX_LINE:
            self._on_hello(sock, entry, bytes(entry.buffer[:end]))
        elif len(entry.buffer) > MAX_LINE:
            self._reject(sock, entry, f"no hello line within {MAX_LINE} bytes")

    def _on_hello(self, sock: socket.socket, entry: Pending, hello_line: bytes) -> None:
        try:
            session, mac, data = hello_parts(self.key, entry.nonce, hello_line)
        except AuthError as err:
            self._reject(sock, entry, str(err))
            return
        try:
            session.verify("hello", mac, data)
            hello = safejson.loads(data, max_depth=MAX_DEPTH)
        except (AuthError, ValueError) as err:
            self._reject(sock, entry, str(err), session)  # sealed: a rank holding another secret learns why
            return
        problem = self._problem(hello)
        if problem:
            self._reject(sock, entry, problem, session)
        else:
            self._admit(sock, entry, session, hello)

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
        if not isinstance(hello.get("node"), (str, type(None))):
            return "node is not a string"
        return None

    def _admit(self, sock: socket.socket, entry: Pending, session: Session, hello: dict[str, Any]) -> None:
        rank = hello["rank"]
        earlier = self.members.get(rank)
        if earlier is not None and _still_open(earlier.sock):
            # Two live connections with the job's secret for one rank: a node started twice, or a copy of
            # the secret in the wrong hands. Either way no table can be trusted: the barrier fails.
            self.failure = line(
                "barrier-claimed-twice", rank=self.rank_text(rank), first=earlier.addr, second=entry.addr
            )
            self._send(sock, session.sealed("error", self.failure), rank)
            self._close_pending(sock)
            return
        if earlier is not None:
            self._drop_member(rank)  # its connection closed: a rank that reconnects takes its place
        del self.pending[sock]
        self.members[rank] = Member(sock, entry.addr, session, hello)
        self._send(sock, session.sealed("registered", {"rank": rank}), rank)

    def _reject(self, sock: socket.socket, entry: Pending, why: str, session: Session | None = None) -> None:
        self._note(f"rejected a peer from {entry.addr}: {why}")
        if session is not None:
            try:
                sock.send(session.sealed("error", f"rejected this rank: {why}"))  # best effort, never waits
            except OSError:
                pass
        self._close_pending(sock)

    def _close_pending(self, sock: socket.socket, note: str | None = None) -> None:
        entry = self.pending.pop(sock)
        if note:
            self._note(f"{note}: {entry.addr}")
        self.selector.unregister(sock)
        sock.close()

    def _expire_idle(self, now: float) -> None:
        while self.pending:
            sock, entry = next(iter(self.pending.items()))
            if now - entry.since < HELLO_TIMEOUT_S:
                return
            self._close_pending(sock, f"closed a connection without a hello in {HELLO_TIMEOUT_S:g} s")

    def _drop_member(self, rank: int) -> None:
        member = self.members.pop(rank)
        self.selector.unregister(member.sock)
        member.sock.close()

    def _note(self, text: str) -> None:
        self.notes += 1
        if self.notes <= NOTES_SHOWN:
            say(f"barrier {self.args.name}: {text}")
        elif self.notes == NOTES_SHOWN + 1:
            say(f"barrier {self.args.name}: more peers rejected or closed; counted, not shown")

    def rank_text(self, rank: int) -> str:
        return f"{rank} ({self.args.nodes[rank]})" if self.args.nodes else str(rank)

    def timeout_text(self) -> str:
        missing = ", ".join(self.rank_text(r) for r in range(self.args.size) if r not in self.members)
        return line("barrier-timeout", timeout=seconds_text(self.args.timeout), missing=missing)

    def _release(self) -> None:
        table = {
            str(rank): {"node": m.hello.get("node"), "data": m.hello.get("data")}
            for rank, m in sorted(self.members.items())
        }
        self._tell_all("release", {"ranks": table})

    def _tell_all(self, kind: str, body: Any) -> None:
        for rank, member in sorted(self.members.items()):
            self._send(member.sock, member.session.sealed(kind, body), rank)

    def _send(self, sock: socket.socket, data: bytes, rank: int) -> None:
        """To an authenticated rank: it reads what it is sent, so a short wait is fine."""
        try:
            sock.settimeout(SEND_TIMEOUT_S)
            sock.sendall(data)
        except OSError as err:
            say(f"barrier {self.args.name}: could not tell rank {rank}: {err}")
        finally:
            with contextlib.suppress(OSError):  # already closed
                sock.setblocking(False)  # back to never waiting when read

    def _close_all(self) -> None:
        # Closing everything is what makes waiting ranks fail at once on a timeout.
        for sock in [*self.pending, *(m.sock for m in self.members.values())]:
            sock.close()
        self.selector.close()
        self.listener.close()
        if self.notes > NOTES_SHOWN:
            say(f"barrier {self.args.name}: {self.notes} peers rejected or closed in all")


def _recv(sock: socket.socket) -> bytes | None:
    """What a non-blocking socket has; None if nothing yet, b"" once its peer closed or reset it."""
    try:
        return sock.recv(65536)
    except BlockingIOError:
        return None
    except OSError:
        return b""
