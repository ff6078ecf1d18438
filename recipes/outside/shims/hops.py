"""The hops of the chain the recorder carries out itself: sbatch runs the job script, srun one task per
node, docker the container's command on this host with only the container's environment (stdlib only)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from shim import (  # type: ignore[import-not-found]  # a sibling file, as the shim runs
    FIXTURE,
    ROOT,
    compress_hostlist,
    end_lingering,
    expand_hostlist,
    fail,
    node_name,
    record,
    remaining,
)

SBATCH_SHORT = {"-N": "--nodes", "-n": "--ntasks", "-J": "--job-name", "-t": "--time", "-p": "--partition"}
SBATCH_SHORT |= {"-A": "--account", "-o": "--output", "-e": "--error", "-w": "--nodelist", "-x": "--exclude"}
SBATCH_FLAGS = ("--parsable", "--exclusive", "--spread-job", "--wait", "--hold")
SRUN_FLAGS = ("--unbuffered", "-u", "--exclusive", "--overlap", "-l", "--label")
DOCKER_FLAGS: tuple[str, ...] = (
    "--init",
    "--privileged",
    "--rm",
    "-d",
    "--detach",
    "-i",
    "-t",
    "-it",
    "--interactive",
)
DOCKER_FLAGS += ("--tty", "--read-only")


def parse_options(
    argv: list[str], flags: tuple[str, ...], short: dict[str, str]
) -> tuple[dict[str, str], int]:
    """Leading options into a {--long: value} map (flags map to ""); returns where the operands start."""
    options: dict[str, str] = {}
    index = 0
    while index < len(argv) and argv[index].startswith("-"):
        word = argv[index]
        name, eq, value = word.partition("=")
        name = short.get(name, name)
        if eq:
            options[name] = value
        elif word in flags:
            options[name] = ""
        else:
            index += 1
            options[name] = argv[index]
        index += 1
    return options, index


def directives(script: Path) -> dict[str, str]:
    """#SBATCH lines of the job script: what applies where the command line says nothing."""
    found: dict[str, str] = {}
    for line in script.read_text().splitlines():
        if line.startswith("#SBATCH"):
            words = line.split("#", 2)[1].split()[1:]
            options, _ = parse_options(words, SBATCH_FLAGS + ("--ntasks-per-node",), SBATCH_SHORT)
            found |= options
    return found


def job_state(job_id: str) -> Path:
    return ROOT / "run" / "jobs" / f"{job_id}.json"


def sbatch(argv: list[str]) -> int:
    """Runs the job script to its end before answering: by the time the runner script polls, the job has
    finished and its log file exists, so no polling loop waits."""
    options, start = parse_options(argv, SBATCH_FLAGS, SBATCH_SHORT)
    script = Path(argv[start])
    merged = directives(script) | options
    record("sbatch", argv, options=options, directives=directives(script), script=str(script))
    job_id, count = str(FIXTURE["job_id"]), int(merged.get("--nodes", "1"))
    nodelist = compress_hostlist(count)
    env = dict(os.environ)
    env |= {"SLURM_JOB_ID": job_id, "SLURM_JOBID": job_id, "SLURM_JOB_NODELIST": nodelist}
    env |= {"SLURM_NODELIST": nodelist, "SLURM_NNODES": str(count), "SLURM_JOB_NUM_NODES": str(count)}
    env |= {"SLURM_NTASKS": merged.get("--ntasks", str(count)), "SLURM_SUBMIT_DIR": os.getcwd()}
    env |= {"SLURM_JOB_NAME": merged.get("--job-name", script.name), "SLURMD_NODENAME": node_name(0)}
    env |= {
        "SLURM_JOB_PARTITION": merged.get("--partition", ""),
        "SLURM_JOB_ACCOUNT": merged.get("--account", ""),
    }
    env |= {"SLURM_PROCID": "0", "SLURM_NODEID": "0", "SLURM_LOCALID": "0", "RECORDER_NODE": "batch"}
    output = merged.get("--output", f"slurm-{job_id}.out").replace("%j", job_id)
    error = merged.get("--error", output).replace("%j", job_id)
    with open(output, "w") as out, open(error, "w") as err:
        try:
            code = subprocess.run(["bash", str(script)], env=env, stdout=out, stderr=err, timeout=remaining())
            rc = code.returncode
        except subprocess.TimeoutExpired:
            rc = 124
            err.write(f"[recorder] job script {script} did not finish before the deadline\n")
    end_lingering()
    job_state(job_id).parent.mkdir(parents=True, exist_ok=True)
    for kept, log in (("out", output), ("err", error)):  # the runner script deletes its logs on exit
        job_state(job_id).with_suffix(f".{kept}").write_text(Path(log).read_text())
    job_state(job_id).write_text(json.dumps({"exit": rc, "nodes": count, "output": output, "error": error}))
    print(job_id if "--parsable" in options else f"Submitted batch job {job_id}")
    return 0


def srun_nodes(options: dict[str, str]) -> list[str]:
    allocated = expand_hostlist(os.environ.get("SLURM_JOB_NODELIST", node_name(0)))
    if options.get("--nodelist"):
        return expand_hostlist(options["--nodelist"])
    count = options.get("--nodes", options.get("-N"))
    return allocated[: int(count)] if count else allocated


def srun(argv: list[str]) -> int:
    """One task per node, in rank order, each with the SLURM variables a real task sees; a service a task
    left running is ended with the task, as the job step would end it."""
    options, start = parse_options(argv, SRUN_FLAGS, {"-w": "--nodelist", "-N": "--nodes", "-n": "--ntasks"})
    command = argv[start:]
    nodes = srun_nodes(options)
    record("srun", argv, options=options, nodes=nodes)
    allocated = expand_hostlist(os.environ.get("SLURM_JOB_NODELIST", node_name(0)))
    worst = 0
    for rank, name in enumerate(nodes):
        index = allocated.index(name) if name in allocated else rank
        env = dict(os.environ) | {"SLURM_PROCID": str(rank), "SLURM_NODEID": str(rank), "SLURM_LOCALID": "0"}
        env |= {"SLURMD_NODENAME": name, "SLURM_STEP_NUM_NODES": str(len(nodes)), "RECORDER_NODE": str(index)}
        try:
            code = subprocess.run(command, env=env, timeout=remaining()).returncode
        except subprocess.TimeoutExpired:
            print(f"[recorder] srun task on {name} did not finish before the deadline", file=sys.stderr)
            code = 124
        end_lingering()
        worst = worst or code
    return worst


def scontrol(argv: list[str]) -> int:
    record("scontrol", argv)
    if argv[:2] == ["show", "hostnames"]:
        print("\n".join(expand_hostlist(argv[2] if len(argv) > 2 else os.environ["SLURM_JOB_NODELIST"])))
        return 0
    if argv[:2] == ["show", "job"]:
        print(f"JobId={argv[2] if len(argv) > 2 else ''} JobState=COMPLETED")
        return 0
    return fail("scontrol", argv, "no fixture answer for this scontrol query")


def squeue(argv: list[str]) -> int:
    """Every job the recorder ran has finished: the queue is empty."""
    record("squeue", argv)
    return 0


# The spelling make parity gives the image's own values on both sides (recipes/parity.py IMAGE_*).
IMAGE_SEARCH_PATHS = {
    "PYTHONPATH": "<the image's PYTHONPATH>",
    "LD_LIBRARY_PATH": "<the image's LD_LIBRARY_PATH>",
}


def container_env(options: list[tuple[str, str]]) -> dict[str, str]:
    """What a process in the container sees: the -e / --env-file values, plus the recorder's PATH and
    bookkeeping. The image's own ENV is not known here: the search paths a script extends
    (`PYTHONPATH=/x:$PYTHONPATH`) hold a placeholder for it, so what the script put first stays comparable."""
    env = {k: v for k, v in os.environ.items() if k.startswith(("RECORDER_", "BASH_ENV"))}
    env |= {"PATH": os.environ["RECORDER_BIN"], "HOME": str(ROOT / "fs" / "root")}
    env |= IMAGE_SEARCH_PATHS
    for name, value in options:
        if name == "--env-file":
            lines = Path(value).read_text().splitlines()
            pairs = [line for line in lines if line.strip() and not line.startswith("#")]
        elif name in ("-e", "--env"):
            pairs = [value]
        else:
            continue
        for pair in pairs:
            key, eq, val = pair.partition("=")
            if eq:
                env[key] = val
            elif key in os.environ:
                env[key] = os.environ[key]
    return env


def mount(options: list[tuple[str, str]]) -> None:
    """A bind mount whose target is a container path (rewritten into <scratch>/fs) becomes a symlink to its
    source when that source is inside the scratch folder; host paths like /sys are recorded, not mounted."""
    fs = ROOT / "fs"
    for name, value in options:
        if name not in ("-v", "--volume"):
            continue
        source, _, rest = value.partition(":")
        target = Path(rest.split(":")[0])
        if not str(target).startswith(str(fs)) or target.exists() or target.is_symlink():
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.startswith(str(ROOT)) and Path(source).exists():
            target.symlink_to(source)
        else:
            target.mkdir(parents=True, exist_ok=True)


def docker_run(argv: list[str]) -> int:
    options: list[tuple[str, str]] = []
    index = 0
    while index < len(argv) and argv[index].startswith("-"):
        name, eq, value = argv[index].partition("=")
        if not eq and name not in DOCKER_FLAGS:
            index += 1
            value = argv[index]
        options.append((name, value))
        index += 1
    image, command = argv[index], argv[index + 1 :]
    named = dict(options)
    container = named.get("--name", image)
    record("docker", ["run", *argv], image=image, command=command, container_name=container)
    mount(options)
    env = container_env(options) | {"RECORDER_CONTAINER": container}
    workdir = named.get("-w", named.get("--workdir", str(ROOT / "fs")))
    if not command:
        return 0
    if "-d" in named or "--detach" in named:
        subprocess.Popen(command, env=env, cwd=workdir, stdin=subprocess.DEVNULL, start_new_session=False)
        return 0
    try:
        return subprocess.run(command, env=env, cwd=workdir, timeout=remaining()).returncode
    except subprocess.TimeoutExpired:
        print(f"[recorder] container {container} did not finish before the deadline", file=sys.stderr)
        return 124


def docker(argv: list[str]) -> int:
    words = [a for a in argv if not a.startswith("-")]
    if words[:1] == ["run"]:
        return docker_run(argv[argv.index("run") + 1 :])
    record("docker", argv)
    if words[:1] in (["ps"], ["rm"], ["stop"], ["kill"], ["pull"], ["images"], ["inspect"], ["logs"]):
        return 0  # nothing is running here; a pull would reach the registry, so it is recorded only
    return fail("docker", argv, "no recorder for this docker subcommand")


HOPS: dict[str, Callable[[list[str]], int]] = {
    "sbatch": sbatch,
    "srun": srun,
    "scontrol": scontrol,
    "squeue": squeue,
    "docker": docker,
}
