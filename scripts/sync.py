#!/usr/bin/env python3
"""Node-side sync (addresses, HTTP readiness wait, TCP barrier); stdlib only, runs in any container."""

from __future__ import annotations

import argparse
import fcntl
import http.client
import ipaddress
import json
import os
import selectors
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from typing import Any, NoReturn

EXIT_USAGE = 2  # argparse's own code
EXIT_PROCESS_GONE = 3
EXIT_NOT_READY = 4
EXIT_BARRIER = 5
EXIT_BIND = 6
EXIT_ADDR = 7
EXIT_PEERS = 8
EXIT_VERSION = 9

MAX_LINE = 1 << 20  # a hello line is small; this bounds a misbehaving peer
CONNECT_RETRY_S = 0.2
LEADER_GRACE_S = 10.0  # connected ranks wait this much longer than their own timeout for the leader's word


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _die(message: str, code: int) -> NoReturn:
    _say(message)
    sys.exit(code)


def _seconds(value: float) -> str:
    return f"{value:g}"


def _positive_float(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0 (got {text!r})")
    return value


# ---------------------------------------------------------------- addr


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


def _scontrol_nodeaddr(node: str) -> str:
    try:
        out = subprocess.run(
            ["scontrol", "show", "node", "--oneliner", node],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        raise AddrError(f"scontrol show node {node}: {err}") from None
    if out.returncode != 0:
        raise AddrError(f"scontrol show node {node} exited {out.returncode}: {out.stderr.strip()}")
    for field in out.stdout.split():
        key, _, value = field.partition("=")
        if key == "NodeAddr" and value:
            return value
    raise AddrError(f"scontrol show node {node} reports no NodeAddr")


def _ipv4_of(host: str) -> str:
    try:
        return str(ipaddress.IPv4Address(host))
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None, socket.AF_INET, socket.SOCK_STREAM)
    except OSError as err:
        raise AddrError(f"cannot resolve {host!r}: {err}") from None
    return str(infos[0][4][0])


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
            addr = _ipv4_of(_scontrol_nodeaddr(args.node))
        if ipaddress.IPv4Address(addr).is_loopback and not args.allow_loopback:
            # Advertised to peers: a loopback address makes Mooncake TCP transfers hang (FACTS §1).
            raise AddrError(
                f"{addr} is a loopback address; peers cannot reach it (set the runner's data-plane-interface)"
            )
    except AddrError as err:
        _die(f"addr {args.node}: {err}", EXIT_ADDR)
    print(addr)
    return 0


# ---------------------------------------------------------------- peers


def cmd_peers(args: argparse.Namespace) -> int:
    """Print one published field per rank, in rank order; every rank must have it, values distinct."""
    try:
        with open(args.file, encoding="utf-8") as table:
            ranks = json.load(table)["ranks"]
        values = [ranks[str(rank)]["data"][args.field] for rank in range(len(ranks))]
    except (OSError, ValueError, KeyError, TypeError) as err:
        problem = f"{type(err).__name__}: {err}"
        _die(f"peers: {args.file} has no {args.field!r} for every rank ({problem})", EXIT_PEERS)
    seen: dict[str, int] = {}
    for rank, value in enumerate(values):
        if not isinstance(value, str) or not value or "\n" in value:
            _die(f"peers: rank {rank} published {args.field}={value!r}", EXIT_PEERS)
        if args.distinct and value in seen:
            _die(f"peers: ranks {seen[value]} and {rank} both published {args.field}={value}", EXIT_PEERS)
        seen[value] = rank
    print("\n".join(values))
    return 0


# ---------------------------------------------------------------- dist-version

VERSION_PROBE = "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))"


class VersionError(Exception):
    """Why the installed version of a component could not be confirmed."""


def _interpreter_of(script: str) -> str:
    """The Python that runs a console script: its `#!/path/python` or `#!/usr/bin/env python3` line."""
    try:
        with open(script, "rb") as handle:
            first = handle.readline(512).decode("utf-8", "replace").strip()
        if not first.startswith("#!"):
            raise VersionError(f"{script} is not a script with a #! line")
    except OSError as err:
        raise VersionError(f"cannot read {script}: {err.strerror}") from None
    words = first[2:].split()
    if words and os.path.basename(words[0]) == "env":
        words = [w for w in words[1:] if not w.startswith("-")]
        words[:1] = [shutil.which(words[0]) or words[0]] if words else []
    if not words or not os.path.basename(words[0]).startswith("python"):
        raise VersionError(f"cannot tell which Python runs {script} (first line: {first[:80]!r})")
    return words[0]


def cmd_dist_version(args: argparse.Namespace) -> int:
    """The distribution behind a command must be exactly the pinned version (the image may lack it)."""
    try:
        script = shutil.which(args.command)
        if script is None:
            raise VersionError("not on PATH")
        python = _interpreter_of(script)
        try:
            probe = subprocess.run(
                [python, "-c", VERSION_PROBE, args.dist],
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as err:
            raise VersionError(f"{python}: {err}") from None
        found = probe.stdout.strip()
        if probe.returncode != 0 or not found:
            raise VersionError(f"no {args.dist} distribution installed for {python}")
        if found != args.expect:
            raise VersionError(f"{args.dist} {found} is installed ({python}), the recipe pins {args.expect}")
    except VersionError as err:
        _die(f"dist-version {args.command}: {err}", EXIT_VERSION)
    print(f"{args.command}: {args.dist} {found} ({python})")
    return 0


# ---------------------------------------------------------------- wait-http


def _process_gone(pid: int) -> bool:
    """True once pid no longer runs; a zombie counts as gone (its parent has not reaped it yet)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as stat:
            fields = stat.read().rsplit(")", 1)[-1].split()
    except OSError:
        return not os.path.isdir("/proc/self")  # no /proc: trust kill(); else it vanished meanwhile
    return bool(fields) and fields[0] == "Z"


def _key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE (got {text!r})")
    return key, value


def _lookup(body: Any, path: str) -> tuple[bool, Any]:
    node = body
    for part in path.split("."):
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return False, None
    return True, node


def _matches(actual: Any, expected: str) -> bool:
    if isinstance(actual, bool) or actual is None or isinstance(actual, float):
        return json.dumps(actual) == expected
    if isinstance(actual, int):
        try:
            return actual == int(expected)
        except ValueError:
            return False
    if isinstance(actual, str):
        return actual == expected
    return False  # objects and lists are not scalars


def _unmet_expectation(body: bytes, expects: list[tuple[str, str]]) -> str | None:
    """None when every KEY=VALUE holds against the JSON body, else what did not."""
    if not expects:
        return None
    try:
        doc = json.loads(body)
    except ValueError:
        return "body is not JSON"
    for key, expected in expects:
        found, actual = _lookup(doc, key)
        if not found:
            return f"{key} missing"
        if not _matches(actual, expected):
            return f"{key}={json.dumps(actual)}, expected {expected}"
    return None


def _probe(
    opener: urllib.request.OpenerDirector, url: str, timeout: float, expects: list[tuple[str, str]]
) -> str | None:
    """One GET; None when ready, else a short description of why not."""
    try:
        with opener.open(url, timeout=timeout) as response:
            status, body = response.status, response.read()
    except urllib.error.HTTPError as err:
        return f"HTTP {err.code}"
    except (urllib.error.URLError, http.client.HTTPException, OSError, ValueError) as err:
        reason = " ".join(str(getattr(err, "reason", err)).split())  # messages stay one line
        return reason[:200] or type(err).__name__
    if status != 200:
        return f"HTTP {status}"
    return _unmet_expectation(body, expects)


def cmd_wait_http(args: argparse.Namespace) -> int:
    name = args.name or args.url
    # Proxies from the environment must not intercept node-local health checks.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    deadline = time.monotonic() + args.timeout
    last = "no attempt"
    while True:
        if args.pid is not None and _process_gone(args.pid):
            _die(f"wait-http: {name} (pid {args.pid}) exited while waiting for {args.url}", EXIT_PROCESS_GONE)
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        problem = _probe(opener, args.url, min(2.0, max(remaining, 0.05)), args.expect)
        if problem is None:
            return 0
        last = problem
        time.sleep(max(0.0, min(args.interval, deadline - time.monotonic())))
    _die(
        f"wait-http: {name} not ready at {args.url} after {_seconds(args.timeout)} s (last: {last})",
        EXIT_NOT_READY,
    )


# ---------------------------------------------------------------- barrier


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
        _say(f"barrier {self.args.name}: rejected a peer: {problem}")
        try:
            sock.setblocking(True)
            sock.settimeout(1.0)
            _send_line(sock, {"error": f"rejected this rank: {problem}"})
        except OSError:
            pass  # the peer is gone already; it was rejected either way
        self._drop(sock)

    def timeout_text(self) -> str:
        missing = _missing_text(self.args, self.missing)
        return f"timed out after {_seconds(self.args.timeout)} s; missing rank(s) {missing}"

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
                _say(f"barrier {self.args.name}: could not tell rank {rank}: {err}")

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
        _die(f"barrier {args.name}: cannot listen on {bind_host}:{port}: {err}", EXIT_BIND)
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
            raise BarrierError(f"leader {host}:{port} unreachable for {_seconds(args.timeout)} s")
        try:
            return _connect_once(host, port, min(2.0, remaining))
        except OSError as err:
            if not told:
                _say(f"barrier {args.name}: waiting for leader {host}:{port} ({err})")
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
        _die(f"barrier {args.name}: --rank {args.rank} not in 0..{args.size - 1}", EXIT_USAGE)
    if args.nodes and len(args.nodes) != args.size:
        _die(f"barrier {args.name}: --nodes has {len(args.nodes)} names for --size {args.size}", EXIT_USAGE)
    if args.publish_field:
        args.publish = dict(args.publish_field)
    deadline = time.monotonic() + args.timeout
    try:
        if args.rank == 0:
            reply = _lead_and_join(args, deadline)
        else:
            reply = _join(args, deadline, deadline + LEADER_GRACE_S)
    except BarrierError as err:
        _die(f"barrier {args.name}: {err}", EXIT_BARRIER)
    if args.out:
        try:
            _write_atomically(args.out, reply)
        except OSError as err:
            _die(f"barrier {args.name}: cannot write {args.out}: {err}", EXIT_BARRIER)
    return 0


# ---------------------------------------------------------------- command line


def _wait_http_parser(sub: Any) -> None:
    p = sub.add_parser(
        "wait-http", help="poll an HTTP endpoint until ready, failing at once if its process dies"
    )
    p.add_argument("--url", required=True)
    p.add_argument("--timeout", required=True, type=_positive_float, help="seconds")
    p.add_argument("--pid", type=int, help="fail with exit 3 as soon as this process is gone")
    p.add_argument("--name", help="service name for messages (default: the URL)")
    p.add_argument("--interval", type=_positive_float, default=0.25, help="seconds between polls")
    p.add_argument(
        "--expect",
        type=_key_value,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="dotted JSON path that must equal VALUE (repeatable)",
    )
    p.set_defaults(func=cmd_wait_http)


def _barrier_parser(sub: Any) -> None:
    p = sub.add_parser("barrier", help="TCP rendezvous of SIZE ranks; rank 0 is the leader")
    p.add_argument("--name", required=True)
    p.add_argument("--rank", required=True, type=int)
    p.add_argument("--size", required=True, type=int)
    p.add_argument("--leader", required=True, type=_host_port, metavar="HOST:PORT")
    p.add_argument("--timeout", required=True, type=_positive_float, help="seconds")
    p.add_argument("--node", help="this node's name, sent to the others")
    p.add_argument(
        "--nodes", type=lambda s: s.split(","), help="comma-separated node names by rank (for messages)"
    )
    published = p.add_mutually_exclusive_group()
    published.add_argument("--publish", type=_json_value, help="JSON value shared with every rank")
    published.add_argument(
        "--publish-field",
        type=_key_value,
        action="append",
        metavar="KEY=VALUE",
        help="publish {KEY: VALUE, ...} (strings; repeatable) without writing JSON by hand",
    )
    p.add_argument("--out", help="write the released table of ranks here (atomically)")
    p.add_argument("--bind", help="address the leader listens on (default: the leader HOST)")
    p.set_defaults(func=cmd_barrier)


def _addr_parser(sub: Any) -> None:
    p = sub.add_parser("addr", help="print a node's data-plane IPv4 address")
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--slurm-nodeaddr", action="store_true", help="the node's NodeAddr in SLURM")
    source.add_argument("--interface", help="this host's address on that interface")
    p.add_argument("--allow-loopback", action="store_true", help="simulated nodes live on 127.0.0.x")
    p.add_argument("node", help="the node's SLURM name")
    p.set_defaults(func=cmd_addr)


def _dist_version_parser(sub: Any) -> None:
    p = sub.add_parser("dist-version", help="check the installed version of the package behind a command")
    p.add_argument("--command", required=True, help="console script on PATH, e.g. lmcache")
    p.add_argument("--dist", required=True, help="distribution name, e.g. lmcache")
    p.add_argument("--expect", required=True, help="the exact version the recipe pins")
    p.set_defaults(func=cmd_dist_version)


def _peers_parser(sub: Any) -> None:
    p = sub.add_parser("peers", help="print a field every rank published at a barrier, one line per rank")
    p.add_argument("--file", required=True, help="the barrier's --out table")
    p.add_argument("--field", required=True)
    p.add_argument("--distinct", action="store_true", help="fail if two ranks published the same value")
    p.set_defaults(func=cmd_peers)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sync.py", description=__doc__)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    _addr_parser(sub)
    _peers_parser(sub)
    _dist_version_parser(sub)
    _wait_http_parser(sub)
    _barrier_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
