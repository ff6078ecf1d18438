"""`make bench-proxy`: our PD proxy against direct-to-decode (the floor) and vllm-router 0.1.17 (Mooncake
PD mode), in one run, first on simulated engines (2P2D, up to 1024 streams), then on real ones (the
local-cpu config's vLLM CPU prefill and decode over the real Mooncake connector, tests/bench/proxy_real.py):
requests/s, SSE chunks/s, TTFT added over direct, router CPU per 1k requests, peak RSS, errors. Tables on
stdout, JSON in out/bench/proxy.json (simulated) and out/bench/proxy-real.json (real), and last, one line
per pass: `<engines>: proxy/vllm-router: throughput R, p99 added TTFT R, cpu per request R` (at the
highest concurrency both completed without an error).

Fairness on a small machine: targets run interleaved (direct, proxy, router, then router, proxy, direct)
so both routers see the same background load, and that load is reported. On simulated engines the router
under test gets a core of its own (taskset-style affinity), the engines and this load generator share the
others; real engines use every core, as in the job.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import platform
import shutil
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.bench import proxy_load as load  # noqa: E402
from tests.bench import proxy_real as real  # noqa: E402
from tests.bench import proxy_stack as stack  # noqa: E402
from tests.bench import proxy_trace as trace  # noqa: E402
from tests.bench.proxy_report import (  # noqa: E402
    DIRECT,
    PROXY,
    ROUTER,
    Measured,
    Row,
    details,
    ratio_line,
    row_doc,
    subset_line,
    table,
)

OUT = ROOT / "out" / "bench" / "proxy.json"
RUN_TIMEOUT = 240.0  # one run; far above what a healthy run takes, so a hang shows as errors
SIM, REAL = "sim", "real"
ALL_CPUS = os.sched_getaffinity(0)
LABEL = {SIM: "simulated engines", REAL: "real CPU engines"}


@dataclass(frozen=True)
class Pass:
    """What one kind of engines is measured with."""

    kind: str
    concurrency: list[int]
    passes: int
    work: load.Workload
    requests: int  # per run; 0: max(600, 3 x concurrency), or max(300, 2 x) with --quick
    warm_up: tuple[int, int]  # requests per target before measuring, at this concurrency
    out: Path


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="bench_proxy.py", description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--quick", action="store_true", help="smoke run: simulated engines, conc 16,256, one pass, ~1 min"
    )
    p.add_argument("--engines", default=None, help="sim,real (default; --quick: sim): which passes run")
    p.add_argument("--concurrency", default=None, help="comma-separated (default 16,64,256,1024)")
    p.add_argument("--requests", type=int, default=None, help="per run (default: max(600, 3 x concurrency))")
    p.add_argument("--passes", type=int, default=None, help="interleaved passes per concurrency (default 2)")
    p.add_argument("--targets", default=f"{DIRECT},{PROXY},{ROUTER}")
    p.add_argument("--prefills", type=int, default=2)
    p.add_argument("--decodes", type=int, default=2)
    p.add_argument("--prompt-tokens", default="256-1536", help="MIN-MAX prompt tokens per request")
    p.add_argument("--output-tokens", default="32-128", help="MIN-MAX output tokens per request")
    p.add_argument("--decode-s-per-token", type=float, default=0.002)
    p.add_argument("--prefill-s-per-token", type=float, default=2e-7)
    p.add_argument("--kv-s-per-token", type=float, default=1e-8)
    p.add_argument("--router-policy", default="round_robin", choices=("round_robin", "consistent_hash"))
    p.add_argument("--proxy-policy", default="least-loaded", choices=("least-loaded", "affinity"))
    p.add_argument("--no-pin", dest="pin", action="store_false", help="no CPU affinity for anything")
    p.add_argument(
        "--soak", type=float, default=0.0, metavar="S", help="then S seconds of proxy load, RSS sampled"
    )
    p.add_argument("--soak-concurrency", type=int, default=256)
    p.add_argument("--real-concurrency", default="4", help="the real pass's concurrencies")
    p.add_argument("--real-requests", type=int, default=48, help="per run of the real pass")
    p.add_argument("--real-passes", type=int, default=6)
    p.add_argument("--real-prompt-words", default="150-600", help="MIN-MAX words (~2 tokens each)")
    p.add_argument("--real-output-tokens", default="16-48")
    p.add_argument("--out", type=Path, default=OUT, help="the simulated pass's JSON (real: <stem>-real.json)")
    args = p.parse_args(argv)
    args.engines = [e for e in (args.engines or (SIM if args.quick else f"{SIM},{REAL}")).split(",") if e]
    if not args.engines or set(args.engines) - {SIM, REAL}:
        p.error(f"--engines: one or both of {SIM},{REAL}")
    if args.concurrency is None:
        args.concurrency = "16,256" if args.quick else "16,64,256,1024"
    args.concurrency = sorted({int(c) for c in args.concurrency.split(",")})
    args.passes = args.passes or (1 if args.quick else 2)
    args.targets = [t for t in (DIRECT, PROXY, ROUTER) if t in args.targets.split(",")]
    return args


def _span(text: str) -> tuple[int, int]:
    low, _, high = text.partition("-")
    return int(low), int(high or low)


def passes_of(args: argparse.Namespace) -> list[Pass]:
    out = []
    for kind in args.engines:
        if kind == SIM:
            work = load.Workload(*_span(args.prompt_tokens), *_span(args.output_tokens))
            out.append(Pass(SIM, args.concurrency, args.passes, work, args.requests or 0, (96, 16), args.out))
        else:
            work = load.Workload(*_span(args.real_prompt_words), *_span(args.real_output_tokens))
            conc = sorted({int(c) for c in args.real_concurrency.split(",")})
            where = args.out.with_name(f"{args.out.stem}-real{args.out.suffix}")
            out.append(Pass(REAL, conc, args.real_passes, work, args.real_requests, (8, 2), where))
    return out


def n_requests(args: argparse.Namespace, run: Pass, conc: int) -> int:
    """Enough that a run is mostly steady state: three rounds of the concurrency at least."""
    if run.requests:
        return run.requests
    return max(300, 2 * conc) if args.quick else max(600, 3 * conc)


def cpu_layout(pin: bool) -> tuple[set[int] | None, set[int] | None]:
    """(router under test, engines + load generator): the last allowed CPU for the router."""
    cpus = sorted(os.sched_getaffinity(0))
    if not pin or len(cpus) < 2:
        return None, None
    return {cpus[-1]}, set(cpus[:-1])


def machine_busy() -> float:
    """CPU seconds every process on the machine spent so far (/proc/stat, all but idle and iowait)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(fields[:8]) - fields[3] - fields[4]) / stack.TICK


class Bench:
    def __init__(self, args: argparse.Namespace, run: Pass, st: stack.Stack) -> None:
        self.args, self.run, self.st = args, run, st
        self.engines: list[stack.Engine] = []
        self.routers: dict[str, stack.Proc] = {}
        self.rows: dict[tuple[str, int], Row] = {}
        self.memory: list[dict] = []  # RSS of each router after every run, in order
        self.soak: list[dict] = []
        self.real: real.RealSetup | None = None
        self.engines_ready_s = 0.0
        self.kv_before = 0.0

    @property
    def model(self) -> str:
        return self.real.model if self.real else stack.MODEL

    def requests(self, work: load.Workload, count: int) -> list[bytes]:
        # a random-weight model may end early: a real engine ignores EOS, so answers are as long as asked
        extra = {"ignore_eos": True} if self.real else None
        return load.build_requests(work, count, "127.0.0.1", model=self.model, extra=extra)

    def start(self) -> None:
        a, run = self.args, self.run
        router_args: dict[str, list[str]] = {}
        if run.kind == REAL:
            router_cpus = other_cpus = None  # real engines use every core, as in the job
            self.real = real.setup()
            router_args = self.real.router_args
            self.engines, self.engines_ready_s = real.start_engines(self.st, self.real, None)
            print(f"  real engines answered /health after {self.engines_ready_s:.0f} s", flush=True)
        else:
            router_cpus, other_cpus = cpu_layout(a.pin)
            if other_cpus:
                os.sched_setaffinity(0, other_cpus)  # this process is the load generator
            latency = stack.Latency(a.prefill_s_per_token, a.decode_s_per_token, a.kv_s_per_token)
            peak = max(run.concurrency + [a.soak_concurrency if a.soak else 0])
            self.engines = stack.start_engines(
                self.st,
                prefills=a.prefills,
                decodes=a.decodes,
                latency=latency,
                max_seqs=2 * peak,
                cpus=other_cpus,
            )
        peak = max(run.concurrency + [a.soak_concurrency if a.soak and run.kind == SIM else 0])
        if PROXY in a.targets:
            self.routers[PROXY] = stack.start_proxy(
                self.st,
                self.engines,
                max_concurrency=peak,
                policy=a.proxy_policy,
                cpus=router_cpus,
                extra=router_args.get("pd-proxy", ()),
            )
        if ROUTER in a.targets:
            self.routers[ROUTER] = stack.start_router(
                self.st,
                self.engines,
                policy=a.router_policy,
                cpus=router_cpus,
                extra=router_args.get(ROUTER, ()),
            )
        self.layout = {"router": sorted(router_cpus or []), "engines_and_client": sorted(other_cpus or [])}
        if self.real:
            self.kv_before = real.kv_tokens(self.engines)

    def addrs(self, target: str) -> list[tuple[str, int]]:
        """Where the load goes: the router, or for direct every decode engine in turn."""
        if target == DIRECT:
            urls = [e.url for e in self.engines if e.role == "decode"]
        else:
            urls = [self.routers[target].url]
        return [(u.removeprefix("http://").rsplit(":", 1)[0], int(u.rsplit(":", 1)[1])) for u in urls]

    def all_cpu(self) -> float:
        procs = [e.proc for e in self.engines if e.proc] + list(self.routers.values())
        return sum(p.usage().cpu for p in procs) + stack.self_cpu()

    def engines_cpu(self) -> float:
        return sum(e.proc.usage().cpu for e in self.engines if e.proc)

    async def measure(self, target: str, conc: int, requests: list[bytes]) -> Measured:
        proc = self.routers.get(target)
        before = proc.usage() if proc else None
        eng0, ours0, busy0 = self.engines_cpu(), self.all_cpu(), machine_busy()
        loadavg = Path("/proc/loadavg").read_text().split(" ", 3)[:3]
        started = trace.clock()
        result = await load.run(target, self.addrs(target), requests, conc, RUN_TIMEOUT)
        after = proc.usage() if proc else None
        measured = Measured(
            result=result,
            router_cpu=None if proc is None else after.cpu - before.cpu,  # type: ignore[union-attr]
            rss=None if after is None else after.rss,
            hwm=None if after is None else after.hwm,
            engines_cpu=self.engines_cpu() - eng0,
            machine_busy=machine_busy() - busy0,
            ours_cpu=self.all_cpu() - ours0,
            loadavg=" ".join(loadavg),
            clock=(started, trace.clock()),
        )
        if after is not None:
            self.memory.append({"target": target, "concurrency": conc, "rss": after.rss, "hwm": after.hwm})
        return measured

    async def run_all(self) -> None:
        a, run = self.args, self.run
        await self.smoke(run.work)
        seed = run.work.seed + 1  # the smoke's; then one more per run
        for conc in run.concurrency:
            for i in range(run.passes):
                for target in a.targets if i % 2 == 0 else reversed(a.targets):
                    # Prompts of their own per run: a real engine's prefix cache would otherwise serve the
                    # prompts an earlier run computed, and the decode skip the KV pull it is measured on.
                    seed += 1
                    work = dataclasses.replace(run.work, seed=seed)
                    requests = self.requests(work, n_requests(a, run, conc))
                    m = await self.measure(target, conc, requests)
                    self.rows.setdefault((target, conc), Row(target, conc)).runs.append(m)
                    r = m.result
                    print(
                        f"  pass {i + 1} {target:12} conc {conc:5}: {r.ok}/{r.requests} ok in "
                        f"{r.wall:5.1f} s ({r.ok / r.wall:6.1f} req/s), errors {sum(r.errors.values())}, "
                        f"load {m.loadavg}",
                        flush=True,
                    )
                    await asyncio.sleep(0.5)  # let closed connections settle between runs
        if a.soak and PROXY in self.routers and run.kind == SIM:
            await self.run_soak(run.work)

    async def smoke(self, work: load.Workload) -> None:
        """A few requests per target, then a warm-up (connections, code paths), neither measured: a
        broken setup fails here with the answer shown."""
        count, conc = self.run.warm_up
        requests = self.requests(dataclasses.replace(work, seed=work.seed + 1), count)
        for target in self.args.targets:
            for some, c in ((requests[:4], 2), (requests, conc)):
                r = await load.run(target, self.addrs(target), some, c, RUN_TIMEOUT)
                if r.ok != len(some):
                    raise RuntimeError(f"requests through {target} failed: {dict(r.errors)} {r.error_sample}")

    async def run_soak(self, work: load.Workload) -> None:
        """Proxy only, back to back at one concurrency until the time is up; RSS after every batch."""
        proxy, conc = self.routers[PROXY], self.args.soak_concurrency
        requests = self.requests(work, 4 * conc)
        start = time.monotonic()
        while time.monotonic() - start < self.args.soak:
            r = await load.run(PROXY, self.addrs(PROXY), requests, conc, RUN_TIMEOUT)
            u = proxy.usage()
            self.soak.append(
                {"t_s": time.monotonic() - start, "ok": r.ok, "errors": sum(r.errors.values()), "rss": u.rss}
            )
            print(f"  soak {self.soak[-1]['t_s']:6.0f} s: {r.ok} ok, rss {u.rss / 1e6:.1f} MB", flush=True)

    def transfers(self) -> tuple[trace.Trace, dict] | None:
        """Real engines: each run's Mooncake transfers, read back from the engines' logs."""
        if not self.real:
            return None
        logs = {e.role: e.proc.log.read_text(errors="replace").splitlines() for e in self.engines if e.proc}
        found = trace.read(logs["prefill"], logs["decode"])
        return found, trace.by_run(found, self.rows)

    def kv_proof(self) -> dict:
        """Decode-side counters. Simulated: every PD request loaded its KV from the prefill (none
        recomputed). Real: prompt tokens whose KV the decode received over Mooncake during the runs."""
        if self.real:
            return {"external_kv_transfer_tokens": real.kv_tokens(self.engines) - self.kv_before}
        out = {"ok": 0.0, "failed": 0.0, "recomputed": 0.0}
        for e in self.engines:
            if e.role == "decode":
                for outcome in out:
                    out[outcome] += stack.metric_total(
                        e.url + "/metrics", "sim_kv_remote_loads_total", outcome=outcome
                    )
        return out


def report(bench: Bench, args: argparse.Namespace, started: float) -> str:
    rows, run = bench.rows, bench.run
    print(f"--- {LABEL[run.kind]} ---")
    for line in table(rows):
        print(line)
    kv = bench.kv_proof()
    pd_ok = sum(r.ok for (t, _), r in rows.items() if t != DIRECT)
    if bench.real:
        print(
            f"KV moved: the decode received the KV of {kv['external_kv_transfer_tokens']:,.0f} prompt tokens "
            f"over Mooncake during the runs ({pd_ok} good PD requests)"
        )
    else:
        print(
            f"KV moved: decode loaded {kv['ok']:.0f} transfers for {pd_ok} good PD requests (+ smoke, soak), "
            f"{kv['failed']:.0f} failed, {kv['recomputed']:.0f} recomputed"
        )
    for line in details(rows):
        print(line)
    transfers = bench.transfers()
    if transfers is not None:
        print("Mooncake transfers, from the engines' logs (tests/bench/proxy_trace.py):")
        for line in trace.lines(*transfers):
            print(line)
    line, at = ratio_line(rows, run.concurrency)
    stall_free = ""
    if transfers is not None and at is not None:
        stalled = trace.stalled_passes(transfers[1], at)
        stall_free = subset_line(rows, at, stalled, f"a transfer stalled >= {trace.STALL_S:g} s")
        print(stall_free)
    doc = {
        "engines_kind": run.kind,
        "machine": {
            "cpus": os.cpu_count(),
            "allowed": sorted(os.sched_getaffinity(0)),
            "kernel": platform.release(),
        },
        "pinning": bench.layout,
        "workload": dataclasses.asdict(run.work),
        "passes": run.passes,
        "router_policy": args.router_policy,
        "proxy_policy": args.proxy_policy,
        "rows": [row_doc(rows, row) for row in rows.values()],
        "router_memory_after_each_run": bench.memory,
        "ratios_at_concurrency": at,
        "summary": line,
        "summary_without_stalled_passes": stall_free,
        "elapsed_s": time.monotonic() - started,
    }
    if bench.real:
        doc |= {
            "config": real.CONFIG,
            "model": bench.real.model,
            "engines": {e.role: e.proc.log.name for e in bench.engines if e.proc},
            "engines_ready_s": bench.engines_ready_s,
            "kv_received": kv,
            "transfers_per_run": {f"{t} {c}": runs for (t, c), runs in transfers[1].items()}
            if transfers
            else {},
            "note": "prefill connector: Mooncake alone (LMCache left out, tests/bench/proxy_real.py)",
        }
    else:
        doc |= {
            "engines": {"prefill": args.prefills, "decode": args.decodes},
            "latency_model": {
                "SIM_PREFILL_S_PER_TOKEN": args.prefill_s_per_token,
                "SIM_DECODE_S_PER_TOKEN": args.decode_s_per_token,
                "SIM_KV_S_PER_TOKEN": args.kv_s_per_token,
            },
            "soak": bench.soak,
            "kv_remote_loads": kv,
        }
    run.out.parent.mkdir(parents=True, exist_ok=True)
    run.out.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"JSON: {run.out} ({time.monotonic() - started:.0f} s)")
    return f"{LABEL[run.kind]}: {line}" + (f"\n{LABEL[run.kind]}: {stall_free}" if stall_free else "")


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    # SIGTERM (a CI timeout, `kill`) unwinds like Ctrl-C, so the finally below stops every process.
    signal.signal(signal.SIGTERM, _interrupt)
    logs = args.out.parent / "proxy-logs"  # every process's output, of the last run only
    shutil.rmtree(logs, ignore_errors=True)
    lines = []
    for run in passes_of(args):
        started = time.monotonic()
        st = stack.Stack(logs / run.kind)
        st.workdir.mkdir(parents=True)
        try:
            bench = Bench(args, run, st)
            print(f"{LABEL[run.kind]}: starting; logs in {st.workdir}", flush=True)
            bench.start()
            print(
                f"{LABEL[run.kind]}: {len(bench.engines)} engines, cpus {bench.layout}, "
                f"targets {', '.join(args.targets)}",
                flush=True,
            )
            _run_loop(bench.run_all())
            lines.append(report(bench, args, started))
        finally:
            st.stop_all()
            os.sched_setaffinity(0, ALL_CPUS)  # the simulated pass pinned this process
    for line in lines:
        print(line)
    return 0


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def _run_loop(coro) -> None:
    """Runs the load on uvloop; SIGINT/SIGTERM cancel it (a signal handler raising inside the loop
    would only kill the callback it interrupted) and surface as KeyboardInterrupt."""

    async def guarded() -> None:
        loop, task = asyncio.get_running_loop(), asyncio.current_task()
        assert task is not None
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, task.cancel)
        try:
            await coro
        except asyncio.CancelledError:
            raise KeyboardInterrupt("interrupted") from None
        finally:
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)

    try:
        import uvloop
    except ImportError:
        uvloop = None
    try:
        (uvloop.run if uvloop else asyncio.run)(guarded())
    finally:
        signal.signal(signal.SIGTERM, _interrupt)  # the loop restored the default when it closed


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except KeyboardInterrupt:
        sys.exit("bench-proxy: interrupted (every process it started is stopped)")
    except RuntimeError as exc:  # a process that would not start or serve: its log tail is in the message
        # (RealEngineError too: a plan without the engine lines the real pass needs)
        sys.exit(f"bench-proxy: {exc}")
