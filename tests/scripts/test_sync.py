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
from conftest import LOAD_SLACK_S, SCRIPTS, SYNC, SYNC_PYTHON, drip, http_answer, send, sync

sys.path.insert(0, str(SCRIPTS))
import peers  # noqa: E402 (scripts/ is not a package: it runs on the nodes)
import waithttp  # noqa: E402

PYTHON = SYNC_PYTHON


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


WAIT = ("wait-http", "--url", "http://x")
BARRIER = ("barrier", "--name", "b", "--size", "2", "--timeout", "1", "--secret-file", "s")


@pytest.mark.parametrize(
    "args, message",
    [
        ([], "required: COMMAND"),
        (WAIT, "--timeout"),
        ((*WAIT, "--timeout", "0"), "must be a finite number > 0"),
        # float() reads these: a NaN deadline compares false forever, an infinite one never comes
        ((*WAIT, "--timeout", "nan"), "must be a finite number > 0"),
        ((*WAIT, "--timeout", "inf"), "must be a finite number > 0"),
        ((*WAIT, "--timeout", "1", "--expect", "novalue"), "expected KEY=VALUE"),
        (("wait-http", "--url", "https://x/health", "--timeout", "1"), "not an http://"),
        (("wait-http", "--url", "http://x:99999/", "--timeout", "1"), "--url"),
        ((*BARRIER, "--rank", "0", "--leader", "nohost"), "expected HOST:PORT"),
        ((*BARRIER, "--rank", "0", "--leader", "h:70000"), "PORT 1..65535"),
        ((*BARRIER, "--rank", "0", "--leader", "h:1", "--publish", "{"), "not JSON"),
        ((*BARRIER, "--rank", "0", "--leader", "h:1", "--publish", '{"x": NaN}'), "x is NaN"),
        ((*BARRIER, "--rank", "0", "--leader", "h:1", "--publish", "[" * 17 + "]" * 17), "nested deeper"),
        ((*BARRIER, "--rank", "2", "--leader", "h:1"), "--rank 2 not in 0..1"),
        ((*BARRIER, "--rank", "0", "--leader", "h:1", "--size", "1000000"), "--size 1000000 not in 1..4096"),
        ((*BARRIER, "--rank", "0", "--leader", "h:1", "--nodes", "a"), "--nodes has 1 names"),
        ((*BARRIER, "--rank", "0", "--leader", "h:1", "--publish-field", "a=" + "x" * 70000), "the hello is"),
        (
            ("barrier", "--name", "b", "--rank", "0", "--size", "2", "--leader", "h:1", "--timeout", "1"),
            "--secret-file",
        ),
    ],
)
def test_usage_errors_exit_2_saying_which(args, message):
    done = sync(*args)
    assert done.returncode == 2, done.stderr
    assert message in done.stderr and "Traceback" not in done.stderr


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


@pytest.fixture
def process_tree() -> Iterator[tuple[int, set[int]]]:
    """A session of three processes: (its leader, every pid of it), once the leader's children run."""
    leader = subprocess.Popen(
        ["bash", "-c", "sleep 60 & sleep 60 & wait"], start_new_session=True, stdout=subprocess.DEVNULL
    )
    children = Path(f"/proc/{leader.pid}/task/{leader.pid}/children")
    deadline = time.monotonic() + 10
    while len(children.read_text().split()) < 2:
        assert time.monotonic() < deadline, "the leader's two children never started"
        time.sleep(0.02)
    try:
        yield leader.pid, {leader.pid, *map(int, children.read_text().split())}
    finally:
        os.killpg(leader.pid, 9)
        leader.wait()


def test_wait_http_reads_the_cpu_of_the_service_s_own_processes(process_tree):
    """Its stall watch reads the service's process tree (children files), never the host's whole table."""
    leader, pids = process_tree
    assert sorted(waithttp._service_stats(leader)) == sorted(f"/proc/{pid}/stat" for pid in pids)


def test_wait_http_lists_the_session_where_the_kernel_has_no_children_files(tmp_path):
    """A fake /proc without task/<tid>/children: every process of the session the service leads."""
    for pid, session in ((100, 100), (101, 100), (102, 100), (200, 200), (201, 1)):
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "stat").write_text(
            f"{pid} (a b) S 1 {session} {session} 0 -1 0 0 0 0 0 1 2 3 4\n"
        )
    (tmp_path / "self").mkdir()
    found = waithttp._service_stats(100, proc=str(tmp_path))
    assert sorted(found) == [f"{tmp_path}/{pid}/stat" for pid in (100, 101, 102)]


DRIPPING = {
    # a server that never finishes its answer, one byte at a time: urllib's timeout is per read
    "status line": drip(b"HTTP/1.1 200 OK\r\n" * 1000),
    "body": drip(http_answer(b'{"ready": true}' + b" " * 100_000)),
}


@pytest.mark.parametrize("where", list(DRIPPING))
def test_wait_http_timeout_bounds_a_dripping_answer(raw_http, where):
    url = raw_http(DRIPPING[where]) + "/health"
    start = time.monotonic()
    done = sync(
        "wait-http", "--url", url, "--timeout", "3", "--name", "api", "--expect", "ready=true", timeout=30
    )
    elapsed = time.monotonic() - start
    print(f"wait-http --timeout 3 against a server dripping its {where}: failed after {elapsed:.2f} s")
    assert done.returncode == 4
    assert (
        done.stderr == f"wait-http: api not ready at {url} after 3 s (last: no complete answer within 3 s)\n"
    )
    assert elapsed < 3 + LOAD_SLACK_S


@pytest.mark.parametrize(
    "body, last",
    [
        (b"x" * (2 << 20), "answer body larger than 1048576 bytes"),
        (b"[" * 100_000 + b"]" * 100_000, "body is not JSON we read (nested deeper than 64 levels)"),
        (b'{"ready": NaN}', "body is not JSON we read (ready is NaN, not a finite number"),
    ],
    ids=["2-MiB", "nested-100000", "NaN"],
)
def test_wait_http_reads_a_bounded_body_that_is_plain_json(raw_http, body, last):
    url = raw_http(send(http_answer(body))) + "/health"
    done = sync("wait-http", "--url", url, "--timeout", "2", "--expect", "ready=true")
    assert done.returncode == 4
    assert f"(last: {last}" in done.stderr and done.stderr.count("\n") == 1


# ---------------------------------------------------------------- addr, the peers' addresses


@pytest.fixture
def fake_scontrol(tmp_path: Path) -> dict[str, str]:
    """scontrol on PATH answering `show node` with the NodeAddr the test sets (or failing)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "scontrol"
    script.write_text(
        '#!/bin/sh\n[ -n "$FAKE_NODEADDR" ] || { echo "Node $4 not found" >&2; exit 1; }\n'
        '[ "$FAKE_NODEADDR" != hang ] || { sleep 60; exit 0; }  # a child holding the pipes, not an exec\n'
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
    """Advertised to peers: loopback address makes Mooncake TCP hang (docs/upstream-facts.md#mooncake-pd)."""
    done = addr("--slurm-nodeaddr", "node7", env={**fake_scontrol, "FAKE_NODEADDR": "localhost"})
    assert done.returncode == 7
    assert "127.0.0.1 is a loopback address" in done.stderr and "data-plane-interface" in done.stderr


def test_addr_unknown_node_says_what_scontrol_said(fake_scontrol):
    done = addr("--slurm-nodeaddr", "nosuch", env={**fake_scontrol, "FAKE_NODEADDR": ""})
    assert done.returncode == 7
    assert "scontrol show node nosuch exited 1: Node nosuch not found" in done.stderr


def test_addr_scontrol_that_hangs_is_given_up_on_in_time(fake_scontrol):
    start = time.monotonic()
    done = addr("--slurm-nodeaddr", "--timeout", "1", "node7", env={**fake_scontrol, "FAKE_NODEADDR": "hang"})
    assert done.returncode == 7
    assert (
        done.stderr.startswith("addr node7: scontrol show node node7: ")
        and "timed out after 1" in done.stderr
    )
    assert done.stderr.count("\n") == 1 and time.monotonic() - start < 1 + LOAD_SLACK_S


def test_addr_name_lookup_is_given_up_on_in_time(monkeypatch):
    """getaddrinfo has no timeout: a dead DNS server would hold the node at its address step."""
    sys.path.insert(0, str(SYNC.parent))
    import address

    def dead_dns(*_: object) -> None:
        time.sleep(3)
        raise OSError("no answer")

    monkeypatch.setattr(address.socket, "getaddrinfo", dead_dns)
    start = time.monotonic()
    with pytest.raises(address.AddrError, match=r"cannot resolve 'slow\.example' within 0\.5 s"):
        address._ipv4_of("slow.example", 0.5)
    assert time.monotonic() - start < 0.5 + LOAD_SLACK_S


def test_addr_of_an_interface_on_this_host():
    me = socket.gethostname()
    assert addr("--interface", "lo", "--allow-loopback", me).stdout == "127.0.0.1\n"
    missing = addr("--interface", "nosuch0", me)
    assert missing.returncode == 7 and "interface 'nosuch0' has no IPv4 address here" in missing.stderr


def test_addr_of_an_interface_only_on_the_node_itself():
    done = addr("--interface", "lo", "--allow-loopback", "some-other-node")
    assert done.returncode == 7 and "'some-other-node' is not this host" in done.stderr


def table(data: dict[int, object]) -> dict:
    """A released barrier table (its ranks in any order)."""
    return {"ranks": {str(r): {"node": f"n{r}", "data": d} for r, d in data.items()}}


def test_peers_lists_one_value_per_rank_in_rank_order():
    published = peers.published(
        table({1: {"addr": "10.0.0.2"}, 0: {"addr": "10.0.0.1"}}), "addr", address=True, distinct=True
    )
    assert published == ["10.0.0.1", "10.0.0.2"]


@pytest.mark.parametrize(
    "data, message",
    [
        ({0: {"addr": "10.0.0.1"}, 1: None}, "no 'addr' for every rank"),
        ({0: {"addr": "10.0.0.1"}, 2: {"addr": "10.0.0.3"}}, "no 'addr' for every rank (KeyError: '1')"),
        ({0: {"addr": "10.0.0.1"}, 1: {"addr": ""}}, "rank 1 published addr='': not a non-empty string"),
        ({0: {"addr": "10.0.0.1"}, 1: {"addr": "10.0.0.1"}}, "ranks 0 and 1 both published addr=10.0.0.1"),
    ],
)
def test_peers_refuses_incomplete_or_clashing_tables(data, message):
    with pytest.raises(peers.PeersError) as refused:
        peers.published(table(data), "addr", address=True, distinct=True)
    assert message in str(refused.value)


@pytest.mark.parametrize(
    "value, problem",
    [
        ("10.0.0.1\r", "not printable ASCII without whitespace"),
        ("10.0.0.1\x00", "not printable ASCII without whitespace"),
        ("10.0.0.1 ", "not printable ASCII without whitespace"),
        ("10.0.0.1\n10.0.0.9", "not printable ASCII without whitespace"),
        ("10.0.0.1;reboot", "not an IPv4 or IPv6 address"),
        ("sim1", "not an IPv4 or IPv6 address"),
        ("10.0.0.256", "not an IPv4 or IPv6 address"),
        ("FD00::1", "not written as fd00::1 (canonical form)"),
        ("fe80::1%eth0", "an IPv6 zone names an interface of one node only"),
        ("１０.0.0.1", "not printable ASCII without whitespace"),  # fullwidth digits
        (["10.0.0.1"], "not a non-empty string"),
        (167772161, "not a non-empty string"),
    ],
)
def test_peers_address_is_exactly_an_ip_address(value, problem):
    with pytest.raises(peers.PeersError) as refused:
        peers.published(
            table({0: {"addr": "10.0.0.1"}, 1: {"addr": value}}), "addr", address=True, distinct=False
        )
    message = str(refused.value)
    assert message.startswith("rank 1 published addr=") and message.endswith(f": {problem}")
    assert "\n" not in message


@pytest.mark.parametrize("value", ["10.0.0.2", "fd00::2", "2001:db8::a:1"])
def test_peers_address_accepts_ipv4_and_ipv6(value):
    data = table({0: {"addr": "10.0.0.1"}, 1: {"addr": value}})
    assert peers.published(data, "addr", address=True, distinct=True) == ["10.0.0.1", value]


@pytest.mark.parametrize("value, ok", [("http://sim0:8000/v1", True), ("a\tb", False), ("x\x7f", False)])
def test_peers_any_field_is_one_printable_word(value, ok):
    data = table({0: {"url": value}})
    if ok:
        assert peers.published(data, "url", address=False, distinct=False) == [value]
    else:
        with pytest.raises(peers.PeersError):
            peers.published(data, "url", address=False, distinct=False)


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
    "shebang",
    [
        f"#!{sys.executable}",
        "#!/usr/bin/env python3",
        "#!/usr/bin/env -S python3 -u",
        # pip's form when the interpreter's path is longer than a #! line may be (the node setup's envs)
        f"#!/bin/sh\n'''exec' {sys.executable} \"$0\" \"$@\"\n' '''",
        f"#!/bin/sh\n'''exec' \"{sys.executable}\" \"$0\" \"$@\"\n' '''",
    ],
    ids=["path", "env", "env-S", "sh-trampoline", "sh-trampoline-quoted"],
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


def test_dist_version_imports_each_module_with_the_commands_python(tool_dir):
    """The pinned version installed is not enough: its compiled part must load in the engine's Python (LMCache
    0.5.6's connector loads lmcache_native). A module that does not import fails the check, naming why."""
    root, env = tool_dir
    console_script(root, "demo", "#!/usr/bin/env python3")
    install(root, "demo", "0.5.3")
    (root / "site" / "demo_ok.py").write_text("")
    (root / "site" / "demo_native.py").write_text(
        "raise ImportError('libtorch.so: cannot open shared object')\n"
    )
    argv = [PYTHON, str(SYNC), "dist-version", "--command", "demo", "--dist", "demo", "--expect", "0.5.3"]
    run = lambda *extra: subprocess.run(  # noqa: E731
        [*argv, *extra], capture_output=True, text=True, timeout=60, env=env, check=False
    )
    done = run("--import", "demo_ok")
    assert done.returncode == 0 and "imports demo_ok" in done.stdout, done.stderr
    done = run("--import", "demo_ok", "--import", "demo_native")
    assert done.returncode == 9
    assert (
        "demo 0.5.3 is installed but" in done.stderr and "cannot import demo_ok, demo_native" in done.stderr
    )
    assert "ImportError: libtorch.so: cannot open shared object" in done.stderr


def test_dist_version_probe_that_hangs_is_given_up_on_in_time(tool_dir):
    root, env = tool_dir
    hang = root / "bin" / "python3-hang"
    hang.write_text("#!/bin/sh\nsleep 60\nexit 0\n")
    hang.chmod(0o755)
    console_script(root, "demo", f"#!{hang}")
    start = time.monotonic()
    done = subprocess.run(
        [
            PYTHON,
            str(SYNC),
            "dist-version",
            "--command",
            "demo",
            "--dist",
            "demo",
            "--expect",
            "1",
            "--timeout",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=30,
        env=env,
        check=False,
    )
    assert done.returncode == 9 and "timed out after 1" in done.stderr and done.stderr.count("\n") == 1
    assert time.monotonic() - start < 1 + LOAD_SLACK_S


def test_dist_version_never_waits_on_a_fifo_on_path(tool_dir):
    root, env = tool_dir
    fifo = root / "bin" / "demo"
    os.mkfifo(fifo)
    fifo.chmod(0o755)
    done = subprocess.run(
        [PYTHON, str(SYNC), "dist-version", "--command", "demo", "--dist", "demo", "--expect", "1"],
        capture_output=True,
        text=True,
        timeout=20,
        env=env,
        check=False,
    )
    assert (
        done.returncode == 9 and done.stderr == f"dist-version demo: cannot read {fifo}: not a regular file\n"
    )


def _choices(parser: object) -> set[str]:
    return {name for action in parser._actions if action.dest == "command" for name in action.choices}  # type: ignore[attr-defined]


def test_each_command_is_built_from_its_own_module_alone() -> None:
    """sync.py imports only the module of the command it runs: its table must name every command's module."""
    sys.path.insert(0, str(Path(SYNC).parent))
    try:
        import sync as sync_module  # the node-side module, as the node runs it

        assert _choices(sync_module.build_parser()) == set(sync_module.COMMANDS)
        for name in sync_module.COMMANDS:
            assert _choices(sync_module.build_parser(name)) == {name}
    finally:
        sys.path.remove(str(Path(SYNC).parent))


HEAVY_IMPORTS = {"dataclasses", "inspect", "ast", "dis"}


def _imported(*argv: str) -> set[str]:
    """The modules a node tool's run imports (python -X importtime lists each on stderr)."""
    done = subprocess.run([PYTHON, "-X", "importtime", *argv], cwd=SCRIPTS, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [line.split("|") for line in done.stderr.splitlines() if line.startswith("import time:")]
    return {row[-1].strip() for row in rows if len(row) == 3}


@pytest.mark.parametrize(
    "argv",
    [
        ["sync.py", "addr", "--help"],
        ["sync.py", "ports-free", "--help"],
        ["sync.py", "barrier", "--help"],
        ["sync.py", "wait-http", "--help"],
        ["logwatch.py", "--help"],
        ["outcome.py", "--help"],
    ],
    ids=lambda argv: " ".join(argv[:2]),
)
def test_the_tools_every_node_starts_import_no_dataclasses(argv: list[str]) -> None:
    """Every node starts these before its engine or at its end: `dataclasses` imports `inspect`, `ast` and
    `dis`, a third of such a call's CPU, paid on every node of a wide job and in turns by 32 simulated nodes
    on one host. The node tools' records are NamedTuples instead."""
    imported = _imported(*argv)
    assert "argparse" in imported  # the listing works
    assert not imported & HEAVY_IMPORTS


def test_sync_help_and_an_unknown_command_name_every_command() -> None:
    out = subprocess.run([PYTHON, SYNC, "no-such"], capture_output=True, text=True, check=False)
    assert out.returncode == 2 and "addr" in out.stderr and "flush-caches" in out.stderr
