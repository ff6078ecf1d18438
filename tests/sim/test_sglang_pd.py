"""The `sglang` executable as the node scripts run it: a prefill and a decode behind the REAL sglang-router
0.3.2 (the KV of every request pulled by the decode), the node-side KV proof, the kv_indptr crash as a log
watcher sees it, and start-up errors. Every process is killed by the launcher fixture."""

from __future__ import annotations

import re
import subprocess
import sys
import time

import httpx
import pytest

from sim.metrics import total

from .conftest import REPO, free_port, sim_env

ROUTER_PY = REPO / ".venv-sglang-router" / "bin" / "python"
PROOF = REPO / "scripts" / "proof.py"
MODEL = "openbmb/MiniCPM-SALA"
FLAGS = [
    *("--served-model-name", MODEL, "--tp-size", "8", "--trust-remote-code", "--disable-radix-cache"),
    *("--chunked-prefill-size", "8192", "--max-running-requests", "32", "--skip-server-warmup"),
    *("--attention-backend", "minicpm_flashinfer", "--dense-as-sparse", "--enable-metrics"),
]
PD = ["--disaggregation-transfer-backend", "mooncake"]
MORI = ["--disaggregation-transfer-backend", "mori", "--disaggregation-ib-device", "ionic_0,ionic_1"]
MARKED = {"MORI_RDMA_TC": "96", "MORI_IO_TC": "96", "MORI_RDMA_SL": "3", "MORI_IO_SL": "3"}
SIGNATURE = "kv_indptr[i+1] - kv_indptr[i] should be non-negative"
needs_router = pytest.mark.skipif(
    not ROUTER_PY.exists(),
    reason=f"sglang-router 0.3.2 is not installed ({ROUTER_PY}; `make tools` makes it)",
)


def start_pd(launcher, pd=PD, **env: str):
    boot = free_port()
    environment = sim_env(SIM_KV_WAIT_S="5", SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT="5", **env)
    prefill_args = [
        *FLAGS,
        *pd,
        "--disaggregation-mode",
        "prefill",
        "--disaggregation-bootstrap-port",
        str(boot),
    ]
    prefill = launcher.start_sglang(prefill_args, env=environment)
    decode = launcher.start_sglang([*FLAGS, *pd, "--disaggregation-mode", "decode"], env=environment)
    return prefill, decode, boot


def start_router(launcher, prefill, decode, boot):
    """The router command line the renderer emits, on free ports."""
    port, prometheus = free_port(), free_port()
    argv = [
        *(str(ROUTER_PY), "-m", "sglang_router.launch_router", "--pd-disaggregation"),
        *("--prefill", prefill.url, str(boot), "--decode", decode.url),
        *("--host", "127.0.0.1", "--port", str(port), "--policy", "cache_aware"),
        *(
            "--prometheus-host",
            "127.0.0.1",
            "--prometheus-port",
            str(prometheus),
            "--request-timeout-secs",
            "60",
        ),
    ]
    router = launcher.run(argv, port=port, env=sim_env())
    wait_for_workers(router.url, prefill=1, decode=1)
    return router


def wait_for_workers(url: str, *, prefill: int, decode: int, timeout: float = 20.0) -> dict:
    """GET /workers until its stats show the expected healthy counts (rank 0 waits on this)."""
    deadline, last = time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        try:
            last = httpx.get(f"{url}/workers", timeout=2).json()
            healthy = all(w["is_healthy"] for w in last["workers"])
            stats = last["stats"]
            if healthy and (stats["prefill_count"], stats["decode_count"]) == (prefill, decode):
                return last
        except (httpx.HTTPError, ValueError, KeyError):
            pass
        time.sleep(0.1)
    raise AssertionError(f"router workers not ready after {timeout} s: {last}")


def chat(tokens: int, *, stream: bool) -> dict:
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": " ".join(f"q{i}" for i in range(300))}],
        "max_completion_tokens": tokens,
        "stream": stream,
        "ignore_eos": True,
    }
    if stream:
        body["stream_options"] = {"include_usage": True}
    return body


@pytest.mark.tools
@needs_router
def test_pd_through_the_real_router_moves_every_requests_kv(launcher):
    prefill, decode, boot = start_pd(launcher)
    router = start_router(launcher, prefill, decode, boot)
    assert httpx.get(f"{router.url}/readiness", timeout=5).json()["status"] == "ready"
    for _ in range(3):  # AIPerf's shape: streamed chat, usage in the last chunk
        with httpx.stream(
            "POST", f"{router.url}/v1/chat/completions", json=chat(6, stream=True), timeout=30
        ) as r:
            assert r.status_code == 200
            text = "".join(r.iter_text())
        assert (
            text.endswith("data: [DONE]\n\n")
            and '"completion_tokens":6' in text
            and '"prompt_tokens":302' in text
        )
    whole = httpx.post(f"{router.url}/v1/chat/completions", json=chat(4, stream=False), timeout=30)
    content = whole.json()["choices"][0]["message"]["content"]
    assert whole.status_code == 200 and re.fullmatch(r"w0-\d{3} w1-\d{3} w2-\d{3} w3-\d{3}", content)
    d, p = decode.metrics(), prefill.metrics()
    assert total(d, "sim_kv_remote_loads_total", outcome="ok") == 4
    assert total(d, "sim_kv_remote_loads_total", outcome="failed") == 0
    assert total(p, "sim_kv_transfers_total", fate="pulled") == 4
    assert total(p, "sglang:prompt_tokens_total") == 4 * 302
    proof = [
        sys.executable,
        str(PROOF),
        "smoke",
        "--engine",
        "sglang",
        "--router",
        router.url,
        "--model",
        MODEL,
    ]
    proof += ["--prefill-metrics", f"{prefill.url}/metrics", "--decode-metrics", f"{decode.url}/metrics"]
    done = subprocess.run(proof, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("smoke: HTTP 200") and "KV moved" in done.stdout
    assert total(decode.metrics(), "sim_kv_remote_loads_total", outcome="ok") == 5


@pytest.mark.tools
@needs_router
def test_a_dead_prefill_fails_fast_through_the_router(launcher):
    prefill, decode, boot = start_pd(launcher)
    router = start_router(launcher, prefill, decode, boot)
    prefill.proc.terminate()
    assert prefill.wait_exit() == 0
    started = time.monotonic()
    answer = httpx.post(f"{router.url}/v1/chat/completions", json=chat(4, stream=False), timeout=30)
    # the decode's handshake with the dead bootstrap server fails at once, so the router does not wait
    assert answer.status_code >= 500 and time.monotonic() - started < 10
    assert total(decode.metrics(), "sglang:num_bootstrap_failed_reqs_total") >= 1


def test_kv_indptr_crash_as_a_log_watcher_sees_it(launcher):
    single = launcher.start_sglang(FLAGS, env=sim_env(SIM_KV_INDPTR_AFTER="1"))
    url = f"{single.url}/v1/chat/completions"
    assert httpx.post(url, json=chat(3, stream=False), timeout=10).status_code == 200
    with pytest.raises(httpx.ReadTimeout):  # the next decode step replays the graph: no answer, ever
        httpx.post(url, json=chat(3, stream=False), timeout=1.0)
    lines = single.output().splitlines()
    assert any(SIGNATURE in line and line.startswith("RuntimeError: ") for line in lines)
    assert any("Scheduler hit an exception: Traceback (most recent call last):" in line for line in lines)
    assert httpx.get(f"{single.url}/health", timeout=5).status_code == 200 and single.proc.poll() is None


@pytest.mark.parametrize(
    "extra", [[], ["--disable-cuda-graph"], ["--attention-backend", "minicpm_flashattn"]]
)
def test_kv_indptr_crash_workarounds_and_single_node_readiness(launcher, extra):
    flags = [f for f in FLAGS if f != "--skip-server-warmup"]  # with warm-up: /health is 503 until it ran
    single = launcher.start_sglang(flags + extra, env=sim_env(SIM_KV_INDPTR_AFTER="0"))
    assert "The server is fired up and ready to roll!" in single.output()
    url = f"{single.url}/v1/chat/completions"
    if not extra:
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(url, json=chat(3, stream=False), timeout=1.0)
        return
    for _ in range(3):
        assert httpx.post(url, json=chat(3, stream=False), timeout=10).status_code == 200
    assert SIGNATURE not in single.output()


def test_ports_in_use_are_startup_errors(launcher):
    boot = free_port()
    args = [*FLAGS, *PD, "--disaggregation-mode", "prefill", "--disaggregation-bootstrap-port", str(boot)]
    first = launcher.start_sglang(args)
    again = launcher.start_sglang(args, port=first.port, ready=False)
    assert again.wait_exit() == 1
    other = launcher.start_sglang(args, ready=False)  # its own API port, the same bootstrap port
    assert other.wait_exit() == 1
    for sim in (again, other):
        [line] = sim.output().strip().splitlines()
        assert (
            line.startswith("ERROR [sim sglang] OSError: [Errno 98]")
            and "address already in use" in line.lower()
        )


def wait_for_line(sim, text: str, timeout: float = 15.0) -> None:
    """Until the process has logged TEXT (polled: a condition, not a clock)."""
    deadline = time.monotonic() + timeout
    while text not in sim.output():
        assert time.monotonic() < deadline, f"no {text!r} after {timeout} s:\n{sim.output()}"
        time.sleep(0.05)


@pytest.mark.tools
@needs_router
def test_pd_over_mori_marks_its_traffic_on_the_named_devices_and_moves_kv(launcher):
    prefill, decode, boot = start_pd(launcher, MORI, **MARKED)
    router = start_router(launcher, prefill, decode, boot)
    answer = httpx.post(f"{router.url}/v1/chat/completions", json=chat(4, stream=False), timeout=30)
    assert answer.status_code == 200
    assert total(decode.metrics(), "sim_kv_remote_loads_total", outcome="ok") == 1
    for sim in (prefill, decode):
        said = "RDMA backend on ionic_0,ionic_1: traffic class 96 (DSCP 24), service level 3"
        assert said in sim.output(), sim.output()


def test_mori_unmarked_says_so_and_disagreeing_names_are_a_startup_error(launcher):
    unmarked = launcher.start_sglang([*FLAGS, *MORI, "--disaggregation-mode", "decode"])
    assert "MORI_RDMA_TC is unset: MoRI's RDMA packets are unmarked" in unmarked.output()
    env = sim_env(MORI_RDMA_TC="96", MORI_IO_TC="104")
    split = launcher.start_sglang([*FLAGS, *MORI, "--disaggregation-mode", "decode"], env=env, ready=False)
    assert split.wait_exit() == 1
    assert "MORI_RDMA_TC=96 and MORI_IO_TC=104: MoRI reads one value" in split.output()


def test_mori_without_rdma_devices_aborts_as_mori_does(launcher):
    args = [*FLAGS, "--disaggregation-transfer-backend", "mori", "--disaggregation-mode", "decode"]
    bare = launcher.start_sglang(args, ready=False)
    assert bare.wait_exit() == 134  # abort(): 128 + SIGABRT
    assert "Assertion `availDevices.size() > 0' failed." in bare.output()


def test_mori_registration_failure_is_logged_and_the_engine_hangs(launcher):
    env = sim_env(SIM_FAULT="rdma-register-fails")
    stuck = launcher.start_sglang([*FLAGS, *MORI, "--disaggregation-mode", "decode"], env=env, ready=False)
    wait_for_line(stuck, "SIM FAULT rdma-register-fails at ")
    assert "RegisterRdmaMemoryRegion failed! addr:" in stuck.output() and "errno:22 (Invalid argument)" in (
        stuck.output()
    )
    assert stuck.proc.poll() is None  # up, never serving: only the log watcher can end the job
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{stuck.url}/health", timeout=1.0)
    over_mooncake = launcher.start_sglang(
        [*FLAGS, *PD, "--disaggregation-mode", "decode"], env=env, ready=False
    )
    assert over_mooncake.wait_exit() == 1 and "is MoRI's" in over_mooncake.output()


def test_a_stalled_transfer_over_mori_logs_the_nics_retry_exceeded_line(launcher):
    prefill, decode, boot = start_pd(launcher, MORI, SIM_FAULT="kv-stall-after:0", SIM_FAULT_ROLE="prefill")
    body = {
        **chat(2, stream=False),
        "bootstrap_host": "127.0.0.1",
        "bootstrap_port": boot,
        "bootstrap_room": 7,
    }
    with pytest.raises(httpx.ReadTimeout):  # the prefill's request stalls with its transfer
        httpx.post(f"{prefill.url}/v1/chat/completions", json=body, timeout=1.0)
    wait_for_line(prefill, "ionic_comp_msn:1277: cqe with error 12 for 0x1 (msn)")
