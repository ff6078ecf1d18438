"""`make demo`: a local recipe submitted to the local SLURM cluster and followed until the job ends.

Exit 0 only when the job completed with exit code 0; otherwise the job's main output tail is printed.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from recipes.engines.stubs import hf_config
from recipes.models import facts
from recipes.render import RenderError, add_soak_option, load, render_config
from recipes.submit import Submission, SubmitError, pick, submit
from scripts import promtext
from sim import containers, nicctl
from sim.cpu import model as cpu_model

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CONFIG = "local-sim-vllm-disagg-agentic"
CLUSTER = ROOT / ".cluster"
# What a local node runs, by the name the rendered scripts call it: simulated vLLM and the real tools
# from their own virtualenvs (console scripts, linked: their #! line names their virtualenv's python).
NODE_TOOLS = {
    "vllm": "sim/bin/vllm",
    "lmcache": ".venv-lmcache/bin/lmcache",
    "vllm-router": ".venv-router/bin/vllm-router",
    "aiperf": ".venv-bench/bin/aiperf",
    "lm-eval": ".venv-eval/bin/lm-eval",  # the graded eval's client (scripts/accuracy.py)
    "nicctl": "sim/bin/nicctl",  # the host preflight's NIC tool (simulated NICs, as the GPUs are)
}
# python3 (the proxy, the simulator, sync.py) is the core virtualenv's. It must be exec'd by its own
# path: a symlink elsewhere would not find the virtualenv's pyvenv.cfg and run the bare interpreter.
CORE_PYTHON = ".venv/bin/python"
# `python3 -m MODULE` of what an SGLang image ships: the simulated server, and the real router from its
# own virtualenv (its dependencies stay out of the core one).
PYTHON_MODULES = {
    "sglang.launch_server": ("sim/bin/sglang", True),  # (target, drop "-m MODULE": it is an executable)
    "sglang_router.launch_router": (".venv-sglang-router/bin/python", False),
}
REPORT_PYTHON = ".venv-report/bin/python"
BENCH_PYTHON = ".venv-bench/bin/python"  # the client: AIPerf and the datasets library (sim/corpus.py)
ENDED = {
    "COMPLETED",
    "FAILED",
    "CANCELLED",
    "TIMEOUT",
    "NODE_FAIL",
    "OUT_OF_MEMORY",
    "PREEMPTED",
    "BOOT_FAIL",
}


class DemoError(Exception):
    """What stops the demo before or outside the job."""


def node_tools(engine_venv: str | None) -> dict[str, str]:
    """The node tools: the simulator's vllm, or (engine-build cpu) the real one of the runner's tool venv."""
    if engine_venv is None:
        return NODE_TOOLS
    return {**NODE_TOOLS, "vllm": f".venv-{engine_venv}/bin/vllm"}


def node_bin(root: Path = ROOT, engine_venv: str | None = None) -> Path:
    """A folder of exactly the node tools, first on the job's PATH (whole virtualenv bin/ folders would
    bring their own python3 along)."""
    folder = root / ".cluster" / "bin"
    folder.mkdir(parents=True, exist_ok=True)
    tools = node_tools(engine_venv)
    needed = (*tools.values(), *(t for t, _ in PYTHON_MODULES.values()), CORE_PYTHON, REPORT_PYTHON)
    missing = [target for target in needed if not (root / target).exists()]
    if missing:
        raise DemoError(f"missing {', '.join(missing)}: run `make venv tools` first")
    for name, target in tools.items():
        link = folder / name
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(root / target)
    python = folder / "python3"
    python.unlink(missing_ok=True)
    python.write_text(python_wrapper(root))
    python.chmod(0o755)
    return folder


def python_wrapper(root: Path) -> str:
    cases = "".join(
        f'    {module}) {"shift 2; " if drop else ""}exec {shlex.quote(str(root / target))} "$@" ;;\n'
        for module, (target, drop) in PYTHON_MODULES.items()
    )
    return (
        "#!/bin/sh\n"
        '# The node\'s python3: "-m MODULE" of the simulated image, else the core virtualenv.\n'
        f'if [ "$1" = -m ]; then\n  case "$2" in\n{cases}  esac\nfi\n'
        f'exec {shlex.quote(str(root / CORE_PYTHON))} "$@"\n'
    )


def job_env(root: Path = ROOT, engine_venv: str | None = None) -> dict[str, str]:
    conf = root / ".cluster" / "slurm.conf"
    if not conf.is_file():
        raise DemoError(f"{conf} not found: run `make cluster-up` first")
    path = f"{node_bin(root, engine_venv)}:{os.environ['PATH']}"
    return {**os.environ, "PATH": path, "SLURM_CONF": str(conf)}


def container_env(env: dict[str, str], profile) -> dict[str, str]:
    """A docker runner on the local cluster: podman behind `docker` first on the job's PATH, the node image
    made (once per content), and the host folders its container-mounts-from-env name."""
    mounts = {"DISAGG_TOOLS": str(ROOT), "DISAGG_PYTHON": str(Path(sys.base_prefix).resolve())}
    unknown = sorted(set(profile.container_mounts_from_env) - mounts.keys())
    if unknown or profile.container_image is None:
        raise DemoError(
            f"the demo's container runner mounts {', '.join(mounts)} and runs its own container-image; "
            f"the profile names {', '.join(unknown) or 'no container-image'}"
        )
    try:
        containers.ensure_podman()
        docker_bin = containers.docker_command(CLUSTER / "containers")
        start = time.monotonic()
        print(f"node image {profile.container_image}: checking (debootstrap makes it if missing)", flush=True)
        made = containers.node_image(
            docker_bin, profile.container_image, CLUSTER / "bin", ROOT / ".cache" / "containers"
        )
    except containers.ContainerError as exc:
        raise DemoError(str(exc)) from None
    how = f"made in {time.monotonic() - start:.0f} s" if made else "reused"
    print(f"node image {profile.container_image}: {how}", flush=True)
    return {**env, "PATH": f"{docker_bin}:{env['PATH']}", **mounts}


def simulated_host(plan) -> None:
    """What a simulated node's host holds for the job: the model folder (the simulator loads it like vLLM
    does: a config.json of the model's real architecture, configs/models.yaml, so its TP and context checks
    see its heads) and, where the host check lists RDMA devices in a folder of its own (the runner's
    nic-check rdma-sysfs), the simulated NICs' devices there with an active port, as the kernel lists them."""
    model_dir = Path(plan.container.mounts[0]) / plan.model
    model_dir.mkdir(parents=True, exist_ok=True)
    config = hf_config(facts(plan.model).architecture)
    (model_dir / "config.json").write_text(json.dumps(config, indent=1, sort_keys=True) + "\n")
    words = ["".join(w) for w in plan.host_check if all(isinstance(part, str) for part in w)]
    pairs = list(zip(words, words[1:], strict=False))  # each word and the next
    folder = next((Path(value) for flag, value in pairs if flag == "--rdma"), None)
    if folder is None:
        return
    simulated = {name for _, _, name in nicctl.NICS}  # a device no simulated NIC has stays absent
    for name in sorted({value for flag, value in pairs if flag == "--rdma-device"} & simulated):
        port = folder / name / "ports" / "1"
        port.mkdir(parents=True, exist_ok=True)
        (port / "state").write_text("4: ACTIVE\n")
        (folder / name / "fw_ver").write_text(f"{nicctl.FIRMWARE}\n")


@dataclass(frozen=True)
class JobState:
    state: str
    exit_code: str  # "rc:signal"

    @property
    def ended(self) -> bool:
        return self.state in ENDED

    @property
    def ok(self) -> bool:
        return self.state == "COMPLETED" and self.exit_code == "0:0"


# slurmctld on a 2-core machine busy with real engines can miss an answer; this many misses in a row, a
# second apart, is a cluster that is gone, not a slow one.
SCONTROL_TRIES = 5
SCONTROL_PAUSE_S = 1.0
CANCEL_WAIT_S = 60  # scancel to the job's end: its nodes' teardown (grace periods) runs first


def job_state(job_id: str, env: dict[str, str], tries: int = SCONTROL_TRIES) -> JobState:
    misses = []
    for _ in range(tries):
        try:
            done = subprocess.run(
                ["scontrol", "show", "job", "--oneliner", job_id],
                capture_output=True,
                text=True,
                env=env,
                timeout=30,
                check=False,
            )
        except subprocess.TimeoutExpired:
            misses.append("no answer within 30 s")
        else:
            if done.returncode == 0:
                fields = dict(f.split("=", 1) for f in done.stdout.split() if "=" in f)
                return JobState(fields.get("JobState", "UNKNOWN"), fields.get("ExitCode", "?"))
            misses.append(f"exit code {done.returncode}: {done.stderr.strip() or '(no message)'}")
        time.sleep(SCONTROL_PAUSE_S)  # a retry's pause, not a readiness wait: the next answer is the check
    raise DemoError(f"scontrol show job {job_id} failed {tries} times in a row: {'; '.join(misses)}")


def cancel(job: Submission, env: dict[str, str]) -> None:
    """The demo is ending without the job: scancel it and wait for its end, so that no engine outlives us."""
    print(f"demo: cancelling job {job.job_id}", file=sys.stderr, flush=True)
    done = subprocess.run(
        ["scancel", job.job_id], env=env, capture_output=True, text=True, timeout=30, check=False
    )
    if done.returncode != 0:
        print(f"demo: scancel {job.job_id}: {done.stderr.strip()}", file=sys.stderr, flush=True)
    deadline = time.monotonic() + CANCEL_WAIT_S
    while time.monotonic() < deadline:
        try:
            if job_state(job.job_id, env).ended:
                return
        except DemoError as exc:
            print(f"demo: {exc}", file=sys.stderr, flush=True)
            return
        time.sleep(1)
    print(
        f"demo: job {job.job_id} still running {CANCEL_WAIT_S} s after scancel", file=sys.stderr, flush=True
    )


def node_steps(run_dir: Path) -> dict[str, str]:
    steps = {}
    for step_file in sorted(run_dir.glob("state/*/step")):
        try:
            steps[step_file.parent.name] = step_file.read_text().strip()
        except OSError:
            continue  # replaced while we read it: the next poll sees it
    return steps


def decode_metrics_urls(run_dir: Path) -> list[str]:
    """The /metrics of the engines that finish requests (decode, or a single-node server), from the plan
    and the addresses the nodes published at the barrier."""
    try:
        plan = json.loads((run_dir / "recipe" / "plan.json").read_text())
        table = next(run_dir.glob("state/*/peers.json"), None)
        ranks = json.loads(table.read_text())["ranks"] if table else {}
    except (OSError, ValueError, KeyError):
        return []  # not published yet
    port = plan["ports"]["engine"]
    return [
        f"http://{ranks[str(n['rank'])]['data']['addr']}:{port}/metrics"
        for n in plan["nodes"]
        if n["role"] in ("decode", "server") and str(n["rank"]) in ranks
    ]


# The counter of finished requests each engine exports (sim/README.md lists both simulated ones).
REQUESTS_DONE = {"vllm": "vllm:request_success_total", "sglang": "sglang:num_requests_total"}


def requests_done(urls: list[str], metric: str = REQUESTS_DONE["vllm"]) -> int | None:
    """Requests the decode engines finished, None when none answers."""
    total, opener = None, urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: no proxies
    for url in urls:
        try:
            with opener.open(url, timeout=0.5) as response:
                text = response.read().decode()
        except (OSError, ValueError):
            continue  # not up yet, or gone: progress is best effort, the job's outcome is what counts
        total = (total or 0) + int(promtext.total(text, metric) or 0)
    return total


def results_of(run_dir: Path) -> list[Path]:
    """Result files (one per concurrency, or per soak phase), as the node script names them."""
    return sorted(
        p for pattern in ("*_conc*.json", "*_soak*.json") for p in (run_dir / "results").glob(pattern)
    )


def follow(job: Submission, env: dict[str, str], timeout: float, engine: str = "vllm") -> JobState:
    """Prints each node's step as it changes, requests done and the results as they land, until the end."""
    start, seen_results, done = time.monotonic(), set(), None
    seen_steps: dict[str, str] = {}
    reused = {p.result: p.measured_in for p in job.resumed.reused} if job.resumed else {}
    while True:
        state = job_state(job.job_id, env)
        count = requests_done(decode_metrics_urls(job.run_dir), REQUESTS_DONE[engine])
        if count is not None and count != done and (done is None or count - done >= 25):
            done = count
            print(f"[{time.monotonic() - start:6.1f}s] requests done: {count}", flush=True)
        for node, step in node_steps(job.run_dir).items():
            if seen_steps.get(node) != step:
                seen_steps[node] = step
                print(f"[{time.monotonic() - start:6.1f}s] {node}: {step}", flush=True)
        for result in results_of(job.run_dir):
            if result.name not in seen_results:
                seen_results.add(result.name)
                origin = f" (resumed from run {reused[result.name]})" if result.name in reused else ""
                print(f"[{time.monotonic() - start:6.1f}s] result: {result.name}{origin}", flush=True)
        if state.ended:
            return state
        if time.monotonic() - start > timeout:
            raise DemoError(f"job {job.job_id} still {state.state} after {timeout:g} s")
        time.sleep(1)


def tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError as err:
        return f"({path}: {err.strerror})"


def real_weights(plan, engine_venv: str) -> None:
    """The local-cpu runner's model, made once on this machine (sim/cpu/model.py) and linked under
    model-root, where the rendered engines look for it."""
    try:
        folder = cpu_model.ensure(plan.model, plan.container.mounts[0], engine_venv)
    except cpu_model.ModelError as exc:
        raise DemoError(str(exc)) from None
    how = "reused" if folder.made_s is None else f"made in {folder.made_s:.0f} s"
    print(f"model {plan.model}: {folder.path} ({how}), linked at {folder.link}", flush=True)


def made_up_corpus(plan) -> None:
    """The local runners' agentic corpus, made once under the pinned name in their hf-cache (sim/corpus.py,
    in the client's virtualenv: AIPerf names the dataset, the datasets library lays it out)."""
    for s in plan.staged:
        if s.kind != "hf-dataset" or plan.client_scenario is None or plan.client_scenario.corpus != "made-up":
            continue
        argv = [str(ROOT / BENCH_PYTHON), "-m", "sim.corpus", "--hf-cache", s.path, "--name", s.source]
        done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise DemoError(f"making the local corpus failed: {done.stderr.strip()[-2000:]}")
        print(done.stdout.strip(), flush=True)


def run(
    config: str,
    variant: str | None,
    out: Path,
    timeout: float,
    soak: int | None = None,
    resume_from: Path | None = None,
) -> int:
    loaded = load(config)
    variants = render_config(config, loaded, soak_seconds=soak)
    rendered = pick(variants, variant or variants[0].plan.variant)  # default: the config's first
    if rendered.plan.engine_build == "image":
        raise DemoError(
            f"{config} runs its image's engines on real GPUs (runner {rendered.plan.runner}); the demo "
            "needs a local runner (configs/launch.yaml engine-build: simulator or cpu)"
        )
    profile = loaded.launch.profiles[rendered.plan.runner]
    engine_venv = profile.engine_venv
    env = job_env(engine_venv=engine_venv)
    if profile.container_runtime == "docker":
        env = container_env(env, profile)
    if engine_venv is None:
        simulated_host(rendered.plan)
    else:
        real_weights(rendered.plan, engine_venv)
    made_up_corpus(rendered.plan)
    job = submit(rendered, out, env=env, resume_from=resume_from)
    for text in job.resumed.lines() if job.resumed else []:
        print(text, flush=True)
    for text in job.exclusion.lines() if job.exclusion else []:
        print(text, flush=True)
    print(f"submitted job {job.job_id} ({job.job_name}); main output: {job.run_dir}/job.out", flush=True)
    try:
        state = follow(job, env, timeout, rendered.plan.engine)
    except BaseException:  # Ctrl-C too: the job must not outlive the demo
        cancel(job, env)
        raise
    results = [p.name for p in results_of(job.run_dir)]
    print(f"job {job.job_id}: {state.state}, exit code {state.exit_code}")
    print(f"run folder: {job.run_dir}\nresults: {', '.join(results) or 'none'}")
    if not state.ok:
        print(
            f"--- last lines of {job.run_dir}/job.out ---\n{tail(job.run_dir / 'job.out')}", file=sys.stderr
        )
        return 1
    # summary.json and pareto.png, with the report's own virtualenv (matplotlib stays out of the core)
    done = subprocess.run(
        [str(ROOT / REPORT_PYTHON), "-m", "recipes.report", "report", str(job.run_dir)], cwd=ROOT, check=False
    )
    return 0 if done.returncode == 0 else 1


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="demo", description=__doc__.splitlines()[0])
    p.add_argument("config", nargs="?", default=DEFAULT_CONFIG)
    p.add_argument("--variant")
    p.add_argument("--out", default="out", type=Path)
    p.add_argument("--timeout", default=900.0, type=float, help="seconds before the job is cancelled")
    add_soak_option(p)
    p.add_argument("--resume", type=Path, metavar="RUN_DIR", help="run only what this earlier run left")
    args = p.parse_args(argv)
    try:
        return run(args.config, args.variant, args.out, args.timeout, args.soak, args.resume)
    except RenderError as exc:
        for finding in exc.findings:
            print(finding.format())
        return 1
    except (DemoError, SubmitError) as exc:
        print(f"demo: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
