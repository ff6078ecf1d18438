"""`sync.py ports-free`: what the node's services will listen on is tried before anything starts."""

from __future__ import annotations

import socket

import pytest
from conftest import sync


@pytest.fixture
def listening():
    """A port something listens on, as a leftover server would."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_free_ports_pass_and_are_listed():
    port = free_port()
    done = sync("ports-free", f"router=127.0.0.1:{port}", f"vllm=[::1]:{port}")
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"free: 127.0.0.1:{port} (router), ::1:{port} (vllm)\n"


def test_every_taken_port_is_named_at_once_with_exit_6(listening):
    done = sync("ports-free", f"lmcache=127.0.0.1:{listening}", f"vllm=127.0.0.1:{free_port()}")
    assert done.returncode == 6
    assert done.stderr == (
        f"127.0.0.1:{listening}, where lmcache will listen, is taken: EADDRINUSE (Address already in use)\n"
    )


def test_a_port_held_on_every_address_is_taken_on_each():
    with socket.socket() as sock:
        sock.bind(("0.0.0.0", 0))
        sock.listen()
        port = sock.getsockname()[1]
        done = sync("ports-free", f"vllm=127.0.0.2:{port}")
    assert done.returncode == 6 and "127.0.0.2:" in done.stderr


def test_nothing_to_listen_on_is_fine():
    done = sync("ports-free")
    assert done.returncode == 0 and done.stdout == "free: nothing to listen on\n"


@pytest.mark.parametrize(
    "arg",
    ["router=host:1", "router=127.0.0.1", "router=127.0.0.1:0", "=127.0.0.1:1", "127.0.0.1:1", "x=1.2.3:7"],
)
def test_a_malformed_listen_is_a_usage_error(arg):
    done = sync("ports-free", arg)
    assert done.returncode == 2 and "expected SERVICE=ADDR:PORT with an IP address" in done.stderr
