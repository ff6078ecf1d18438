"""Counters and histograms, written out in the Prometheus text format on GET /metrics.

Hand-written rather than prometheus_client 0.26.0: with it, one request's updates cost ~7x (a lock and a
label lookup each: ~6 -> ~40 us, tests/proxy/libeval.py) and a scrape ~50x, the backend gauges would
still need a custom collector, and the code would not get shorter.
"""

from __future__ import annotations

import bisect
import time
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from proxy.backends import Backends

# Seconds: from a fast decode chunk to a long-prompt prefill behind a queue.
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)


class Histogram:
    def __init__(self, buckets: tuple[float, ...] = BUCKETS) -> None:
        self.buckets = buckets
        self.counts = [0] * (len(buckets) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.buckets, value)] += 1
        self.sum += value

    def lines(self, name: str) -> Iterable[str]:
        total = 0
        for bound, count in zip((*map(repr, self.buckets), "+Inf"), self.counts, strict=True):
            total += count
            yield f'{name}_bucket{{le="{bound}"}} {total}'
        yield f"{name}_sum {self.sum!r}"
        yield f"{name}_count {total}"


class Metrics:
    def __init__(self) -> None:
        self.requests: Counter[str] = Counter()  # by endpoint
        self.errors: Counter[tuple[str, str]] = Counter()  # by (leg, kind)
        self.in_flight = 0
        self.prefill_seconds = Histogram()
        self.decode_first_byte_seconds = Histogram()
        self.decode_seconds = Histogram()
        self.prompt_tokens: Counter[str] = Counter()  # by prefill url
        self.cached_tokens: Counter[tuple[str, str]] = Counter()  # by (prefill url, stat)
        self.cache_reports: Counter[str] = Counter()  # prefill answers that carried cached_token_stats
        self.stream_chunks = 0
        self.stream_bytes = 0

    def prefill_answer(self, url: str, prompt_tokens: Any, stats: Mapping[str, Any]) -> None:
        """Token counts a prefill reported: the prompt, and what its caches (vLLM, LMCache L2) held."""
        if isinstance(prompt_tokens, int):
            self.prompt_tokens[url] += prompt_tokens
        if stats:
            self.cache_reports[url] += 1
        for stat, value in stats.items():
            if isinstance(value, int) and stat.startswith("num_") and stat.endswith("_tokens"):
                self.cached_tokens[url, stat] += value

    def render(self, backends: Backends) -> bytes:
        out: list[str] = []

        def family(name: str, kind: str, text: str, samples: Iterable[str]) -> None:
            out.extend((f"# HELP {name} {text}", f"# TYPE {name} {kind}", *samples))

        family(
            "proxy_requests_total",
            "counter",
            "Completion requests received, by endpoint.",
            (f"proxy_requests_total{_labels(endpoint=e)} {n}" for e, n in sorted(self.requests.items())),
        )
        family(
            "proxy_errors_total",
            "counter",
            "Failed requests, by leg and kind.",
            (
                f"proxy_errors_total{_labels(leg=leg, kind=k)} {n}"
                for (leg, k), n in sorted(self.errors.items())
            ),
        )
        family(
            "proxy_in_flight",
            "gauge",
            "Completion requests in progress.",
            (f"proxy_in_flight {self.in_flight}",),
        )
        for name, hist, text in (
            ("proxy_prefill_seconds", self.prefill_seconds, "Prefill leg duration."),
            (
                "proxy_decode_first_byte_seconds",
                self.decode_first_byte_seconds,
                "Decode leg start to its first byte (whole answer when not streaming).",
            ),
            ("proxy_decode_seconds", self.decode_seconds, "Decode leg duration."),
        ):
            family(name, "histogram", text, hist.lines(name))
        family(
            "proxy_prefill_prompt_tokens_total",
            "counter",
            "Prompt tokens reported by prefill answers.",
            (
                f"proxy_prefill_prompt_tokens_total{_labels(prefill=u)} {n}"
                for u, n in sorted(self.prompt_tokens.items())
            ),
        )
        family(
            "proxy_prefill_cached_tokens_total",
            "counter",
            "Prompt tokens found in a cache per cached_token_stats (num_lmcache_cached_tokens: LMCache L2).",
            (
                f"proxy_prefill_cached_tokens_total{_labels(prefill=u, stat=s)} {n}"
                for (u, s), n in sorted(self.cached_tokens.items())
            ),
        )
        family(
            "proxy_prefill_cache_reports_total",
            "counter",
            "Prefill answers carrying cached_token_stats.",
            (
                f"proxy_prefill_cache_reports_total{_labels(prefill=u)} {n}"
                for u, n in sorted(self.cache_reports.items())
            ),
        )
        family(
            "proxy_stream_chunks_total",
            "counter",
            "Decode stream chunks relayed.",
            (f"proxy_stream_chunks_total {self.stream_chunks}",),
        )
        family(
            "proxy_stream_bytes_total",
            "counter",
            "Decode stream bytes relayed.",
            (f"proxy_stream_bytes_total {self.stream_bytes}",),
        )
        family(
            "proxy_backend_healthy",
            "gauge",
            "1 while an engine is in rotation.",
            (
                f"proxy_backend_healthy{_labels(role=b.role, url=b.url)} {int(b.healthy)}"
                for b in backends.all
            ),
        )
        family(
            "proxy_backend_outstanding",
            "gauge",
            "Requests assigned to an engine and not finished.",
            (
                f"proxy_backend_outstanding{_labels(role=b.role, url=b.url)} {b.outstanding}"
                for b in backends.all
            ),
        )
        family(
            "process_cpu_seconds_total",
            "counter",
            "CPU time of the proxy process (overhead per request).",
            (f"process_cpu_seconds_total {time.process_time()!r}",),
        )
        return ("\n".join(out) + "\n").encode()


def _labels(**labels: str) -> str:
    def escape(value: str) -> str:
        return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")

    return "{" + ",".join(f'{k}="{escape(v)}"' for k, v in labels.items()) + "}"
