"""Processes of the proxy benchmark: simulated engines, our proxy, vllm-router; their CPU and memory
from /proc; every one started in its own session and stopped by its pid, whatever happens."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from tests.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
VLLM = ROOT / "sim" / "bin" / "vllm"
VENV_BIN = ROOT / ".venv" / "bin"
ROUTER = ROOT / ".venv-router" / "bin" / "vllm-router"
MODEL = "sim-model"
TICK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")
# Plain Mooncake PD (no LMCache child): prefill pushes, decode pulls; a failed load is an error, never a
# silent recompute, so every PD request the benchmark counts as good really moved its KV.
KV_PREFILL = {
    "kv_connector": "MooncakeConnector",
    "kv_role": "kv_producer",
    "kv_connector_extra_config": {"mooncake_protocol": "tcp"},
}
KV_DECODE = {
    "kv_connector": "MooncakeConnector",
    "kv_role": "kv_consumer",
    "kv_load_failure_policy": "fail",
    "kv_connector_extra_config": {"mooncake_protocol": "tcp"},
}


@dataclass(frozen=True)
class Usage:
    """CPU seconds of a process tree and its memory (bytes): resident now, and the peak (VmHWM)."""

    cpu: float
    rss: int
    hwm: int


def _tree(pid: int) -> list[int]:
    """The pid and its descendants (ppid links from /proc/<pid>/stat)."""
    parents: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                stat = Path(entry.path, "stat").read_bytes()
            except OSError:
                continue  # ended while we looked
            ppid = int(stat[stat.rindex(b")") + 2 :].split()[1])
            parents.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(parents.get(p, ()))
    return out


def usage(pid: int, *, tree: bool = True) -> Usage:
    """utime + stime (+ reaped children's) in seconds, and VmRSS/VmHWM summed over the tree."""
    cpu, rss, hwm = 0.0, 0, 0
    for p in _tree(pid) if tree else [pid]:
        try:
            stat = Path(f"/proc/{p}/stat").read_bytes()
            status = Path(f"/proc/{p}/status").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(b")") + 2 :].split()
        cpu += sum(int(x) for x in fields[11:15]) / TICK  # utime stime cutime cstime
        for line in status.splitlines():
            if line.startswith(("VmRSS:", "VmHWM:")):
                kib = int(line.split()[1]) * 1024
                if line.startswith("VmRSS:"):
                    rss += kib
                else:
                    hwm += kib
    return Usage(cpu, rss, hwm)


def self_cpu() -> float:
    """CPU seconds of this process (the load generator), all threads."""
    t = os.times()
    return t.user + t.system


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen
    log: Path
    url: str = ""

    @property
    def pid(self) -> int:
        return self.popen.pid

    def usage(self) -> Usage:
        return usage(self.pid)

    def alive(self) -> bool:
        return self.popen.poll() is None

    def tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


@dataclass
class Stack:
    """Everything the benchmark started, so that all of it is stopped by pid at the end."""

    workdir: Path
    procs: list[Proc] = field(default_factory=list)

    def start(
        self,
        name: str,
        argv: Sequence[str],
        *,
        env: dict[str, str],
        cpus: Iterable[int] | None,
        url: str = "",
        cwd: Path = ROOT,
    ) -> Proc:
        log = self.workdir / f"{name}.log"
        cpuset = set(cpus) if cpus else None

        def pin() -> None:  # before exec, so every thread the program creates inherits the set
            if cpuset:
                os.sched_setaffinity(0, cpuset)

        with log.open("wb") as out:
            popen = subprocess.Popen(
                list(argv),
                env=env,
                cwd=cwd,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                preexec_fn=pin if cpuset else None,  # safe: the bench starts processes from one thread
            )
        proc = Proc(name, popen, log, url)
        self.procs.append(proc)
        return proc

    def stop(self, proc: Proc, grace: float = 5.0) -> None:
        """SIGTERM to the session the process leads (its pid), then SIGKILL after `grace`."""
        if proc.popen.poll() is None:
            _signal_group(proc.pid, signal.SIGTERM)
            try:
                proc.popen.wait(grace)
            except subprocess.TimeoutExpired:
                _signal_group(proc.pid, signal.SIGKILL)
                proc.popen.wait(grace)
        _signal_group(proc.pid, signal.SIGKILL)  # leftovers of its session, if any
        if proc in self.procs:
            self.procs.remove(proc)

    def stop_all(self) -> None:
        for proc in reversed(list(self.procs)):
            if proc.popen.poll() is None:
                _signal_group(proc.pid, signal.SIGTERM)
        for proc in reversed(list(self.procs)):
            self.stop(proc)


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass  # already gone


def wait_http(proc: Proc, url: str, timeout: float, *, want: int = 200) -> None:
    """Polls `url` while checking the process is alive; raises with its log tail otherwise."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not proc.alive():
            raise RuntimeError(f"{proc.name} exited ({proc.popen.returncode}):\n{proc.tail()}")
        try:
            if httpx.get(url, timeout=2.0).status_code == want:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{proc.name}: {url} not answering {want} after {timeout:g} s:\n{proc.tail()}")


@dataclass(frozen=True)
class Latency:
    """The simulator's latency model (seconds per token)."""

    prefill: float
    decode: float
    kv: float

    def env(self) -> dict[str, str]:
        return {
            "SIM_PREFILL_S_PER_TOKEN": repr(self.prefill),
            "SIM_DECODE_S_PER_TOKEN": repr(self.decode),
            "SIM_KV_S_PER_TOKEN": repr(self.kv),
        }


@dataclass(frozen=True)
class Engine:
    role: str
    url: str
    bootstrap_port: int = 0
    proc: Proc | None = None


def base_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SIM_", "VLLM_", "PROXY_"))}
    env["PATH"] = f"{VLLM.parent}{os.pathsep}{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
    return env


def start_engines(
    stack: Stack, *, prefills: int, decodes: int, latency: Latency, max_seqs: int, cpus: Iterable[int] | None
) -> list[Engine]:
    model = stack.workdir / MODEL
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text(json.dumps({"max_position_embeddings": 131072}))
    engines = []
    for role, count, kv in (("prefill", prefills, KV_PREFILL), ("decode", decodes, KV_DECODE)):
        for i in range(count):
            port, boot = free_port(), free_port() if role == "prefill" else 0
            env = base_env() | latency.env() | {"VLLM_HOST_IP": "127.0.0.1", "SIM_KV_WAIT_S": "30"}
            if boot:
                env["VLLM_MOONCAKE_BOOTSTRAP_PORT"] = str(boot)
            argv = [
                "vllm", "serve", str(model), "--served-model-name", MODEL,
                "--host", "127.0.0.1", "--port", str(port),
                "--max-model-len", "32768", "--max-num-seqs", str(max_seqs),
                "--no-enable-prefix-caching", "--disable-log-stats",
                "--kv-transfer-config", json.dumps(kv, separators=(",", ":")),
            ]  # fmt: skip
            url = f"http://127.0.0.1:{port}"
            proc = stack.start(f"{role}{i}", argv, env=env, cpus=cpus, url=url)
            engines.append(Engine(role, url, boot, proc))
    for e in engines:
        assert e.proc is not None
        wait_http(e.proc, e.url + "/health", 60)
    return engines


def start_proxy(
    stack: Stack,
    engines: list[Engine],
    *,
    max_concurrency: int,
    policy: str,
    cpus: Iterable[int] | None,
    extra: Sequence[str] = (),
) -> Proc:
    """Our proxy; `extra`: the runner's router-args for it (configs/launch.yaml)."""
    port = free_port()
    argv = [str(VENV_BIN / "python"), "-m", "proxy", "--host", "127.0.0.1", "--port", str(port)]
    for e in engines:
        argv += ["--prefill", e.url, str(e.bootstrap_port)] if e.role == "prefill" else ["--decode", e.url]
    argv += ["--max-concurrency", str(max_concurrency), "--policy", policy, "--log-level", "warning", *extra]
    proc = stack.start("proxy", argv, env=base_env(), cpus=cpus, url=f"http://127.0.0.1:{port}")
    _wait_ready(proc, engines)
    return proc


def start_router(
    stack: Stack, engines: list[Engine], *, policy: str, cpus: Iterable[int] | None, extra: Sequence[str] = ()
) -> Proc:
    """vllm-router 0.1.17 in Mooncake PD mode (docs/upstream-facts.md#routers); every engine must already be
    up."""
    if not ROUTER.exists():
        raise RuntimeError(f"{ROUTER} missing: run `make tools` (or `make bench-proxy`)")
    port, prom = free_port(), free_port()
    argv = [str(ROUTER), "--vllm-pd-disaggregation", "--kv-connector", "mooncake"]
    for e in engines:
        argv += ["--prefill", e.url, str(e.bootstrap_port)] if e.role == "prefill" else ["--decode", e.url]
    argv += [
        "--host", "127.0.0.1", "--port", str(port), "--policy", policy,
        "--prometheus-host", "127.0.0.1", "--prometheus-port", str(prom),
        "--request-timeout-secs", "600", "--log-level", "warning", *extra,
    ]  # fmt: skip
    proc = stack.start("vllm-router", argv, env=base_env(), cpus=cpus, url=f"http://127.0.0.1:{port}")
    wait_http(proc, proc.url + "/health", 120)
    return proc


def _wait_ready(proc: Proc, engines: list[Engine]) -> None:
    """Our proxy serves at once; wait until its health checks found every engine."""
    want = {r: sum(e.role == r for e in engines) for r in ("prefill", "decode")}
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if not proc.alive():
            raise RuntimeError(f"proxy exited ({proc.popen.returncode}):\n{proc.tail()}")
        try:
            doc = httpx.get(proc.url + "/health", timeout=2.0).json()
            if all(doc[r]["healthy"] == n for r, n in want.items()):
                return
        except (httpx.HTTPError, ValueError, KeyError):
            pass
        time.sleep(0.1)
    raise RuntimeError(f"proxy did not see every engine healthy within 60 s:\n{proc.tail()}")


def metric_total(url: str, name: str, **labels: str) -> float:
    """Sum of a Prometheus sample family at `url` over series matching `labels`."""
    text = httpx.get(url, timeout=10.0).text
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name) or line[len(name) : len(name) + 1] not in ("{", " "):
            continue
        head, _, value = line.rpartition(" ")
        if all(f'{k}="{v}"' in head for k, v in labels.items()):
            total += float(value)
    return total
