"""`python -m proxy` exactly as the rendered job runs it, behind the job's own health barrier."""

from __future__ import annotations

import asyncio
import resource
import signal
import sys

import httpx
import pytest

from proxy.__main__ import raise_open_files
from proxy.config import parse_config
from tests.paths import ROOT
from tests.ports import free_port
from tests.proxy.harness import LOOPBACK, WAIT, running

pytestmark = pytest.mark.anyio
SECRET = "sk-cli-secret-0123"


async def test_as_the_job_runs_it(tmp_path, monkeypatch):
    monkeypatch.setenv("PROXY_API_KEY", SECRET)
    stderr = tmp_path / "proxy.log"
    async with running(2, 1, http=True, api_key=SECRET) as c:
        port = free_port()
        argv = [sys.executable, "-m", "proxy", "--host", LOOPBACK, "--port", str(port)]
        for p in c.prefill:
            argv += ["--prefill", p.url, p.bootstrap_addr.rsplit(":", 1)[1]]
        argv += ["--decode", c.decode[0].url]
        with stderr.open("wb") as log:
            proxy = await asyncio.create_subprocess_exec(*argv, cwd=ROOT, stderr=log)
        try:
            # The barrier the rendered server_vllm.sh runs (scripts/lib/sync.sh wait_http).
            barrier = await asyncio.create_subprocess_exec(
                sys.executable,
                "scripts/sync.py",
                "wait-http",
                "--url",
                f"http://{LOOPBACK}:{port}/health",
                "--timeout",
                str(WAIT),
                "--pid",
                str(proxy.pid),
                "--interval",
                "0.05",
                "--expect",
                "prefill.healthy=2",
                "--expect",
                "decode.healthy=1",
                cwd=ROOT,
            )
            assert await barrier.wait() == 0, stderr.read_text()
            async with httpx.AsyncClient(
                base_url=f"http://{LOOPBACK}:{port}",
                timeout=WAIT,
                trust_env=False,
                headers={"Authorization": f"Bearer {SECRET}"},
            ) as client:
                body = {
                    "model": "fake-model",
                    "messages": [{"role": "user", "content": "hi"}],
                    "stream": True,
                }
                response = await client.post("/v1/chat/completions", json=body)
                assert response.status_code == 200
                assert response.headers["content-type"] == "text/event-stream"
                assert response.content.endswith(b"data: [DONE]\n\n")
                wrong = await client.post("/v1/chat/completions", json=body, headers={"Authorization": "x"})
                assert wrong.status_code == 401
        finally:
            proxy.send_signal(signal.SIGTERM)
            code = await proxy.wait()
    log = stderr.read_text()
    assert code in (0, -signal.SIGTERM), log  # uvicorn re-raises the signal once it has shut down cleanly
    assert "Application shutdown complete" in log
    assert SECRET not in log
    assert "API key set" in log and "Traceback" not in log


@pytest.mark.parametrize(
    ("soft", "hard", "raised_to", "warned"),
    [
        (1024, 1 << 20, 4096 + 2 * 1024 + 64, False),
        (1024, 5000, 5000, True),
        (1 << 20, 1 << 20, None, False),
    ],
)
def test_open_files_are_raised_to_fit_the_connections(monkeypatch, caplog, soft, hard, raised_to, warned):
    """Out of descriptors, a connect to an engine fails and takes the engine out of rotation."""
    raised = []
    monkeypatch.setattr(resource, "getrlimit", lambda _: (soft, hard))
    monkeypatch.setattr(resource, "setrlimit", lambda _, limits: raised.append(limits))
    raise_open_files(parse_config(["--prefill", "http://p:1", "--decode", "http://d:1"], {}))
    assert raised == ([] if raised_to is None else [(raised_to, hard)])
    assert ("open files limited" in caplog.text) is warned
