"""Prometheus text exposition with the metric names a real engine exports, plus sim_* counters.

One `Metrics` class, two schemas: vLLM's names (vllm/v1/metrics/loggers.py, PrometheusStatLogger; labels
model_name and engine) and SGLang's (sim.sglang_metrics). Counters are exposed with the `_total` suffix
as prometheus_client does. The sim_* series are things the real engines do not export (KV transfer
outcomes, L2 hits, injected faults); nothing reads them in production.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field

TTFT_BUCKETS = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    640.0,
    2560.0,
)
LATENCY_BUCKETS = (
    0.3,
    0.5,
    0.8,
    1.0,
    1.5,
    2.0,
    2.5,
    5.0,
    10.0,
    15.0,
    20.0,
    30.0,
    40.0,
    50.0,
    60.0,
    120.0,
    240.0,
    480.0,
    960.0,
    1920.0,
    7680.0,
)
ITL_BUCKETS = (
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.4,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
)
PROMPT_SOURCES = ("local_compute", "local_cache_hit", "external_kv_transfer")
FINISH_REASONS = ("stop", "length", "abort", "error")

# name -> (type, help); counters without the _total suffix (added on output).
VLLM = {
    "vllm:num_requests_running": ("gauge", "Number of requests in model execution batches."),
    "vllm:num_requests_waiting": ("gauge", "Number of requests waiting to be processed."),
    "vllm:kv_cache_usage_perc": ("gauge", "KV-cache usage. 1 means 100 percent usage."),
    "vllm:prefix_cache_queries": ("counter", "Prefix cache queries, in terms of number of queried tokens."),
    "vllm:prefix_cache_hits": ("counter", "Prefix cache hits, in terms of number of cached tokens."),
    "vllm:external_prefix_cache_queries": (
        "counter",
        "External prefix cache queries from KV connector cross-instance cache sharing, in terms "
        "of number of queried tokens.",
    ),
    "vllm:external_prefix_cache_hits": (
        "counter",
        "External prefix cache hits from KV connector cross-instance cache sharing, in terms of "
        "number of cached tokens.",
    ),
    "vllm:num_preemptions": ("counter", "Cumulative number of preemption from the engine."),
    "vllm:prompt_tokens": ("counter", "Number of prefill tokens processed."),
    "vllm:prompt_tokens_by_source": ("counter", "Number of prompt tokens by source."),
    "vllm:prompt_tokens_cached": ("counter", "Number of cached prompt tokens (local + external)."),
    "vllm:prompt_tokens_recomputed": ("counter", "Number of cached tokens recomputed for forward pass."),
    "vllm:generation_tokens": ("counter", "Number of generation tokens processed."),
    "vllm:request_success": ("counter", "Count of successfully processed requests."),
    "vllm:time_to_first_token_seconds": ("histogram", "Histogram of time to first token in seconds."),
    "vllm:inter_token_latency_seconds": ("histogram", "Histogram of inter-token latency in seconds."),
    "vllm:e2e_request_latency_seconds": ("histogram", "Histogram of e2e request latency in seconds."),
}
SIM = {
    "sim_kv_remote_loads": (
        "counter",
        "Decode: KV transfers loaded from a prefill (outcome ok) or not (outcome recomputed|failed, per "
        "vLLM's kv_load_failure_policy; SGLang always fails), or fake (SGLang's fake bootstrap host).",
    ),
    "sim_kv_remote_load_tokens": ("counter", "Decode: prompt tokens loaded from a prefill."),
    "sim_kv_transfers": (
        "counter",
        "Prefill: transfers by fate: kept, pulled, dropped (vLLM first-token stop), expired (never pulled).",
    ),
    "sim_contract_violations": (
        "counter",
        "PD contract violations seen (sim.contract rules), by rule and whether vLLM rejects them.",
    ),
    "sim_l2_lookups": ("counter", "Prefill: simulated LMCache L2 lookups."),
    "sim_l2_hits": ("counter", "Prefill: lookups that found prefix chunks beyond the local prefix cache."),
    "sim_l2_hit_tokens": ("counter", "Prefill: prompt tokens served from the simulated L2."),
    "sim_l2_degraded": ("gauge", "1 while the LMCache server is unreachable (connector runs without L2)."),
    "sim_faults_injected": ("counter", "Injected faults by kind."),
}


@dataclass
class Histogram:
    buckets: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0
    n: int = 0

    def observe(self, value: float) -> None:
        if not self.counts:
            self.counts = [0] * len(self.buckets)
        for i, edge in enumerate(self.buckets):
            if value <= edge:
                self.counts[i] += 1
        self.total += value
        self.n += 1


@dataclass(frozen=True)
class Schema:
    """What one engine exports: metric families in output order (name -> (type, help); counters without
    `_total`), labelled series present from the start (real engines export zeros before any request),
    histogram buckets, and the labels every series of a family carries (`{model}` is replaced)."""

    families: Mapping[str, tuple[str, str]]
    presets: Mapping[str, tuple[tuple[tuple[str, str], ...], ...]]
    buckets: Mapping[str, tuple[float, ...]]
    base: str  # default base labels, e.g. 'model_name="{model}",engine="0"'
    family_base: Mapping[str, str] = field(default_factory=dict)


VLLM_SCHEMA = Schema(
    families=VLLM,
    presets={
        "vllm:prompt_tokens_by_source": tuple((("source", s),) for s in PROMPT_SOURCES),
        "vllm:request_success": tuple((("finished_reason", r),) for r in FINISH_REASONS),
    },
    buckets={
        "vllm:time_to_first_token_seconds": TTFT_BUCKETS,
        "vllm:inter_token_latency_seconds": ITL_BUCKETS,
        "vllm:e2e_request_latency_seconds": LATENCY_BUCKETS,
    },
    base='model_name="{model}",engine="0"',
)


class Metrics:
    """Counters and gauges keyed by (name, extra labels); rendered on every scrape."""

    def __init__(self, model_name: str, schema: Schema = VLLM_SCHEMA) -> None:
        self.schema = schema
        model = _escape(model_name)
        self.base = schema.base.format(model=model)
        self.bases = {name: base.format(model=model) for name, base in schema.family_base.items()}
        self.values: dict[tuple[str, tuple[tuple[str, str], ...]], float] = defaultdict(float)
        self.hists = {name: Histogram(buckets) for name, buckets in schema.buckets.items()}
        for name, (kind, _) in schema.families.items():
            if name in schema.presets:
                for labels in schema.presets[name]:
                    self.values[(name, labels)] = 0
            elif kind != "histogram":
                self.values[(name, ())] = 0

    def inc(self, name: str, value: float = 1, **labels: str) -> None:
        self.values[(name, tuple(sorted(labels.items())))] += value

    def set(self, name: str, value: float, **labels: str) -> None:
        self.values[(name, tuple(sorted(labels.items())))] = value

    def get(self, name: str, **labels: str) -> float:
        return self.values.get((name, tuple(sorted(labels.items()))), 0.0)

    def observe(self, name: str, value: float) -> None:
        self.hists[name].observe(value)

    def render(self) -> str:
        lines: list[str] = []
        for family in (self.schema.families, SIM):
            for name, (kind, help_) in family.items():
                lines += self._family(name, kind, help_)
        return "\n".join(lines) + "\n"

    def _family(self, name: str, kind: str, help_: str) -> list[str]:
        shown = f"{name}_total" if kind == "counter" else name
        out = [f"# HELP {shown} {help_}", f"# TYPE {shown} {kind}"]
        if kind == "histogram":
            return out + self._histogram(name)
        series = sorted((labels, v) for (n, labels), v in self.values.items() if n == name)
        if name.startswith("sim_"):
            return out + [f"{shown}{_labels(labels, None)} {_num(v)}" for labels, v in series]
        base = self.bases.get(name, self.base)
        return out + [f"{shown}{_labels(labels, base)} {_num(v)}" for labels, v in series]

    def _histogram(self, name: str) -> list[str]:
        hist = self.hists[name]
        base = self.bases.get(name, self.base)
        counts = hist.counts or [0] * len(hist.buckets)
        out = [
            f'{name}_bucket{{{base},le="{_num(edge)}"}} {c}'
            for edge, c in zip(hist.buckets, counts, strict=True)
        ]
        out.append(f'{name}_bucket{{{base},le="+Inf"}} {hist.n}')
        out.append(f"{name}_count{{{base}}} {hist.n}")
        out.append(f"{name}_sum{{{base}}} {_num(hist.total)}")
        return out


def _labels(labels: tuple[tuple[str, str], ...], base: str | None) -> str:
    parts = ([base] if base else []) + [f'{k}="{_escape(v)}"' for k, v in labels]
    return "{" + ",".join(parts) + "}" if parts else ""


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _num(value: float) -> str:
    return repr(float(value))


def parse(text: str) -> dict[str, float]:
    """Prometheus text -> {'name{labels}': value} (tests and tools; labels kept verbatim)."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            out[key] = float(value)
    return out


def total(samples: dict[str, float], name: str, **labels: str) -> float:
    """Sum of `name` series whose labels include `labels` (any model/engine)."""
    want = [f'{k}="{v}"' for k, v in labels.items()]
    return sum(
        v for key, v in samples.items() if key.split("{", 1)[0] == name and all(w in key for w in want)
    )
