"""Prometheus exposition, the exception → status table, and the error envelope."""

from __future__ import annotations

import json

import httpx
import pytest

from proxy.backends import Backend, Backends, Pool
from proxy.errors import (
    BadAnswer,
    BadRequest,
    ClientGone,
    ClientTimeout,
    Expired,
    NoBackend,
    PrefillUnusable,
    TooLarge,
    Unauthorized,
    UpstreamStatus,
    classify,
    envelope,
    sse_error,
)
from proxy.logs import Throttle
from proxy.metrics import Histogram, Metrics

REQUEST = httpx.Request("POST", "http://e:8000/v1/completions")


@pytest.mark.parametrize(
    ("exc", "status", "kind"),
    [
        (httpx.ConnectError("refused", request=REQUEST), 502, "connect"),
        (httpx.ConnectTimeout("slow", request=REQUEST), 502, "connect"),
        (httpx.PoolTimeout("full", request=REQUEST), 503, "pool_exhausted"),
        (httpx.ReadTimeout("quiet", request=REQUEST), 504, "timeout"),
        (httpx.WriteTimeout("stuck", request=REQUEST), 504, "timeout"),
        (httpx.RemoteProtocolError("incomplete chunked read", request=REQUEST), 502, "upstream_broken"),
        (httpx.ReadError("reset", request=REQUEST), 502, "upstream_broken"),
        (BadRequest("x"), 400, "invalid_request"),
        (TooLarge("x"), 413, "too_large"),
        (NoBackend("x"), 503, "no_backend"),
        (Expired("x"), 504, "timeout"),
        (ClientGone("x"), 499, "client_disconnect"),
        (Unauthorized("x"), 401, "unauthorized"),
        (ClientTimeout("x"), 408, "client_timeout"),
        (BadAnswer("x"), 502, "bad_answer"),
        (PrefillUnusable("x"), 502, "prefill_finish"),
        (UpstreamStatus(429, b"{}", b"application/json"), 429, "upstream_status"),
        (KeyError("bug"), 500, "internal"),
    ],
)
def test_classify(exc, status, kind):
    assert classify(exc) == (status, kind)


def test_one_envelope_as_json_and_as_sse():
    doc = {"error": {"message": "decode leg: gone", "type": "upstream_broken", "code": 502}}
    assert json.loads(envelope(502, "upstream_broken", "decode leg: gone")) == doc
    event = sse_error(502, "upstream_broken", "decode leg: gone")
    assert event.startswith(b"data: ") and event.endswith(b"\n\n")
    assert json.loads(event[len(b"data: ") :]) == doc


def test_histogram_buckets_are_cumulative():
    h = Histogram((0.1, 1.0))
    for value in (0.05, 0.1, 0.5, 7.0):
        h.observe(value)
    assert list(h.lines("x")) == [
        'x_bucket{le="0.1"} 2',
        'x_bucket{le="1.0"} 3',
        'x_bucket{le="+Inf"} 4',
        "x_sum 7.65",
        "x_count 4",
    ]


def test_render():
    m = Metrics()
    m.requests["/v1/completions"] += 2
    m.errors["prefill", "upstream_status"] += 1
    m.prefill_seconds.observe(0.2)
    m.prefill_answer(
        "http://p0:8000", 100, {"num_lmcache_cached_tokens": 64, "num_vllm_cached_tokens": 16, "note": "x"}
    )
    m.prefill_answer("http://p0:8000", 50, {})
    backends = Backends(
        Pool([Backend("prefill", 'http://p"0:8000', healthy=True, outstanding=3)]),
        Pool([Backend("decode", "http://d0:8000")]),
    )
    text = m.render(backends).decode()
    lines = set(text.splitlines())
    assert {
        "# TYPE proxy_requests_total counter",
        'proxy_requests_total{endpoint="/v1/completions"} 2',
        'proxy_errors_total{leg="prefill",kind="upstream_status"} 1',
        "proxy_in_flight 0",
        "# TYPE proxy_prefill_seconds histogram",
        'proxy_prefill_seconds_bucket{le="0.25"} 1',
        "proxy_prefill_seconds_count 1",
        'proxy_prefill_prompt_tokens_total{prefill="http://p0:8000"} 150',
        'proxy_prefill_cached_tokens_total{prefill="http://p0:8000",stat="num_lmcache_cached_tokens"} 64',
        'proxy_prefill_cached_tokens_total{prefill="http://p0:8000",stat="num_vllm_cached_tokens"} 16',
        'proxy_prefill_cache_reports_total{prefill="http://p0:8000"} 1',
        'proxy_backend_healthy{role="prefill",url="http://p\\"0:8000"} 1',
        'proxy_backend_outstanding{role="prefill",url="http://p\\"0:8000"} 3',
        'proxy_backend_healthy{role="decode",url="http://d0:8000"} 0',
    } <= lines
    assert "note" not in text
    assert any(line.startswith("process_cpu_seconds_total ") for line in lines)
    assert text.endswith("\n")


def test_throttle_writes_one_line_per_kind_per_interval():
    now = [0.0]
    throttle = Throttle(interval=10.0, clock=lambda: now[0])
    assert throttle.allow(("client", "invalid_request")) == ""
    assert throttle.allow(("client", "invalid_request")) is None
    assert throttle.allow(("client", "too_large")) == ""  # kinds are apart
    now[0] = 9.9
    assert throttle.allow(("client", "invalid_request")) is None
    now[0] = 10.0
    assert throttle.allow(("client", "invalid_request")) == " (2 more like it since the last line)"
    assert throttle.allow(("client", "invalid_request")) is None
