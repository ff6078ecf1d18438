"""The real-engine pass reads its engines' logs back into transfers (tests/bench/proxy_trace.py) and prints
each proxy/vllm-router ratio with its spread over the passes (tests/bench/proxy_report.py)."""

from __future__ import annotations

import math

import pytest

from tests.bench import proxy_trace as trace
from tests.bench.proxy_load import Result
from tests.bench.proxy_report import (
    DIRECT,
    PROXY,
    ROUTER,
    Measured,
    Row,
    pass_ratios,
    ratio_line,
    spread,
    subset_line,
)

XFER = "xfer-0123abcd"
KV = f"{{'do_remote_decode': False, 'do_remote_prefill': True, 'transfer_id': '{XFER}'}}"
D_REQ = "chatcmpl-7f-1a2b3c4d"

# The lines as vLLM 0.32 writes them with the bench's logging config (shortened params).
PREFILL = [
    f"INFO 10:00:01.000 pid=11 [request_logger.py:65] Received request chatcmpl-p: params: "
    f"SamplingParams(n=1, extra_args={{'kv_transfer_params': {KV}}}), lora_request: None.",
    f"DEBUG 10:00:01.400 pid=12 [mooncake_connector.py:1123] MooncakeConnector request_finished, "
    f"req_id=chatcmpl-p-9, request_status=FINISHED_LENGTH_CAPPED, kv_transfer_params={KV}",
    f"DEBUG 10:00:01.500 pid=13 [mooncake_connector.py:1931] Sending kv_caches for request {D_REQ} "
    "(16 blocks) to 127.0.0.1:16671",
    "DEBUG 10:00:21.900 pid=13 [mooncake_connector.py:1964] Sending to 127.0.0.1:16671 done, took 20.4",
    "WARNING 10:00:59.000 pid=13 [mooncake_connector.py:1968] Sending to 127.0.0.1:16671 failed (ret=-1) "
    "after 30.01 (12 descriptors, 1024 bytes)",
    'INFO:     127.0.0.1:41942 - "GET /query HTTP/1.1" 200 OK',
    "WARNING 10:01:00.000 pid=13 [mooncake_connector.py:1601] Timeout waiting for P side ready: ['x']",
]
DECODE = [
    f"INFO 10:00:01.450 pid=21 [request_logger.py:65] Received request chatcmpl-7f: params: "
    f"SamplingParams(n=1, extra_args={{'kv_transfer_params': {KV}}}), lora_request: None.",
    f"DEBUG 10:00:01.460 pid=22 [mooncake_connector.py:1037] MooncakeConnector update_state_after_alloc: "
    f"req_id={D_REQ} num_external_tokens=2000, kv_transfer_params={KV}",
    f"DEBUG 10:00:01.480 pid=23 [mooncake_connector.py:2340] Sending kv transfer request for {{'{D_REQ}'}} "
    "on path: tcp://127.0.0.1:35991",
    f"DEBUG 10:00:21.950 pid=23 [mooncake_connector.py:2436] pulling kv_caches for ['{D_REQ}'] finished",
]


def test_a_transfer_is_followed_from_prefill_to_the_decode_by_its_transfer_id():
    found = trace.read(PREFILL, DECODE)
    t = found.transfers[XFER]
    assert t.prefill_received == pytest.approx(36001.0)
    assert t.decode_sent_after_prefill == pytest.approx(0.05)
    assert t.kv_wait == pytest.approx(20.5)
    assert t.pull == pytest.approx(20.47)
    assert not t.pull_failed


def test_the_prefill_writes_their_failures_and_the_connector_warnings_are_counted():
    found = trace.read(PREFILL, DECODE)
    assert found.sends == [20.4]
    assert found.send_failures == ["ret=-1 after 30.0 s"]
    assert found.trouble == {"prefill: Timeout waiting for P side ready": 1}
    assert found.access == {"prefill GET /query": 1}


def test_a_failed_pull_and_an_unfinished_one_are_told_apart():
    failed = [line.replace("finished", "failed: transfer error") for line in DECODE]
    assert trace.read(PREFILL, failed).transfers[XFER].pull_failed
    s = trace.summary([trace.read(PREFILL, DECODE[:3]).transfers[XFER]])
    assert s["unfinished"] == 1 and math.isnan(s["kv_wait_s"]["max"])


def test_a_run_counts_its_stalls_in_its_own_window():
    found = trace.read(PREFILL, DECODE)
    assert trace.summary(trace.window(found, 36000.0, 36002.0))["stalled"] == 1
    assert trace.window(found, 36002.0, 36100.0) == []
    assert len(trace.window(found, 86000.0, 36001.5)) == 1  # a run across midnight


def _run(ok: int, wall: float, ttft: float, cpu: float | None, engines: float, errors: int = 0) -> Measured:
    r = Result("t", 4, ok + errors, wall=wall, ok=ok, ttft=[ttft] * ok)
    if errors:
        r.errors["HTTP 503"] = errors
    return Measured(r, cpu, None, None, engines, 0.0, 0.0, "")


def _rows(passes: list[tuple[Measured, Measured, Measured]]) -> dict[tuple[str, int], Row]:
    rows = {(t, 4): Row(t, 4) for t in (DIRECT, PROXY, ROUTER)}
    for runs in passes:
        for target, m in zip((DIRECT, PROXY, ROUTER), runs, strict=True):
            rows[target, 4].runs.append(m)
    return rows


def test_each_ratio_is_taken_per_pass_and_a_pass_with_an_error_is_left_out():
    rows = _rows(
        [
            (_run(10, 1, 0.1, None, 2), _run(10, 2, 0.3, 0.04, 4), _run(10, 4, 0.5, 0.02, 8)),
            (_run(10, 1, 0.1, None, 2), _run(10, 2, 0.5, 0.04, 4), _run(10, 2, 0.5, 0.02, 4)),
            (_run(10, 1, 0.1, None, 2), _run(9, 2, 0.3, 0.04, 4, errors=1), _run(10, 2, 0.5, 0.02, 4)),
        ]
    )
    ratios, left_out = pass_ratios(rows, 4)
    assert left_out == 1
    assert ratios["throughput"] == [2.0, 1.0]
    assert ratios["p99 added TTFT"] == pytest.approx([0.5, 1.0])
    assert ratios["cpu per request"] == [2.0, 2.0]
    assert ratios["engines CPU per request"] == [0.5, 1.0]


def test_spread_is_the_median_and_the_range():
    assert spread([1.0, 3.0, 2.0]) == "2.00 [1.00-3.00]"
    assert spread([1.0, 2.0]) == "1.50 [1.00-2.00]"
    assert spread([]) == "n/a"


def test_the_ratio_line_gives_each_ratio_pooled_and_its_spread_over_the_passes():
    one = (_run(10, 1, 0.1, None, 2), _run(10, 2, 0.3, 0.04, 4), _run(10, 2, 0.3, 0.02, 4))
    line, at = ratio_line(_rows([one, one]), [4])
    assert at == 4
    assert line == (
        "proxy/vllm-router: throughput 1.00 (passes 1.00 [1.00-1.00]), p99 added TTFT 1.00 (passes "
        "1.00 [1.00-1.00]), cpu per request 2.00 (passes 2.00 [2.00-2.00]), engines CPU per request "
        "1.00 (passes 1.00 [1.00-1.00]); passes: median [min-max] of 2"
    )
    single, _ = ratio_line(_rows([one]), [4])
    assert single.startswith("proxy/vllm-router: throughput 1.00, p99 added TTFT 1.00, cpu per request 2.00")


def test_passes_with_a_stalled_transfer_can_be_left_out_and_are_counted():
    fast = (_run(10, 1, 0.1, None, 2), _run(10, 2, 0.3, 0.04, 4), _run(10, 2, 0.3, 0.02, 4))
    stalled = (_run(10, 1, 0.1, None, 2), _run(10, 2, 0.3, 0.04, 4), _run(10, 20, 20.1, 0.02, 40))
    rows = _rows([fast, stalled, fast])
    clean = {"transfers": 10, "stalled": 0}
    runs = {(PROXY, 4): [clean] * 3, (ROUTER, 4): [clean, clean | {"stalled": 1}, clean]}
    skip = trace.stalled_passes(runs, 4)
    assert skip == {1}
    line = subset_line(rows, 4, skip, "a stall")
    assert line.startswith(
        "proxy/vllm-router over the 2 passes without a stall (1 left out): throughput 1.00 ["
    )


def test_with_errors_the_pooled_ratios_are_na_and_the_clean_passes_still_give_a_spread():
    one = (_run(10, 1, 0.1, None, 2), _run(10, 2, 0.3, 0.04, 4), _run(10, 2, 0.3, 0.02, 4))
    failed = (_run(10, 1, 0.1, None, 2), _run(10, 2, 0.3, 0.04, 4), _run(0, 1, 0.3, 0.02, 4, errors=10))
    line, at = ratio_line(_rows([one, failed, one]), [4])
    assert at == 4
    assert line.startswith("proxy/vllm-router: throughput n/a (passes 1.00 [1.00-1.00]), ")
    assert line.endswith("; passes: median [min-max] of 2, 1 with errors left out")
