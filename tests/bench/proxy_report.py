"""Numbers of the proxy benchmark: runs pooled per target and concurrency, added TTFT over direct,
the table, the JSON document and the closing ratio line."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field

from tests.bench.proxy_load import Result

DIRECT, PROXY, ROUTER = "direct", "proxy", "vllm-router"
MB = 1e6


@dataclass
class Measured:
    """One run of the load plus what the processes spent meanwhile."""

    result: Result
    router_cpu: float | None  # CPU seconds of the router under test (None for direct)
    rss: int | None  # its resident bytes after the run, and its peak so far (VmHWM)
    hwm: int | None
    engines_cpu: float
    machine_busy: float  # CPU seconds every process of the machine spent (/proc/stat)
    ours_cpu: float  # of which: engines, both routers, the client
    loadavg: str
    clock: tuple[float, float] = (math.nan, math.nan)  # start, end: seconds of the local day (the logs')


@dataclass
class Row:
    target: str
    concurrency: int
    runs: list[Measured] = field(default_factory=list)

    def _sum(self, attr: str) -> float:
        return sum(getattr(m.result, attr) for m in self.runs)

    @property
    def ok(self) -> int:
        return sum(m.result.ok for m in self.runs)

    @property
    def requests(self) -> int:
        return sum(m.result.requests for m in self.runs)

    @property
    def errors(self) -> Counter[str]:
        out: Counter[str] = Counter()
        for m in self.runs:
            out.update(m.result.errors)
        return out

    @property
    def completed(self) -> bool:
        return bool(self.runs) and self.ok == self.requests and not self.errors

    @property
    def rps(self) -> float:
        return self.ok / self._sum("wall")

    @property
    def chunks_per_s(self) -> float:
        return self._sum("events") / self._sum("wall")

    def ttft(self, q: float) -> float:
        return percentile([t for m in self.runs for t in m.result.ttft], q)

    def e2e(self, q: float) -> float:
        return percentile([t for m in self.runs for t in m.result.e2e], q)

    def server_timing(self, q: float) -> tuple[float, float]:
        """Percentiles (ms) of our proxy's Server-Timing: the prefill leg, and its own work before the
        decode leg (parsing, choosing, rewriting); nan for targets that send none."""
        pairs = [t for m in self.runs for t in m.result.server_timing]
        return percentile([p for p, _ in pairs], q), percentile([w for _, w in pairs], q)

    def first_wave_ttft(self, q: float) -> float:
        return percentile([t for m in self.runs for t in m.result.first_wave_ttft], q)

    @property
    def cpu_per_1k(self) -> float | None:
        if self.runs[0].router_cpu is None or not self.ok:
            return None
        return 1000 * sum(m.router_cpu or 0.0 for m in self.runs) / self.ok

    @property
    def chunks_per_cpu_s(self) -> float | None:
        """SSE chunks relayed per CPU second of the router (DESIGN.md's efficiency measure)."""
        cpu = sum(m.router_cpu or 0.0 for m in self.runs)
        return self._sum("events") / cpu if cpu else None

    @property
    def peak_rss(self) -> int | None:
        return max((m.hwm for m in self.runs if m.hwm is not None), default=None)

    @property
    def client_cpu_per_1k(self) -> float:
        return 1000 * self._sum("client_cpu") / max(1, self.ok)

    @property
    def engines_cpu_per_1k(self) -> float:
        return 1000 * sum(m.engines_cpu for m in self.runs) / max(1, self.ok)

    @property
    def engines_cores(self) -> float:
        return sum(m.engines_cpu for m in self.runs) / self._sum("wall")

    @property
    def client_cores(self) -> float:
        return self._sum("client_cpu") / self._sum("wall")

    @property
    def others_cpu_share(self) -> float:
        """Cores' worth of CPU that processes not of this benchmark used during the runs."""
        wall = self._sum("wall")
        return max(0.0, sum(m.machine_busy - m.ours_cpu for m in self.runs)) / wall if wall else 0.0


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100); nan when there is nothing to rank."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q / 100 * len(ordered)) - 1))]


def added(rows: dict[tuple[str, int], Row], target: str, conc: int, q: float) -> float:
    """TTFT percentile of a target minus that of direct-to-decode at the same concurrency (seconds)."""
    base = rows.get((DIRECT, conc))
    if base is None or not base.ok:
        return math.nan
    return rows[target, conc].ttft(q) - base.ttft(q)


def _ms(seconds: float) -> str:
    return "-" if math.isnan(seconds) else f"{1000 * seconds:.1f}"


HEADER = (
    f"{'target':12} {'conc':>5} {'req/s':>7} {'chunks/s':>9} {'TTFT p50':>9} {'TTFT p99':>9} "
    f"{'+p50 ms':>8} {'+p99 ms':>8} {'CPU s/1k':>9} {'peak RSS':>9} {'errors':>7}"
)


def table(rows: dict[tuple[str, int], Row]) -> list[str]:
    lines = [HEADER, "-" * len(HEADER)]
    for (target, conc), row in rows.items():
        if not row.runs:
            continue
        cpu = row.cpu_per_1k
        rss = row.peak_rss
        extra = (
            ("", "")
            if target == DIRECT
            else (_ms(added(rows, target, conc, 50)), _ms(added(rows, target, conc, 99)))
        )
        errors = sum(row.errors.values())
        lines.append(
            f"{target:12} {conc:>5} {row.rps:>7.1f} {row.chunks_per_s:>9.0f} {_ms(row.ttft(50)):>9} "
            f"{_ms(row.ttft(99)):>9} {extra[0]:>8} {extra[1]:>8} "
            f"{'-' if cpu is None else f'{cpu:.2f}':>9} {'-' if rss is None else f'{rss / MB:.0f} MB':>9} "
            f"{errors:>7}"
        )
    lines.append(
        "TTFT (ms): send to first SSE event, requests after each run's first wave; +p50/+p99: over direct "
        "at the same concurrency; CPU s/1k: the router's CPU per 1000 requests; peak RSS: its VmHWM"
    )
    return lines


def details(rows: dict[tuple[str, int], Row]) -> list[str]:
    """Where the CPU went per run (engines, load generator, the rest of the machine), and for our
    proxy its Server-Timing split of the TTFT it adds: the prefill leg and its own work."""
    out = []
    for (target, conc), row in rows.items():
        line = (
            f"  {target:12} {conc:>5}: engines {row.engines_cores:.2f} cores "
            f"({row.engines_cpu_per_1k:.1f} CPU s/1k req), load generator {row.client_cores:.2f} cores "
            f"({row.client_cpu_per_1k:.2f}), other processes {row.others_cpu_share:.2f} cores"
        )
        (p50, own50), (p99, own99) = row.server_timing(50), row.server_timing(99)
        if not math.isnan(p50):
            line += f"; prefill leg p50/p99 {p50:.1f}/{p99:.1f} ms, proxy's own {own50:.2f}/{own99:.2f} ms"
        out.append(line)
    return out


RATIOS = ("throughput", "p99 added TTFT", "cpu per request", "engines CPU per request")


def pass_ratios(
    rows: dict[tuple[str, int], Row], conc: int, skip: frozenset[int] = frozenset()
) -> tuple[dict[str, list[float]], int]:
    """Each proxy/vllm-router ratio once per interleaved pass (pass i: each target's i-th run), over the
    passes where both routers' runs completed without an error and not in `skip`; (ratios by name, passes
    left out). A ratio's spread over the passes is what says whether one number of it means anything."""
    p, r, d = rows.get((PROXY, conc)), rows.get((ROUTER, conc)), rows.get((DIRECT, conc))
    out: dict[str, list[float]] = {name: [] for name in RATIOS}
    if p is None or r is None:
        return out, 0
    left_out = 0
    for i, (mp, mr) in enumerate(zip(p.runs, r.runs, strict=False)):
        if i in skip or not (_clean(mp) and _clean(mr)):
            left_out += 1
            continue
        md = d.runs[i] if d is not None and i < len(d.runs) and _clean(d.runs[i]) else None
        pairs = {
            "throughput": (mp.result.ok / mp.result.wall, mr.result.ok / mr.result.wall),
            "p99 added TTFT": (_added_p99(mp, md), _added_p99(mr, md)),
            "cpu per request": (_per_ok(mp.router_cpu, mp), _per_ok(mr.router_cpu, mr)),
            "engines CPU per request": (_per_ok(mp.engines_cpu, mp), _per_ok(mr.engines_cpu, mr)),
        }
        for name, (a, b) in pairs.items():
            q = _quotient(a, b)
            if q is not None:
                out[name].append(q)
    return out, left_out


def subset_line(rows: dict[tuple[str, int], Row], conc: int, skip: frozenset[int], why: str) -> str:
    """The per-pass ratios' spread over the passes not in `skip` (`why` says what those had)."""
    ratios, left_out = pass_ratios(rows, conc, skip)
    kept = max(len(v) for v in ratios.values())
    parts = ", ".join(f"{k} {spread(ratios[k])}" for k in RATIOS)
    return f"proxy/vllm-router over the {kept} passes without {why} ({left_out} left out): {parts}"


def _clean(m: Measured) -> bool:
    return m.result.ok == m.result.requests and not m.result.errors and m.result.wall > 0


def _added_p99(m: Measured, direct: Measured | None) -> float:
    if direct is None:
        return math.nan
    return percentile(m.result.ttft, 99) - percentile(direct.result.ttft, 99)


def _per_ok(cpu: float | None, m: Measured) -> float | None:
    return None if cpu is None or not m.result.ok else cpu / m.result.ok


def _quotient(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or math.isnan(a) or math.isnan(b) or b <= 0:
        return None
    return a / b


def spread(values: list[float]) -> str:
    """`median [min-max]`, or `n/a` for no value."""
    if not values:
        return "n/a"
    ordered = sorted(values)
    mid = len(ordered) // 2
    median = ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2
    return f"{median:.2f} [{ordered[0]:.2f}-{ordered[-1]:.2f}]"


def ratio_line(rows: dict[tuple[str, int], Row], concurrencies: list[int]) -> tuple[str, int | None]:
    """`proxy/vllm-router: ...` at the highest concurrency both completed without an error (else the
    highest both ran): each ratio of the pooled runs (n/a if a run had errors), then with several passes
    its median [min-max] over the passes without an error."""
    both = [c for c in concurrencies if (PROXY, c) in rows and (ROUTER, c) in rows]
    completed = [c for c in both if rows[PROXY, c].completed and rows[ROUTER, c].completed]
    if not both:
        return "proxy/vllm-router: throughput n/a, p99 added TTFT n/a, cpu per request n/a", None
    c = max(completed or both)
    p, r = rows[PROXY, c], rows[ROUTER, c]
    pooled = dict.fromkeys(RATIOS, "n/a")
    if completed:
        pooled = {
            "throughput": _ratio(p.rps, r.rps),
            "p99 added TTFT": _ratio(added(rows, PROXY, c, 99), added(rows, ROUTER, c, 99)),
            "cpu per request": _ratio(p.cpu_per_1k, r.cpu_per_1k),
            "engines CPU per request": _ratio(p.engines_cpu_per_1k, r.engines_cpu_per_1k),
        }
    per_pass, left_out = pass_ratios(rows, c)
    if completed and min(len(p.runs), len(r.runs)) < 2:
        return "proxy/vllm-router: " + ", ".join(f"{k} {v}" for k, v in pooled.items()), c
    parts = [f"{k} {pooled[k]} (passes {spread(per_pass[k])})" for k in RATIOS]
    kept = max(len(v) for v in per_pass.values())
    errors = f", {left_out} with errors left out" if left_out else ""
    return f"proxy/vllm-router: {', '.join(parts)}; passes: median [min-max] of {kept}{errors}", c


def _ratio(a: float | None, b: float | None) -> str:
    if a is None or b is None or math.isnan(a) or math.isnan(b) or b <= 0:
        return "n/a"
    return f"{a / b:.2f}"


def row_doc(rows: dict[tuple[str, int], Row], row: Row) -> dict:
    t, c = row.target, row.concurrency
    return {
        "target": t,
        "concurrency": c,
        "requests": row.requests,
        "ok": row.ok,
        "errors": dict(row.errors),
        "completed": row.completed,
        "requests_per_s": row.rps,
        "sse_chunks_per_s": row.chunks_per_s,
        "ttft_s": {"p50": row.ttft(50), "p90": row.ttft(90), "p99": row.ttft(99)},
        "added_ttft_s": None
        if t == DIRECT
        else {q: added(rows, t, c, n) for q, n in (("p50", 50), ("p99", 99))},
        "e2e_s": {"p50": row.e2e(50), "p99": row.e2e(99)},
        "first_wave_ttft_s": {"p50": row.first_wave_ttft(50), "p99": row.first_wave_ttft(99)},
        "server_timing_ms": {
            f"p{q}": dict(zip(("prefill", "proxy"), row.server_timing(q), strict=True)) for q in (50, 99)
        },
        "router_cpu_s_per_1k": row.cpu_per_1k,
        "sse_chunks_per_router_cpu_s": row.chunks_per_cpu_s,
        "peak_rss_bytes": row.peak_rss,
        "client_cpu_s_per_1k": row.client_cpu_per_1k,
        "engines_cpu_s_per_1k": row.engines_cpu_per_1k,
        "other_processes_cores": row.others_cpu_share,
        "runs": [
            {
                "wall_s": m.result.wall,
                "ok": m.result.ok,
                "errors": dict(m.result.errors),
                "error_sample": m.result.error_sample,
                "requests_per_s": m.result.ok / m.result.wall if m.result.wall else 0.0,
                "ttft_s": {"p50": percentile(m.result.ttft, 50), "p99": percentile(m.result.ttft, 99)},
                "router_cpu_s": m.router_cpu,
                "rss_bytes_after": m.rss,
                "hwm_bytes_after": m.hwm,
                "client_cpu_s": m.result.client_cpu,
                "engines_cpu_s": m.engines_cpu,
                "machine_busy_cpu_s": m.machine_busy,
                "benchmark_cpu_s": m.ours_cpu,
                "loadavg": m.loadavg,
            }
            for m in row.runs
        ],
    }
