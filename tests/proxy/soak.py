"""Hostile clients against a real `python -m proxy`: its memory and descriptors (from /proc) before,
during and after a flood of bad requests and a crowd of idle or slow clients.

    python -m tests.proxy.soak [--root DIR] [--bad 2000] [--idle 100]

prints what it measured; --root runs another copy of the repository (e.g. `git archive HEAD` unpacked)
to compare. test_soak.py runs a small soak and asserts that what grew comes back.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from tests.ports import free_port

HOST = "127.0.0.1"
CHAT = "/v1/chat/completions"
BAD_BODIES = {  # kind → body; each is refused before any engine is asked
    "invalid-utf8": b'{"model": "m", "messages": "\xff\xfe"}',
    "nested-100k": b"[" * 100_000 + b"]" * 100_000,
    "not-an-object": b"[1, 2, 3]",
    "truncated": b'{"model": "m", "messages": [{"role": "user", "content": "hi',
    "bad-field": b'{"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 0}',
}


@dataclass
class Proxy:
    process: subprocess.Popen
    port: int
    log: Path

    def usage(self) -> tuple[int, int]:
        """(resident memory in KiB, open descriptors) of the proxy process."""
        status = Path(f"/proc/{self.process.pid}/status").read_text()
        rss = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:"))
        return rss, len(os.listdir(f"/proc/{self.process.pid}/fd"))


@dataclass
class Report:
    phases: list[tuple[str, int, int]] = field(default_factory=list)  # (phase, rss KiB, fds)
    statuses: collections.Counter = field(default_factory=collections.Counter)
    seconds: float = 0.0
    log_lines: int = 0
    tracebacks: int = 0

    def measure(self, phase: str, proxy: Proxy) -> None:
        self.phases.append((phase, *proxy.usage()))

    def table(self) -> str:
        rows = [f"{'phase':<34} {'RSS MiB':>8} {'fds':>6}"]
        rows += [f"{phase:<34} {rss / 1024:>8.1f} {fds:>6}" for phase, rss, fds in self.phases]
        answers = dict(sorted(self.statuses.items(), key=str))
        rows.append(f"answers: {answers} in {self.seconds:.1f} s")
        rows.append(f"log lines: {self.log_lines}, tracebacks: {self.tracebacks}")
        return "\n".join(rows)


@contextlib.contextmanager
def proxy_process(root: Path, log: Path, *options: str) -> Iterator[Proxy]:
    """The proxy in front of engines that are not there (every refusal here comes before them)."""
    port = free_port()
    argv = [sys.executable, "-m", "proxy", "--host", HOST, "--port", str(port)]
    argv += [
        "--prefill",
        f"http://{HOST}:{free_port()}",
        "--decode",
        f"http://{HOST}:{free_port()}",
        *options,
    ]
    with log.open("wb") as out:
        process = subprocess.Popen(argv, cwd=root, stderr=out, env={**os.environ, "PYTHONPATH": str(root)})
    try:
        _wait_listening(port, process)
        yield Proxy(process, port, log)
    finally:
        process.terminate()
        process.wait(10)


def _wait_listening(port: int, process: subprocess.Popen) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and process.poll() is None:
        with contextlib.suppress(OSError), socket.create_connection((HOST, port), timeout=1):
            return
        time.sleep(0.05)
    raise RuntimeError(f"the proxy did not listen on {port} (exit code {process.poll()})")


async def bad_requests(proxy: Proxy, count: int, report: Report, *, timeout: float = 10.0) -> None:
    """`count` refused requests, 16 at a time: bodies from BAD_BODIES, a few huge headers and bodies."""
    limits = httpx.Limits(max_connections=16)
    async with httpx.AsyncClient(
        base_url=f"http://{HOST}:{proxy.port}", limits=limits, timeout=timeout
    ) as client:
        queue = list(range(count))

        async def worker() -> None:
            while queue:
                i = queue.pop()
                try:
                    response = await _one_bad(client, i)
                    report.statuses[response.status_code] += 1
                except httpx.HTTPError as exc:
                    report.statuses[type(exc).__name__] += 1

        start = time.monotonic()
        await asyncio.gather(*(worker() for _ in range(16)))
        report.seconds = time.monotonic() - start


HUGE = b'{"model": "m", "messages": [{"role": "user", "content": "' + b"x" * (17 << 20) + b'"}]}'


async def _one_bad(client: httpx.AsyncClient, i: int) -> httpx.Response:
    if i % 100 == 0:  # a 1 MiB header
        return await client.get("/health", headers={"x-big": "a" * (1 << 20)})
    if i % 100 == 1:  # a 17 MiB prompt: over the 16 MiB limit (and the job has no healthy engine)
        return await client.post(CHAT, content=HUGE)
    kinds = list(BAD_BODIES.values())
    return await client.post(CHAT, content=kinds[i % len(kinds)])


SLOW = (  # what an idle or slow client sends, and then nothing more
    b"",
    b"POST /v1/chat/completions HTTP/1.1\r\nhost: proxy\r\n",
    b"POST /v1/chat/completions HTTP/1.1\r\nhost: proxy\r\ncontent-length: 100\r\n\r\n{",
)


def idle_clients(proxy: Proxy, count: int) -> list[socket.socket]:
    """A third connect and say nothing, a third stop in the head, a third in the body."""
    sockets = []
    for i in range(count):
        sock = socket.create_connection((HOST, proxy.port))
        sock.sendall(SLOW[i % len(SLOW)])
        sockets.append(sock)
    return sockets


def closed_by_peer(sockets: list[socket.socket]) -> int:
    """How many of these the proxy has closed (a read returns EOF, or data then EOF, at once)."""
    closed = 0
    for sock in sockets:
        sock.setblocking(False)
        try:
            while sock.recv(65536):
                pass
            closed += 1
        except BlockingIOError:
            pass
        except OSError:
            closed += 1
    return closed


def log_stats(log: Path) -> tuple[int, int]:
    text = log.read_text(errors="replace")
    return len(text.splitlines()), text.count("Traceback")


async def soak(proxy: Proxy, bad: int, idle: int, settle: float) -> Report:
    report = Report()
    await asyncio.sleep(1.0)  # the first health checks have run: a steady baseline
    report.measure("start", proxy)
    await bad_requests(proxy, bad, report)
    report.measure(f"after {bad} bad requests", proxy)
    sockets = idle_clients(proxy, idle)
    await asyncio.sleep(0.5)
    report.measure(f"with {idle} idle/slow clients", proxy)
    await asyncio.sleep(settle)
    report.measure(f"{settle:g} s later ({closed_by_peer(sockets)} closed)", proxy)
    for sock in sockets:
        sock.close()
    report.log_lines, report.tracebacks = log_stats(proxy.log)
    return report


def short_timeouts(root: Path) -> tuple[str, ...]:
    """Client deadlines short enough to see within the soak, where the proxy has them."""
    usage = subprocess.run(
        [sys.executable, "-m", "proxy", "--help"], cwd=root, capture_output=True, text=True
    )
    return ("--header-timeout", "2", "--body-timeout", "2") if "--header-timeout" in usage.stdout else ()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=Path.cwd(), help="repository copy whose proxy runs")
    parser.add_argument("--bad", type=int, default=2000)
    parser.add_argument("--idle", type=int, default=100)
    parser.add_argument("--settle", type=float, default=12.0, help="seconds idle clients are given")
    parser.add_argument("--log", type=Path, default=Path("/tmp/proxy-soak.log"))
    args = parser.parse_args()
    root = args.root.resolve()
    with proxy_process(root, args.log, *short_timeouts(root)) as proxy:
        report = asyncio.run(soak(proxy, args.bad, args.idle, args.settle))
    print(report.table())


if __name__ == "__main__":
    main()
