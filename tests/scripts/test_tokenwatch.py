"""scripts/tokenwatch.py: requests held and no token for the grace fails (exit 15, naming the engines); an
idle engine, a moving counter or a step that is not a benchmark never does."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from conftest import SCRIPTS

from scripts.failures import EXIT_NO_TOKENS


class Engine:
    """A /metrics endpoint whose counters the test sets; it counts the polls it answered."""

    def __init__(self) -> None:
        self.tokens, self.running, self.polls = 100.0, 2.0, 0
        engine = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (http.server's name)
                engine.polls += 1
                body = (
                    f"vllm:generation_tokens_total {engine.tokens}\n"
                    f'vllm:num_requests_running{{model_name="m"}} {engine.running}\n'
                ).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/metrics"

    def wait_polls(self, count: int, proc: subprocess.Popen, deadline_s: float = 20) -> None:
        """Until COUNT more polls were answered (the watchdog's own progress), or it exited."""
        target, end = self.polls + count, time.monotonic() + deadline_s
        while self.polls < target and proc.poll() is None:
            assert time.monotonic() < end, "the watchdog stopped polling"
            time.sleep(0.02)


@pytest.fixture
def engine():
    e = Engine()
    yield e
    e.server.shutdown()


def start(tmp_path, engine: Engine, step: str, grace: float = 0.5) -> subprocess.Popen:
    (tmp_path / "step").write_text(step + "\n")
    return subprocess.Popen(
        [sys.executable, str(SCRIPTS / "tokenwatch.py"), "--state-dir", str(tmp_path), "--grace", str(grace)]
        + ["--interval", "0.05", f"decode0={engine.url}", "router=http://127.0.0.1:9/metrics"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_requests_held_without_a_token_fail_after_the_grace(tmp_path, engine):
    proc = start(tmp_path, engine, "benchmark conc4")
    out, err = proc.communicate(timeout=20)
    assert proc.returncode == EXIT_NO_TOKENS, err
    said = "in step 'benchmark conc4' while 2 request(s) were in flight (decode0: 2 in flight, 100 tokens)"
    assert "no token generated for " in out and said in out, out
    assert "router" not in out.split("watching ")[1].splitlines()[0]  # the router is not an engine


def test_moving_tokens_an_idle_engine_or_another_step_never_fail(tmp_path, engine):
    proc = start(tmp_path, engine, "benchmark conc4")
    try:
        for _ in range(30):  # tokens move at every poll: many graces long
            engine.tokens += 1
            engine.wait_polls(1, proc)
        engine.running = 0.0  # idle: nothing held, nothing to produce
        engine.wait_polls(30, proc)
        assert proc.poll() is None, proc.communicate()
        engine.running = 2.0
        (tmp_path / "step").write_text("LMCache proof\n")  # not a benchmark: not watched
        time_of = engine.polls
        deadline = time.monotonic() + 3 * 0.5 + 1
        while time.monotonic() < deadline:  # three graces without a poll: it does not even look
            assert proc.poll() is None
            time.sleep(0.05)
        assert engine.polls == time_of
    finally:
        proc.kill()
        proc.communicate()


def test_a_malformed_endpoint_is_a_usage_error(tmp_path):
    done = subprocess.run(
        [sys.executable, str(SCRIPTS / "tokenwatch.py"), "--state-dir", str(tmp_path), "--grace", "1", "x"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 2 and "'x' is not NAME=http://..." in done.stderr
