"""The real LMCache server of `make tools` (.venv-lmcache) as the local runner starts it: on one
simulated node's own address, healthy at /healthcheck, and gone after SIGTERM (then SIGKILL)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from sim.cluster.layout import ROOT, nodes

LMCACHE = ROOT / ".venv-lmcache" / "bin" / "lmcache"
pytestmark = pytest.mark.skipif(not LMCACHE.exists(), reason=f"{LMCACHE} missing: run `make tools`")

NODE, OTHER = nodes(2)
HEALTHY_CEILING = 120  # seconds; ~7 s warm, ~35 s on the very first start (imports compile)
TERM_GRACE = 15  # lmcache 0.5.6 takes more than 5 s to exit on SIGTERM, so wait, then SIGKILL


def _free_port(addr: str) -> int:
    with socket.socket() as sock:
        sock.bind((addr, 0))
        return int(sock.getsockname()[1])


def _health(addr: str, port: int) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://{addr}:{port}/healthcheck", timeout=2) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as err:  # 503 while initialising
        return err.code, ""
    except OSError:
        return 0, ""


def _group_alive(pgid: int) -> bool:
    """Any live (non-zombie) process left in the server's process group."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:
            return True
    return False


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM the whole group, wait up to TERM_GRACE, then SIGKILL what is left."""
    for sig, grace in ((signal.SIGTERM, TERM_GRACE), (signal.SIGKILL, 5)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        deadline = time.monotonic() + grace
        while _group_alive(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if not _group_alive(proc.pid):
            break
    proc.wait(timeout=5)


def test_lmcache_server_healthy_on_its_node_address_and_stops(tmp_path: Path):
    port, http_port = _free_port(NODE.addr), _free_port(NODE.addr)
    log = tmp_path / "lmcache.log"
    argv = [
        str(LMCACHE),
        "server",
        "--host",
        NODE.addr,
        "--port",
        str(port),
        "--http-host",
        NODE.addr,
        "--http-port",
        str(http_port),
        "--l1-size-gb",
        "2",
        "--eviction-policy",
        "LRU",
        "--l1-init-size-gb",
        "1",
        "--chunk-size",
        "256",
    ]
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        start = time.monotonic()
        status, body = _health(NODE.addr, http_port)
        while status != 200:
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
            assert proc.poll() is None, f"lmcache server exited ({proc.returncode}):\n{tail}"
            assert time.monotonic() - start < HEALTHY_CEILING, f"not healthy in {HEALTHY_CEILING} s:\n{tail}"
            time.sleep(0.2)
            status, body = _health(NODE.addr, http_port)
        assert json.loads(body) == {"status": "healthy"}
        assert _health(OTHER.addr, http_port)[0] == 0  # bound to its node's address only
    finally:
        _stop(proc)
    assert proc.returncode is not None and not _group_alive(proc.pid)
