"""scripts/sync.py as the node script runs it: exit codes, one-line messages, barrier data exchange."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from conftest import SYNC

# SYNC_PYTHON runs sync.py under another interpreter (it must work on Python 3.8 in old containers).
PYTHON = os.environ.get("SYNC_PYTHON", sys.executable)


def sync(*args: str, timeout: float = 20) -> subprocess.CompletedProcess:
    return subprocess.run(
        [PYTHON, str(SYNC), *args], capture_output=True, text=True, timeout=timeout, check=False
    )


def start_sync(*args: str, stderr: Path) -> subprocess.Popen:
    with open(stderr, "w") as err:
        return subprocess.Popen([PYTHON, str(SYNC), *args], stdout=subprocess.DEVNULL, stderr=err)


def barrier_args(port: int, rank: int, size: int, timeout: float = 10, name: str = "start") -> list[str]:
    return [
        "barrier",
        "--name",
        name,
        "--rank",
        str(rank),
        "--size",
        str(size),
        "--leader",
        f"127.0.0.1:{port}",
        "--timeout",
        str(timeout),
        "--node",
        f"sim{rank}",
    ]


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen]]:
    """Background sync.py processes of a test; killed if the test fails before they end."""
    started: list[subprocess.Popen] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


BODY = {"prefill": {"healthy": 2}, "decode": {"healthy": 1}, "model": "m", "ready": True, "ratio": 0.5}


@pytest.fixture
def http_url() -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
            body = json.dumps(BODY).encode()
            self.send_response(200 if self.path == "/health" else 503)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


# ---------------------------------------------------------------- command line


@pytest.mark.parametrize("command", [[], ["wait-http"], ["barrier"]])
def test_help(command):
    done = sync(*command, "--help")
    assert done.returncode == 0 and "usage: sync.py" in done.stdout


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["wait-http", "--url", "http://x"],
        ["wait-http", "--url", "http://x", "--timeout", "0"],
        ["wait-http", "--url", "http://x", "--timeout", "1", "--expect", "novalue"],
        ["barrier", "--name", "b", "--rank", "0", "--size", "2", "--leader", "nohost", "--timeout", "1"],
        [
            "barrier",
            "--name",
            "b",
            "--rank",
            "0",
            "--size",
            "2",
            "--leader",
            "h:1",
            "--timeout",
            "1",
            "--publish",
            "{",
        ],
        ["barrier", "--name", "b", "--rank", "2", "--size", "2", "--leader", "h:1", "--timeout", "1"],
        [
            "barrier",
            "--name",
            "b",
            "--rank",
            "0",
            "--size",
            "2",
            "--leader",
            "h:1",
            "--timeout",
            "1",
            "--nodes",
            "a",
        ],
    ],
)
def test_usage_errors_exit_2(args):
    assert sync(*args).returncode == 2


# ---------------------------------------------------------------- wait-http


def test_wait_http_ready_when_every_expectation_holds(http_url):
    expects = ["prefill.healthy=2", "decode.healthy=01", "model=m", "ready=true", "ratio=0.5"]
    done = sync(
        "wait-http",
        "--url",
        f"{http_url}/health",
        "--timeout",
        "5",
        *[arg for e in expects for arg in ("--expect", e)],
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""


def test_wait_http_unmet_expectation_times_out_saying_why(http_url):
    done = sync(
        "wait-http",
        "--url",
        f"{http_url}/health",
        "--timeout",
        "0.6",
        "--name",
        "router",
        "--expect",
        "prefill.healthy=3",
    )
    assert done.returncode == 4
    assert done.stderr == (
        f"wait-http: router not ready at {http_url}/health after 0.6 s "
        "(last: prefill.healthy=2, expected 3)\n"
    )


def test_wait_http_reports_the_last_status(http_url):
    done = sync("wait-http", "--url", f"{http_url}/other", "--timeout", "0.5", "--name", "api")
    assert done.returncode == 4
    assert done.stderr.endswith("after 0.5 s (last: HTTP 503)\n")


def test_wait_http_connection_refused_times_out(free_port):
    url = f"http://127.0.0.1:{free_port()}/health"
    done = sync("wait-http", "--url", url, "--timeout", "0.5", "--name", "vllm")
    assert done.returncode == 4
    assert re.fullmatch(
        rf"wait-http: vllm not ready at {re.escape(url)} after 0\.5 s \(last: .*refused.*\)\n", done.stderr
    )


def test_wait_http_fails_at_once_when_the_process_is_a_zombie(free_port):
    child = subprocess.Popen([sys.executable, "-c", "pass"])  # never waited for: it stays a zombie
    try:
        url = f"http://127.0.0.1:{free_port()}/health"
        start = time.monotonic()
        done = sync(
            "wait-http", "--url", url, "--timeout", "30", "--pid", str(child.pid), "--name", "lmcache"
        )
        assert done.returncode == 3
        assert done.stderr == f"wait-http: lmcache (pid {child.pid}) exited while waiting for {url}\n"
        assert time.monotonic() - start < 10
    finally:
        child.wait()


def test_wait_http_fails_at_once_when_the_process_is_gone(free_port):
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    done = sync(
        "wait-http", "--url", f"http://127.0.0.1:{free_port()}/", "--timeout", "30", "--pid", str(child.pid)
    )
    assert done.returncode == 3
    assert "exited while waiting for" in done.stderr


# ---------------------------------------------------------------- barrier


def listening(port: int) -> bool:
    """Whether something listens on the port (checked without connecting, which could self-connect)."""
    with open("/proc/net/tcp") as table:
        return any(line.split()[1].endswith(f":{port:04X}") and line.split()[3] == "0A" for line in table)


def read(path: Path) -> str:
    return path.read_text() if path.exists() else ""


def test_barrier_three_ranks_exchange_data_even_when_early(tmp_path, free_port, procs, poll):
    port = free_port()
    nodes = ["--nodes", "sim0,sim1,sim2"]
    for rank in (1, 2):
        procs.append(
            start_sync(
                *barrier_args(port, rank, 3),
                *nodes,
                "--publish",
                f'{{"rank": {rank}}}',
                "--out",
                str(tmp_path / f"out{rank}.json"),
                stderr=tmp_path / f"err{rank}",
            )
        )
    for rank in (1, 2):  # both are retrying before the leader is up
        poll(lambda r=rank: "waiting for leader" in read(tmp_path / f"err{r}"), 10, f"rank {rank} to retry")
    leader = sync(
        *barrier_args(port, 0, 3),
        *nodes,
        "--publish",
        '{"prefill_url": "http://sim0:8000"}',
        "--out",
        str(tmp_path / "out0.json"),
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


def test_barrier_leader_names_the_missing_node_and_releases_the_waiting(tmp_path, free_port, procs):
    port = free_port()
    nodes = ["--nodes", "sim0,sim1,sim2"]
    procs.append(start_sync(*barrier_args(port, 1, 3, timeout=30), *nodes, stderr=tmp_path / "err1"))
    start = time.monotonic()
    leader = sync(*barrier_args(port, 0, 3, timeout=1.5), *nodes)
    assert leader.returncode == 5
    assert leader.stderr == "barrier start: timed out after 1.5 s; missing rank(s) 2 (sim2)\n"
    assert procs[0].wait(timeout=5) == 5  # at once, not after its own 30 s
    assert time.monotonic() - start < 6
    # every waiting rank reports the leader's verdict, so each node's output names the missing one
    assert read(tmp_path / "err1").endswith(
        "barrier start: leader: timed out after 1.5 s; missing rank(s) 2 (sim2)\n"
    )


def test_barrier_a_rank_with_a_shorter_clock_still_reports_the_leaders_verdict(tmp_path, free_port, procs):
    """A rank that started waiting earlier must not give up first with a vaguer message."""
    port = free_port()
    nodes = ["--nodes", "sim0,sim1,sim2"]
    procs.append(start_sync(*barrier_args(port, 1, 3, timeout=1), *nodes, stderr=tmp_path / "err1"))
    leader = sync(*barrier_args(port, 0, 3, timeout=2), *nodes)
    assert leader.returncode == 5
    assert procs[0].wait(timeout=15) == 5
    assert read(tmp_path / "err1").endswith(
        "barrier start: leader: timed out after 2 s; missing rank(s) 2 (sim2)\n"
    )


def test_barrier_leader_unreachable(free_port):
    port = free_port()
    start = time.monotonic()
    done = sync(*barrier_args(port, 1, 2, timeout=1))
    assert done.returncode == 5
    assert done.stderr.endswith(f"barrier start: leader 127.0.0.1:{port} unreachable for 1 s\n")
    assert 1 <= time.monotonic() - start < 5


def test_barrier_leader_port_in_use(free_port):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = sync(*barrier_args(port, 0, 2, timeout=5))
    assert done.returncode == 6
    assert done.stderr.startswith(f"barrier start: cannot listen on 127.0.0.1:{port}: ")


def test_barrier_rejects_a_foreign_barrier_and_keeps_waiting(tmp_path, free_port, procs, poll):
    port = free_port()
    procs.append(start_sync(*barrier_args(port, 0, 2), stderr=tmp_path / "err0"))
    wrong = sync(*barrier_args(port, 1, 2, name="other"))
    assert wrong.returncode == 5
    assert "barrier other: leader: rejected this rank: barrier 'other' != 'start'" in wrong.stderr
    wrong_size = sync(*barrier_args(port, 1, 3))
    assert wrong_size.returncode == 5 and "size 3 != 2" in wrong_size.stderr
    right = sync(*barrier_args(port, 1, 2))
    assert right.returncode == 0, right.stderr
    assert procs[0].wait(timeout=10) == 0
    assert read(tmp_path / "err0").count("rejected a peer") == 2


def test_barrier_retry_of_a_rank_replaces_its_earlier_connection(tmp_path, free_port, procs, poll):
    port = free_port()
    out = tmp_path / "out0.json"
    procs.append(start_sync(*barrier_args(port, 0, 3), "--out", str(out), stderr=tmp_path / "err0"))
    poll(lambda: listening(port), 10, "the leader to listen")
    hello = {"barrier": "start", "size": 3, "rank": 1, "node": "stale", "data": None}
    with socket.create_connection(("127.0.0.1", port), timeout=5) as stale:
        stale.sendall(json.dumps(hello).encode() + b"\n")
        procs.append(start_sync(*barrier_args(port, 1, 3), stderr=tmp_path / "err1"))
        assert stale.recv(1000) == b""  # replaced by the retry: closed without a release
    assert sync(*barrier_args(port, 2, 3)).returncode == 0
    assert [proc.wait(timeout=10) for proc in procs] == [0, 0]
    assert json.loads(out.read_text())["ranks"]["1"]["node"] == "sim1"


# ---------------------------------------------------------------- addr, peers, --publish-field


@pytest.fixture
def fake_scontrol(tmp_path: Path) -> dict[str, str]:
    """scontrol on PATH answering `show node` with the NodeAddr the test sets (or failing)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "scontrol"
    script.write_text(
        '#!/bin/sh\n[ -n "$FAKE_NODEADDR" ] || { echo "Node $4 not found" >&2; exit 1; }\n'
        'echo "NodeName=$4 Arch=x86_64 CoresPerSocket=1 NodeAddr=$FAKE_NODEADDR NodeHostName=$4"\n'
    )
    script.chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}


def addr(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [PYTHON, str(SYNC), "addr", *args], capture_output=True, text=True, timeout=20, env=env, check=False
    )


def test_addr_from_slurm_nodeaddr(fake_scontrol):
    done = addr(
        "--slurm-nodeaddr", "--allow-loopback", "sim2", env={**fake_scontrol, "FAKE_NODEADDR": "127.0.0.12"}
    )
    assert (done.returncode, done.stdout) == (0, "127.0.0.12\n")


def test_addr_refuses_loopback_unless_allowed(fake_scontrol):
    """Advertised to peers, a loopback address makes Mooncake TCP hang (FACTS §1)."""
    done = addr("--slurm-nodeaddr", "node7", env={**fake_scontrol, "FAKE_NODEADDR": "localhost"})
    assert done.returncode == 7
    assert "127.0.0.1 is a loopback address" in done.stderr and "data-plane-interface" in done.stderr


def test_addr_unknown_node_says_what_scontrol_said(fake_scontrol):
    done = addr("--slurm-nodeaddr", "nosuch", env={**fake_scontrol, "FAKE_NODEADDR": ""})
    assert done.returncode == 7
    assert "scontrol show node nosuch exited 1: Node nosuch not found" in done.stderr


def test_addr_of_an_interface_on_this_host():
    me = socket.gethostname()
    assert addr("--interface", "lo", "--allow-loopback", me).stdout == "127.0.0.1\n"
    missing = addr("--interface", "nosuch0", me)
    assert missing.returncode == 7 and "interface 'nosuch0' has no IPv4 address here" in missing.stderr


def test_addr_of_an_interface_only_on_the_node_itself():
    done = addr("--interface", "lo", "--allow-loopback", "some-other-node")
    assert done.returncode == 7 and "'some-other-node' is not this host" in done.stderr


def write_table(path: Path, data: dict[int, object]) -> Path:
    path.write_text(json.dumps({"ranks": {str(r): {"node": f"n{r}", "data": d} for r, d in data.items()}}))
    return path


def test_peers_prints_one_value_per_rank_in_rank_order(tmp_path):
    table = write_table(tmp_path / "t.json", {1: {"addr": "10.0.0.2"}, 0: {"addr": "10.0.0.1"}})
    done = sync("peers", "--file", str(table), "--field", "addr", "--distinct")
    assert (done.returncode, done.stdout) == (0, "10.0.0.1\n10.0.0.2\n")


@pytest.mark.parametrize(
    "data, message",
    [
        ({0: {"addr": "10.0.0.1"}, 1: None}, "has no 'addr' for every rank"),
        ({0: {"addr": "10.0.0.1"}, 1: {"addr": ""}}, "rank 1 published addr=''"),
        ({0: {"addr": "10.0.0.1"}, 1: {"addr": "10.0.0.1"}}, "ranks 0 and 1 both published addr=10.0.0.1"),
    ],
)
def test_peers_refuses_incomplete_or_clashing_tables(tmp_path, data, message):
    done = sync(
        "peers", "--file", str(write_table(tmp_path / "t.json", data)), "--field", "addr", "--distinct"
    )
    assert done.returncode == 8 and message in done.stderr


def test_publish_field_serializes_any_text(tmp_path, free_port):
    """A value with quotes or a newline is published as data, not spliced into JSON by hand."""
    hostile = 'a"b\\c\n$(x)'
    out = tmp_path / "out.json"
    done = sync(*barrier_args(free_port(), 0, 1), "--publish-field", f"addr={hostile}", "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert json.loads(out.read_text())["ranks"]["0"]["data"] == {"addr": hostile}


# ---------------------------------------------------------------- dist-version


@pytest.fixture
def tool_dir(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A bin/ with console scripts and a site/ where a fake `demo` distribution may be installed."""
    (tmp_path / "bin").mkdir()
    (tmp_path / "site").mkdir()
    env = {
        **os.environ,
        "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}",
        "PYTHONPATH": str(tmp_path / "site"),
    }
    return tmp_path, env


def console_script(root: Path, name: str, first_line: str) -> None:
    path = root / "bin" / name
    path.write_text(f"{first_line}\nprint('hi')\n")
    path.chmod(0o755)


def install(root: Path, dist: str, version: str) -> None:
    info = root / "site" / f"{dist}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")


def dist_version(env: dict[str, str], expect: str, command: str = "demo") -> subprocess.CompletedProcess:
    return subprocess.run(
        [PYTHON, str(SYNC), "dist-version", "--command", command, "--dist", "demo", "--expect", expect],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )


@pytest.mark.parametrize(
    "shebang", [f"#!{sys.executable}", "#!/usr/bin/env python3", "#!/usr/bin/env -S python3 -u"]
)
def test_dist_version_reads_the_interpreter_from_the_console_script(tool_dir, shebang):
    root, env = tool_dir
    console_script(root, "demo", shebang)
    install(root, "demo", "0.5.5.dev104+rocm7.2")
    done = dist_version(env, "0.5.5.dev104+rocm7.2")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("demo: demo 0.5.5.dev104+rocm7.2 (")


@pytest.mark.parametrize(
    "setup, message",
    [
        ("other-version", "demo 0.5.6 is installed"),
        ("not-installed", "no demo distribution installed for"),
        ("not-a-script", "is not a script with a #! line"),
        ("not-python", "cannot tell which Python runs"),
        ("missing", "dist-version nosuch: not on PATH"),
    ],
)
def test_dist_version_refuses_what_is_not_exactly_the_pin(tool_dir, setup, message):
    root, env = tool_dir
    console_script(
        root,
        "demo",
        {"not-a-script": "echo hi", "not-python": "#!/bin/sh"}.get(setup, "#!/usr/bin/env python3"),
    )
    if setup == "other-version":
        install(root, "demo", "0.5.6")
    done = dist_version(env, "0.5.5", command="nosuch" if setup == "missing" else "demo")
    assert done.returncode == 9
    assert message in done.stderr
