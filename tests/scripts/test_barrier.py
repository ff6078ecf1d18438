"""`sync.py barrier`: ranks exchange data through the leader; only ranks holding the job's secret join, and
no peer, rank or fake leader can fill a rank, exhaust the leader or make a rank believe a table it did not
send. Each hostile peer is played over raw TCP (with scripts/barrierwire.py when it holds a key)."""

from __future__ import annotations

import json
import os
import re
import resource
import secrets
import select
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from conftest import LOAD_SLACK_S, SCRIPTS, barrier_args, listening, read, start_sync, sync, write_secret

sys.path.insert(0, str(SCRIPTS))
import barrierwire  # noqa: E402 (scripts/ is not a package: it runs on the nodes)
from barrierwire import Session, new_nonce  # noqa: E402

NODES = ("--nodes", "sim0,sim1,sim2")


def key_of(secret: Path) -> bytes:
    return bytes.fromhex(secret.read_text().strip())


def last_line(text: str) -> str:
    return text.strip().splitlines()[-1] if text.strip() else ""


class Peer:
    """A raw TCP peer of the leader: reads its lines, sends whatever a test says."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.addr = f"127.0.0.1:{self.sock.getsockname()[1]}"
        self.buffer = b""

    def line(self) -> bytes:
        """The next line; b"" once the leader closed the connection."""
        while b"\n" not in self.buffer:
            try:
                data = self.sock.recv(65536)
            except ConnectionResetError:
                data = b""
            if not data:
                return b""
            self.buffer += data
        found, _, self.buffer = self.buffer.partition(b"\n")
        return found

    def closed_by_leader(self) -> bool:
        """Reads what is left until the leader closes the connection (True) or 10 s pass (False)."""
        while True:
            try:
                if not self.sock.recv(65536):
                    return True
            except ConnectionResetError:
                return True
            except TimeoutError:
                return False

    def hello(
        self, key: bytes, rank: int, *, node: str = "intruder", size: int = 2, nonce: str = ""
    ) -> Session:
        """A hello sealed with KEY for the leader's challenge (or for NONCE: a replay from elsewhere)."""
        challenge = barrierwire.challenge_nonce(self.line())
        session = Session(key, nonce or challenge, new_nonce())
        hello = {"barrier": "start", "size": size, "rank": rank, "node": node, "data": {"addr": "6.6.6.6"}}
        self.sock.sendall(session.hello_line(hello))
        return session


@pytest.fixture
def peers() -> Iterator[Callable[[int], Peer]]:
    made: list[Peer] = []

    def connect(port: int) -> Peer:
        made.append(Peer(port))
        return made[-1]

    yield connect
    for peer in made:
        peer.sock.close()


def start_leader(
    port: int, size: int, secret: Path, tmp_path: Path, procs: list, timeout: float = 20, **popen
):
    """Rank 0 of SIZE in the background, --out tmp_path/out0.json, stderr in tmp_path/err0."""
    out = tmp_path / "out0.json"
    nodes = ",".join(f"sim{rank}" for rank in range(size))
    args = [*barrier_args(port, 0, size, secret, timeout=timeout), "--nodes", nodes, "--out", str(out)]
    procs.append(start_sync(*args, "--publish-field", "addr=10.0.0.1", stderr=tmp_path / "err0", **popen))
    return procs[-1], out


# ---------------------------------------------------------------- ranks of the job


def test_three_ranks_exchange_data_even_when_early(tmp_path, free_port, procs, poll, secret):
    port = free_port()
    for rank in (1, 2):
        procs.append(
            start_sync(
                *barrier_args(port, rank, 3, secret),
                *NODES,
                *("--publish", f'{{"rank": {rank}}}', "--out", str(tmp_path / f"out{rank}.json")),
                stderr=tmp_path / f"err{rank}",
            )
        )
    for rank in (1, 2):  # both are retrying before the leader is up
        poll(lambda r=rank: "waiting for leader" in read(tmp_path / f"err{r}"), 10, f"rank {rank} to retry")
    leader = sync(
        *barrier_args(port, 0, 3, secret),
        *NODES,
        *("--publish", '{"prefill_url": "http://sim0:8000"}', "--out", str(tmp_path / "out0.json")),
    )
    assert leader.returncode == 0, leader.stderr
    assert [proc.wait(timeout=10) for proc in procs] == [0, 0]
    expected = {
        "ranks": {
            "0": {"node": "sim0", "data": {"prefill_url": "http://sim0:8000"}},
            "1": {"node": "sim1", "data": {"rank": 1}},
            "2": {"node": "sim2", "data": {"rank": 2}},
        }
    }
    for rank in range(3):
        assert json.loads((tmp_path / f"out{rank}.json").read_text()) == expected
    assert not list(tmp_path.glob(".barrier-*"))  # no temporary file left by the atomic write


@pytest.mark.parametrize(
    "addresses, code, said",
    [
        (("10.0.0.1", "10.0.0.2"), 0, ""),
        (("10.0.0.1", "10.0.0.1"), 8, "barrier start: ranks 0 and 1 both published addr=10.0.0.1\n"),
        (("10.0.0.1", "10.0.0.2\r"), 8, "barrier start: rank 1 published addr='10.0.0.2\\r': not printable "),
    ],
    ids=["distinct", "clash", "not-one-word"],
)
def test_every_rank_writes_the_peers_addresses_checked(
    tmp_path, free_port, procs, secret, addresses, code, said
):
    """--peer-addresses: the addresses by rank, one line each, for the node script's array; a clash or a
    value that is not one address fails every rank alike, before any engine gets it."""
    port = free_port()
    for rank in (1, 0):
        procs.append(
            start_sync(
                *barrier_args(port, rank, 2, secret),
                *("--nodes", "sim0,sim1", "--publish-field", f"addr={addresses[rank]}"),
                *("--peer-addresses", str(tmp_path / f"addrs{rank}")),
                stderr=tmp_path / f"err{rank}",
            )
        )
    assert [proc.wait(timeout=20) for proc in procs] == [code, code]
    for rank in (0, 1):
        if code == 0:
            assert (tmp_path / f"addrs{rank}").read_text() == "10.0.0.1\n10.0.0.2\n"
        else:
            assert not (tmp_path / f"addrs{rank}").exists()
            assert read(tmp_path / f"err{rank}").splitlines()[-1].startswith(said.rstrip("\n"))


def test_the_leader_names_the_missing_node_and_releases_the_waiting(tmp_path, free_port, procs, secret):
    port = free_port()
    procs.append(start_sync(*barrier_args(port, 1, 3, secret, timeout=30), *NODES, stderr=tmp_path / "err1"))
    start = time.monotonic()
    leader = sync(*barrier_args(port, 0, 3, secret, timeout=1.5), *NODES)
    assert leader.returncode == 5
    assert leader.stderr == "barrier start: timed out after 1.5 s; missing rank(s) 2 (sim2)\n"
    assert procs[0].wait(timeout=5) == 5  # at once, not after its own 30 s
    assert time.monotonic() - start < 6
    # every waiting rank reports the leader's verdict, so each node's output names the missing one
    assert read(tmp_path / "err1").endswith(
        "barrier start: leader: timed out after 1.5 s; missing rank(s) 2 (sim2)\n"
    )


def test_a_rank_with_a_shorter_clock_still_reports_the_leaders_verdict(tmp_path, free_port, procs, secret):
    """A rank that started waiting earlier must not give up first with a vaguer message."""
    port = free_port()
    procs.append(start_sync(*barrier_args(port, 1, 3, secret, timeout=1), *NODES, stderr=tmp_path / "err1"))
    leader = sync(*barrier_args(port, 0, 3, secret, timeout=2), *NODES)
    assert leader.returncode == 5
    assert procs[0].wait(timeout=15) == 5
    assert read(tmp_path / "err1").endswith(
        "barrier start: leader: timed out after 2 s; missing rank(s) 2 (sim2)\n"
    )


def test_leader_unreachable(free_port, secret):
    port = free_port()
    start = time.monotonic()
    done = sync(*barrier_args(port, 1, 2, secret, timeout=1))
    assert done.returncode == 5
    assert done.stderr.endswith(f"barrier start: leader 127.0.0.1:{port} unreachable for 1 s\n")
    assert 1 <= time.monotonic() - start < 5


def test_leader_port_in_use(secret):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = sync(*barrier_args(port, 0, 2, secret, timeout=5))
    assert done.returncode == 6
    assert done.stderr.startswith(f"barrier start: cannot listen on 127.0.0.1:{port}: ")


def test_a_rank_of_another_barrier_is_told_why_and_the_leader_keeps_waiting(
    tmp_path, free_port, procs, secret
):
    port = free_port()
    procs.append(start_sync(*barrier_args(port, 0, 2, secret), stderr=tmp_path / "err0"))
    wrong = sync(*barrier_args(port, 1, 2, secret, name="other"))
    assert wrong.returncode == 5
    assert "barrier other: leader: rejected this rank: barrier 'other' != 'start'" in wrong.stderr
    wrong_size = sync(*barrier_args(port, 1, 3, secret))
    assert wrong_size.returncode == 5 and "size 3 != 2" in wrong_size.stderr
    right = sync(*barrier_args(port, 1, 2, secret))
    assert right.returncode == 0, right.stderr
    assert procs[0].wait(timeout=10) == 0
    assert read(tmp_path / "err0").count("rejected a peer") == 2


def test_publish_field_serializes_any_text(tmp_path, free_port, secret):
    """A value with quotes or a newline is published as data, not spliced into JSON by hand."""
    hostile = 'a"b\\c\n$(x)'
    out = tmp_path / "out.json"
    done = sync(
        *barrier_args(free_port(), 0, 1, secret), "--publish-field", f"addr={hostile}", "--out", str(out)
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(out.read_text())["ranks"]["0"]["data"] == {"addr": hostile}


# ---------------------------------------------------------------- the secret file


@pytest.mark.parametrize(
    "content, mode, problem",
    [
        (None, 0o600, "cannot open it: No such file or directory"),
        ("", 0o600, "empty"),
        ("\n", 0o600, "empty"),
        ("ab" * 15 + "\n", 0o600, "30 hex digits; it needs an even number, at least 32"),
        ("a" * 33, 0o600, "33 hex digits; it needs an even number, at least 32"),
        ("zz" * 32, 0o600, "not one line of hex digits"),
        ("ab" * 32 + "\n" + "cd" * 32 + "\n", 0o600, "not one line of hex digits"),
        ("ab" * 3000, 0o600, "not one line of hex digits"),
        ("ab" * 32, 0o644, "mode 0644 lets group or others at it (chmod 600)"),
        ("ab" * 32, 0o640, "mode 0640 lets group or others at it"),
        ("ab" * 32, 0o602, "mode 0602 lets group or others at it"),
        ("directory", 0o700, "cannot open it: not a regular file"),
        ("fifo", 0o600, "cannot open it: not a regular file"),  # opened without waiting for a writer
    ],
)
def test_a_secret_file_that_proves_nothing_is_refused_saying_why(tmp_path, free_port, content, mode, problem):
    path = tmp_path / "job.secret"
    if content == "directory":
        path.mkdir(mode=mode)
    elif content == "fifo":
        os.mkfifo(path, mode)
    elif content is not None:
        write_secret(path, content, mode)
    done = sync(*barrier_args(free_port(), 1, 2, path, timeout=5), timeout=10)
    assert done.returncode == 13
    assert done.stderr.startswith(f"barrier start: secret file {path}: {problem}")
    assert done.stderr.count("\n") == 1


@pytest.mark.parametrize(
    "content, mode", [("ab" * 32, 0o600), ("AB" * 16 + "\r\n", 0o400), ("0f" * 64 + "\n", 0o600)]
)
def test_a_secret_file_as_submit_writes_it_or_close_is_accepted(tmp_path, free_port, content, mode):
    path = write_secret(tmp_path / "job.secret", content, mode)
    done = sync(*barrier_args(free_port(), 0, 1, path, timeout=5))
    assert done.returncode == 0, done.stderr


# ---------------------------------------------------------------- peers that do not hold the secret

OTHER_KEY = secrets.token_bytes(32)


def send(data: bytes) -> Callable[[Peer, bytes], None]:
    def send_to(peer: Peer, key: bytes) -> None:
        try:
            peer.sock.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # closed by the leader before all of it was sent: what the test waits for anyway

    return send_to


UNSEALED = {"barrier": "start", "size": 2, "rank": 1, "node": "intruder", "data": {"addr": "6.6.6.6"}}


HOSTILE = {
    # what it sends: (how, what the leader notes)
    "an unsealed JSON hello": (send(json.dumps(UNSEALED).encode() + b"\n"), "not a hello line"),
    "a hello sealed with another secret": (lambda p, k: p.hello(OTHER_KEY, 1), "bad MAC"),
    "a hello replayed from another connection": (lambda p, k: p.hello(k, 1, nonce=new_nonce()), "bad MAC"),
    "garbage bytes": (send(b"\x00\xff\r" * 100 + b"\n"), "not a hello line"),
    "a line nested 100,000 deep": (
        send(b"[" * 100_000 + b"]" * 100_000 + b"\n"),
        "no hello line within 65536 bytes",
    ),
}


@pytest.mark.parametrize("hostile", list(HOSTILE), ids=lambda h: h.replace(" ", "-"))
def test_a_peer_without_the_secret_never_fills_a_rank(
    tmp_path, free_port, procs, poll, peers, secret, hostile
):
    send, note = HOSTILE[hostile]
    port = free_port()
    leader, out = start_leader(port, 2, secret, tmp_path, procs)
    poll(lambda: listening(port), 10, "the leader to listen")
    peer = peers(port)
    send(peer, key_of(secret))
    assert peer.closed_by_leader()
    poll(lambda: f"rejected a peer from {peer.addr}: {note}" in read(tmp_path / "err0"), 10, "the rejection")
    rank1 = sync(*barrier_args(port, 1, 2, secret), "--publish-field", "addr=10.0.0.2")
    assert rank1.returncode == 0, rank1.stderr
    assert leader.wait(timeout=10) == 0, read(tmp_path / "err0")
    assert json.loads(out.read_text())["ranks"]["1"] == {"node": "sim1", "data": {"addr": "10.0.0.2"}}
    assert "Traceback" not in read(tmp_path / "err0")


def test_a_sealed_hello_nested_too_deep_is_refused_not_parsed(
    tmp_path, free_port, procs, poll, peers, secret
):
    """Even a peer holding the secret cannot make the leader recurse: nesting is bounded before json.loads."""
    port = free_port()
    leader, _ = start_leader(port, 2, secret, tmp_path, procs)
    poll(lambda: listening(port), 10, "the leader to listen")
    peer = peers(port)
    session = Session(key_of(secret), barrierwire.challenge_nonce(peer.line()), new_nonce())
    deep = b"[" * 30_000 + b"]" * 30_000  # within the line limit, far beyond the nesting one
    peer.sock.sendall(
        b" ".join((b"hello", session.rank_nonce.encode(), session.mac("hello", deep), deep)) + b"\n"
    )
    kind, data = session.opened(peer.line(), ("error",))
    assert json.loads(data) == "rejected this rank: nested deeper than 32 levels"
    assert sync(*barrier_args(port, 1, 2, secret)).returncode == 0
    assert leader.wait(timeout=10) == 0


def test_a_rank_with_another_jobs_secret_fails_at_once_saying_so(tmp_path, free_port, procs, poll, secret):
    port = free_port()
    start_leader(port, 2, secret, tmp_path, procs, timeout=30)
    other = write_secret(tmp_path / "other.secret")
    start = time.monotonic()
    done = sync(*barrier_args(port, 1, 2, other, timeout=20))
    assert done.returncode == 5
    assert last_line(done.stderr) == (
        f"barrier start: the answer of 127.0.0.1:{port} is not sealed with this job's secret "
        f"(is --secret-file this job's, and 127.0.0.1:{port} this job's leader?)"
    )
    assert time.monotonic() - start < 10  # not its 20 s timeout
    assert re.search(r"rejected a peer from 127\.0\.0\.1:\d+: bad MAC", read(tmp_path / "err0"))


# ---------------------------------------------------------------- claims of a rank


def test_a_second_live_claim_of_a_rank_fails_the_barrier_for_everyone(
    tmp_path, free_port, procs, poll, peers, secret
):
    port = free_port()
    leader, _ = start_leader(port, 3, secret, tmp_path, procs)
    poll(lambda: listening(port), 10, "the leader to listen")
    first = peers(port)
    session = first.hello(key_of(secret), 2, size=3)
    assert session.opened(first.line(), ("registered",))[0] == "registered"
    second = sync(*barrier_args(port, 2, 3, secret))
    claimed = rf"rank 2 \(sim2\) claimed twice: by {re.escape(first.addr)} and 127\.0\.0\.1:\d+"
    assert second.returncode == 5
    assert re.fullmatch(rf"barrier start: leader: {claimed}", last_line(second.stderr))
    assert leader.wait(timeout=10) == 5
    assert re.fullmatch(rf"barrier start: {claimed}", last_line(read(tmp_path / "err0")))
    kind, data = session.opened(first.line(), ("error",))  # the first claimant is told as well
    assert re.fullmatch(claimed, json.loads(data))


def test_a_rank_that_reconnects_after_its_connection_closed_takes_its_place(
    tmp_path, free_port, procs, poll, peers, secret
):
    port = free_port()
    leader, out = start_leader(port, 3, secret, tmp_path, procs)
    poll(lambda: listening(port), 10, "the leader to listen")
    stale = peers(port)
    session = stale.hello(key_of(secret), 1, node="stale", size=3)
    assert session.opened(stale.line(), ("registered",))[0] == "registered"
    stale.sock.close()  # the node's first attempt died
    procs.append(start_sync(*barrier_args(port, 1, 3, secret), stderr=tmp_path / "err1"))
    assert sync(*barrier_args(port, 2, 3, secret)).returncode == 0
    assert [proc.wait(timeout=10) for proc in procs] == [0, 0]
    assert json.loads(out.read_text())["ranks"]["1"]["node"] == "sim1"


# ---------------------------------------------------------------- exhaustion


def low_descriptor_limit() -> None:  # runs in the leader's process before it starts
    resource.setrlimit(resource.RLIMIT_NOFILE, (48, 48))


def test_the_leader_survives_80_idle_connections_with_few_descriptors(
    tmp_path, free_port, procs, poll, secret
):
    """80 connections that never say hello, against a leader allowed 48 descriptors: the oldest idle ones
    are closed as new ones come, and the real ranks are still released."""
    port = free_port()
    leader, out = start_leader(port, 3, secret, tmp_path, procs, preexec_fn=low_descriptor_limit)
    poll(lambda: listening(port), 10, "the leader to listen")
    idle = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(80)]
    try:
        start = time.monotonic()
        for rank in (1, 2):
            procs.append(start_sync(*barrier_args(port, rank, 3, secret), stderr=tmp_path / f"err{rank}"))
        assert [proc.wait(timeout=20) for proc in procs] == [0, 0, 0], read(tmp_path / "err0")
        print(f"released {time.monotonic() - start:.2f} s after the 80 idle connections")
    finally:
        for sock in idle:
            sock.close()
    err = read(tmp_path / "err0")
    assert "closed, the oldest of too many connections without a hello" in err and "Traceback" not in err
    assert sorted(json.loads(out.read_text())["ranks"]) == ["0", "1", "2"]


def test_a_slow_peer_loses_its_slot_within_the_hello_deadline(
    tmp_path, free_port, procs, poll, peers, secret
):
    """A peer dripping one byte at a time never completes a hello: it is closed 5 s after connecting."""
    port = free_port()
    start_leader(port, 2, secret, tmp_path, procs)
    poll(lambda: listening(port), 10, "the leader to listen")
    peer = peers(port)
    start = time.monotonic()
    assert peer.line().startswith(b"challenge ")
    closed = False
    while not closed and time.monotonic() - start < 15:
        try:
            peer.sock.sendall(b"h")
            readable, _, _ = select.select([peer.sock], [], [], 0.2)
            closed = bool(readable) and peer.sock.recv(100) == b""
        except (BrokenPipeError, ConnectionResetError):
            closed = True
    elapsed = time.monotonic() - start
    print(f"slow peer closed after {elapsed:.2f} s")
    assert closed and 4.5 <= elapsed < 5 + LOAD_SLACK_S
    poll(
        lambda: f"closed a connection without a hello in 5 s: {peer.addr}" in read(tmp_path / "err0"),
        5,
        "note",
    )


# ---------------------------------------------------------------- fake leaders


def release_line(session: Session) -> bytes:
    return session.sealed("release", {"ranks": {"0": {"node": "evil", "data": {"addr": "6.6.6.6"}}, "1": {}}})


def fake_behaviours(key: bytes) -> dict[str, Callable[[socket.socket, bytes], None]]:
    """How a fake leader answers one connection, given the rank's hello line."""

    def challenge(conn: socket.socket) -> str:
        nonce = new_nonce()
        conn.sendall(barrierwire.challenge_line(nonce))
        return nonce

    def forged(conn: socket.socket) -> None:  # a well-formed line with a MAC it cannot compute
        challenge(conn)
        conn.recv(65536)
        conn.sendall(b"release " + b"0" * 64 + b' {"ranks": {"0": {"node": "evil", "data": null}}}\n')

    def replayed(conn: socket.socket) -> None:  # a genuine sealed release, recorded on another connection
        challenge(conn)
        conn.recv(65536)
        conn.sendall(release_line(Session(key, new_nonce(), new_nonce())))

    def nested(conn: socket.socket) -> None:
        challenge(conn)
        conn.recv(65536)
        conn.sendall(b"[" * 100_000 + b"]" * 100_000 + b"\n")

    def old_protocol(conn: socket.socket) -> None:
        conn.sendall(b'{"ranks": {"0": {"node": "evil", "data": null}}}\n')

    def silent(conn: socket.socket) -> None:
        challenge(conn)
        time.sleep(30)

    def drip(conn: socket.socket) -> None:  # never a whole line
        for _ in range(300):
            conn.sendall(b"c")
            time.sleep(0.1)

    return {
        "forged MAC": (forged, "is not sealed with this job's secret"),
        "replayed release": (replayed, "is not sealed with this job's secret"),
        "nested 100,000 deep": (nested, "line longer than|is not sealed with this job's secret"),
        "no challenge": (old_protocol, "does not speak this barrier's protocol"),
        "silent after the challenge": (
            silent,
            r"did not register this rank in 2 s \(no answer to its hello\)",
        ),
        "drip": (drip, r"did not register this rank in 2 s \(no challenge from the leader\)"),
    }


@pytest.fixture
def fake_leader(secret) -> Iterator[Callable[[str], tuple[int, str]]]:
    listener = socket.create_server(("127.0.0.1", 0))
    behaviours = fake_behaviours(key_of(secret))

    def serve(name: str) -> tuple[int, str]:
        behave, expected = behaviours[name]

        def loop() -> None:
            while True:
                try:
                    conn, _ = listener.accept()
                except OSError:
                    return
                with conn:
                    try:
                        behave(conn)
                    except OSError:
                        pass

        threading.Thread(target=loop, daemon=True).start()
        return listener.getsockname()[1], expected

    yield serve
    listener.close()


FAKES = [
    "forged MAC",
    "replayed release",
    "nested 100,000 deep",
    "no challenge",
    "silent after the challenge",
    "drip",
]


@pytest.mark.parametrize("name", FAKES, ids=lambda n: n.replace(" ", "-"))
def test_a_fake_leader_can_neither_release_nor_crash_nor_hold_a_rank(fake_leader, secret, tmp_path, name):
    port, expected = fake_leader(name)
    start = time.monotonic()
    done = sync(*barrier_args(port, 1, 2, secret, timeout=2), "--out", str(tmp_path / "out.json"), timeout=30)
    elapsed = time.monotonic() - start
    assert done.returncode == 5, done.stderr
    assert re.search(expected, last_line(done.stderr)), done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "out.json").exists()
    assert elapsed < 2 + LOAD_SLACK_S  # its own deadline, not the fake's 30 s
