"""sync.py flush-caches: every engine's caches emptied before a benchmark, retried while requests are in
flight, and a step that cannot empty them failing with its documented line, exit code and cause."""

from __future__ import annotations

import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from conftest import LOAD_SLACK_S, SCRIPTS, SYNC, SYNC_PYTHON

from scripts.causes import classify, load

FLUSHED = b"Cache flushed.\nPlease check backend logs for more details.\n"
BUSY = b"Cache not flushed. There are running or waiting requests.\n"


@pytest.fixture
def engine():
    """A fake SGLang /flush_cache: busy (400) for its first `busy` tries, then flushed; counts the tries."""
    state = {"busy": 0, "tries": 0}

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            state["tries"] += 1
            ok = self.path == "/flush_cache" and state["tries"] > state["busy"]
            body = FLUSHED if ok else BUSY
            self.send_response(200 if ok else 400)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", state
    server.shutdown()


def flush(*urls: str, timeout: float = 5.0) -> subprocess.CompletedProcess:
    args = [x for url in urls for x in ("--url", url)]
    return subprocess.run(
        [SYNC_PYTHON, str(SYNC), "flush-caches", *args, "--timeout", str(timeout), "--interval", "0.1"],
        capture_output=True,
        text=True,
        timeout=timeout + LOAD_SLACK_S + 10,
        check=False,
    )


def test_an_engine_busy_at_first_is_retried_until_it_flushes(engine):
    url, state = engine
    state["busy"] = 3
    done = flush(url, url)
    assert done.returncode == 0, done.stderr
    assert state["tries"] == 5  # 3 refused and 1 flushed, then the second engine's 1
    assert done.stdout.strip() == "flush-caches: 2 engine(s) emptied their caches"


def test_an_engine_that_never_flushes_fails_the_step_naming_it(engine):
    url, state = engine
    state["busy"] = 10**6
    done = flush(url, timeout=1.0)
    assert done.returncode == 16
    said = done.stderr.strip()
    assert said.startswith(f"flush-caches: {url} did not empty its caches within 1 s (last: HTTP 400: Cache")
    assert said.endswith("the next concurrency would not start cold")
    found = classify(load(), step="benchmark conc8", code="16", service="", text=f"FAILED x: {said}")
    assert (found.id, found.blame) == ("caches-not-flushed", "software")


def test_an_engine_that_does_not_answer_is_said_too():
    done = flush("http://127.0.0.1:9", timeout=0.5)
    assert done.returncode == 16 and "(last: " in done.stderr


def test_the_node_tool_is_in_scripts():
    assert (SCRIPTS / "flushcache.py").is_file()
