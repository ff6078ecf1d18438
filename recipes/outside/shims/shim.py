"""The recorder behind every shimmed command of InferenceX's launch chain (stdlib only, run per call).

The harness puts one launcher per tool on the chain's PATH (`exec python shim.py <tool> "$@"`). Each call
appends one JSON line to $RECORDER_LOG (argv, the environment the process sees, where the chain called it)
and then answers as the real tool would on the fixture cluster, or runs the next hop of the chain (sbatch
runs job.slurm, srun runs a task per node, docker runs the container's command on this host).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from procs import pgid, started_at  # type: ignore[import-not-found]  # a sibling file, as the shim runs

HARNESS_KEYS = ("RECORDER_", "BASH_ENV")
WRITE_TOOLS = ("mkdir", "rm", "cp", "mv", "tee", "chmod", "chown", "touch", "ln", "tar")
NETWORK_TOOLS = ("pip", "pip3", "uv", "git", "apt-get", "hf", "huggingface-cli")

ROOT = Path(os.environ["RECORDER_ROOT"])
SHIM = Path(__file__).resolve()
FIXTURE = json.loads((Path(os.environ["RECORDER_FIXTURE"]) / "node.json").read_text())


def record(tool: str, argv: list[str], **extra: object) -> None:
    """One JSON line per call; a single O_APPEND write keeps concurrent writers' lines whole."""
    entry = {
        "tool": tool,
        "argv": argv,
        "cwd": os.getcwd(),
        "env": {k: v for k, v in os.environ.items() if not k.startswith(HARNESS_KEYS)},
        "loc": os.environ.get("RECORDER_LOC", ""),
        "parent": os.environ.get("RECORDER_PARENT", ""),
        "node": os.environ.get("RECORDER_NODE"),
        "container": os.environ.get("RECORDER_CONTAINER"),
        "time": time.monotonic_ns(),
        **{key: value for key, value in extra.items() if value is not None},
    }
    fd = os.open(os.environ["RECORDER_LOG"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(entry) + "\n").encode())
    finally:
        os.close(fd)


def remaining() -> float:
    """Each hop is bounded by what is left of the harness's deadline, so a stuck hop is named where it
    stuck rather than by the harness's kill."""
    return max(1.0, float(os.environ.get("RECORDER_DEADLINE", time.time() + 60)) - time.time() - 2.0)


def fail(tool: str, argv: list[str], why: str, code: int = 1) -> int:
    record(tool, argv, refused=why)
    print(f"[recorder] {tool}: refused: {why}", file=sys.stderr)
    return code


# --- the fixture cluster -------------------------------------------------------------------------------


def node_name(rank: int) -> str:
    digits = int(FIXTURE["node_digits"])
    return f"{FIXTURE['node_prefix']}{int(FIXTURE['node_first']) + rank:0{digits}d}"


def node_address(rank: int) -> str:
    return f"{FIXTURE['address_prefix']}{int(FIXTURE['address_first']) + rank}"


def current_rank() -> int | None:
    node = os.environ.get("RECORDER_NODE")
    if node in (None, ""):
        return None
    return 0 if node == "batch" else int(node)  # the batch script runs on the job's first node


def expand_hostlist(text: str) -> list[str]:
    """SLURM's `prefix[01-03,07]` lists, as `scontrol show hostnames` expands them."""
    names: list[str] = []
    for part in re.findall(r"[^,\[]+(?:\[[^\]]*\])?", text):
        match = re.fullmatch(r"(.*)\[(.*)\]", part)
        if not match:
            names.append(part)
            continue
        prefix, ranges = match.groups()
        for item in ranges.split(","):
            low, _, high = item.partition("-")
            for value in range(int(low), int(high or low) + 1):
                names.append(f"{prefix}{value:0{len(low)}d}")
    return names


def compress_hostlist(count: int) -> str:
    digits = int(FIXTURE["node_digits"])
    first = int(FIXTURE["node_first"])
    if count == 1:
        return node_name(0)
    return f"{FIXTURE['node_prefix']}[{first:0{digits}d}-{first + count - 1:0{digits}d}]"


# --- harmless answers ----------------------------------------------------------------------------------


def rdma_addresses(rank: int) -> list[tuple[str, str]]:
    """(interface, address) of the node's RoCE NICs: NIC i's /31 to its switch, 192.168.<i>.<2 x rank> (the
    layout server_vllm.sh's route fix describes), or none when the fixture gives no RDMA subnet."""
    prefix = FIXTURE.get("rdma_address_prefix")
    if not prefix:
        return []
    nics = [link for link in FIXTURE["links"] if link.startswith("benic")]
    return [(nic, f"{prefix}{i}.{2 * rank}") for i, nic in enumerate(nics, start=1)]


def answer_hostname(argv: list[str]) -> int:
    rank = current_rank()
    if "-I" in argv:
        print(" ".join([node_address(rank or 0), *(a for _, a in rdma_addresses(rank or 0))]))
    elif "-i" in argv:
        print(node_address(rank or 0))
    else:
        print(node_name(rank) if rank is not None else FIXTURE["runner_host"])
    return 0


def answer_ip(argv: list[str]) -> int:
    rank = current_rank() or 0
    iface, gateway, address = FIXTURE["default_interface"], FIXTURE["gateway"], node_address(rank)
    words = [a for a in argv if not a.startswith("-")]
    changes = ("add", "replace", "change", "append", "del", "flush")
    if words[:1] == ["route"] and words[1:2] and words[1] in changes:
        return fail("ip", argv, "would change the node's routing table (recorded as refused, not run)")
    if words[:2] == ["route", "get"]:
        print(f"{words[2]} via {gateway} dev {iface} src {address} uid 0\n    cache")
    elif words[:1] == ["route"]:
        print(f"default via {gateway} dev {iface} proto static metric 100")
        print(f"{FIXTURE['address_prefix']}0/24 dev {iface} proto kernel scope link src {address}")
    elif words[:1] in (["addr"], ["address"], ["a"]):
        pairs = [(iface, f"{address}/24"), *((n, f"{a}/31") for n, a in rdma_addresses(rank))]
        for index, (name, cidr) in enumerate(pairs, start=2):
            print(f"{index}: {name}    inet {cidr} scope global {name}\\       valid_lft forever")
    elif words[:1] == ["link"]:
        for index, link in enumerate(FIXTURE["links"], start=1):
            print(f"{index}: {link}: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 9000 state UP")
    else:
        return fail("ip", argv, "no fixture answer for this ip query")
    return 0


def answer_nicctl(argv: list[str]) -> int:
    key = " ".join(["nicctl", *argv])
    name = FIXTURE["outputs"].get(key)
    if name is None:
        return fail("nicctl", argv, f"no fixture output for `{key}`")
    sys.stdout.write((Path(os.environ["RECORDER_FIXTURE"]) / name).read_text())
    return 0


def answer_rocm_smi(argv: list[str]) -> int:
    if "--showmemuse" in argv:
        for gpu in range(int(FIXTURE["gpus"])):
            print(f"GPU[{gpu}]\t\t: GPU Memory Allocated (VRAM%): {FIXTURE['gpu_vram_percent']}")
    return 0


def answer_ibv_devinfo(argv: list[str]) -> int:
    for device in FIXTURE["rdma_devices"]:
        print(f"hca_id:\t{device}\n\ttransport:\t\t\tInfiniBand (0)\n\tphys_port_cnt:\t\t\t1\n")
    return 0


def answer_whoami(argv: list[str]) -> int:
    print(os.environ.get("USER", FIXTURE["runner_user"]))
    return 0


def answer_curl(tool: str, argv: list[str]) -> int:
    """Cluster endpoints answer the first request per node and URL (the service came up) and refuse later
    ones (the job is over, so `while curl ...; do` teardown waits end); anything outside is refused."""
    urls = [a for a in argv if re.match(r"https?://", a)]
    url = urls[0] if urls else ""
    host = re.sub(r"^https?://([^/:]+).*$", r"\1", url)
    local = host in ("0.0.0.0", "127.0.0.1", "localhost") or host.startswith(FIXTURE["address_prefix"])
    if not local:
        return fail(tool, argv, f"outside network: {url or 'no URL'}", 7)
    seen = ROOT / "run" / "endpoints" / re.sub(r"[^A-Za-z0-9]+", "_", f"{current_rank()}_{url}")
    if seen.exists():
        record(tool, argv, answered="connection refused (already answered once)")
        return 7
    seen.parent.mkdir(parents=True, exist_ok=True)
    seen.touch()
    body = "Cache flushed successfully" if url.endswith("/flush_cache") else '{"status": "ok"}'
    record(tool, argv, answered="200")
    output = argv[argv.index("-o") + 1] if "-o" in argv else None
    if output and output != "/dev/null":
        Path(output).write_text(body)
    elif not output:
        sys.stdout.write(body)
    if "-w" in argv:
        sys.stdout.write(argv[argv.index("-w") + 1].replace("%{http_code}", "200"))
    return 0


# --- commands that would touch the outside --------------------------------------------------------------


def inside_scratch(path: str) -> bool:
    if path in ("/dev/null", "/dev/stdout", "/dev/stderr") or path.startswith("/dev/fd/"):
        return True
    resolved = os.path.realpath(os.path.join(os.getcwd(), path))
    return resolved == str(ROOT) or resolved.startswith(str(ROOT) + os.sep)


def guarded(tool: str, argv: list[str]) -> int:
    """File-writing coreutils run only on operands inside the scratch folder (we run as whoever runs the
    tests, possibly root: `sudo rm -rf $BENCHMARK_LOGS_DIR` must never reach a real path)."""
    operands = [a for a in argv if not a.startswith("-")]
    if tool in ("chmod", "chown") and operands:
        operands = operands[1:]
    if tool == "tar":
        operands = [a for a in operands if "/" in a]
    outside = [a for a in operands if not inside_scratch(a)]
    if outside:
        return fail(tool, argv, f"would write outside the scratch folder: {' '.join(outside)}")
    real = {"tee": "/usr/bin/tee"}.get(tool, f"/bin/{tool}")
    os.execv(real, [tool, *argv])
    return 0  # not reached


def linger(tool: str) -> int:
    """A service started in the background (`cmd &`: bash gives it /dev/null as stdin) stays alive like
    the real one, so `kill -0 $pid` watchers see it running, until it is killed or its node's task ends.
    One started in the foreground returns at once so it cannot block the chain."""
    try:
        background = os.path.samestat(os.fstat(0), os.stat("/dev/null"))
    except OSError:
        background = True
    if not background:
        return 0
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (1, 2):
        os.dup2(devnull, fd)  # never hold a pipe open: `$(...)` and `| tee` readers must see EOF
    pidfile = ROOT / "run" / "linger" / str(os.getpid())
    pidfile.parent.mkdir(parents=True, exist_ok=True)
    pidfile.write_text(started_at(os.getpid()) or "")
    signals = {signal.SIGTERM, signal.SIGINT, signal.SIGHUP}
    signal.pthread_sigmask(signal.SIG_BLOCK, signals)
    deadline = float(os.environ.get("RECORDER_DEADLINE", time.time() + 30))
    signal.sigtimedwait(signals, max(0.0, deadline - time.time()))
    pidfile.unlink(missing_ok=True)
    return 0


def end_lingering() -> None:
    folder = ROOT / "run" / "linger"
    for pidfile in sorted(folder.glob("*")) if folder.is_dir() else []:
        pid = int(pidfile.name)
        if started_at(pid) != pidfile.read_text():
            pidfile.unlink(missing_ok=True)  # gone (killed by the scripts): its pid may be another's now
            continue
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pidfile.unlink(missing_ok=True)


def service(tool: str, argv: list[str], kind: str, venv: str | None = None) -> int:
    record(tool, argv, service=kind, venv=venv)
    return linger(tool)


# --- installs and the client's virtualenv -----------------------------------------------------------------

# pip / `uv pip install` options that take a value (the value is not a package).
INSTALL_VALUED = (
    "--python", "-p", "-i", "--index-url", "--extra-index-url", "-f", "--find-links", "-c", "--constraint",
    "-t", "--target", "--prefix", "--root", "--cache-dir", "--index-strategy", "--python-version",
)  # fmt: skip
VENV_TOOLS = ("python", "python3", "pip", "pip3", "aiperf", "hf", "huggingface-cli")
RESULTS_PYTHON = "runs on the benchmark's result files, which a recorded launch does not produce"


def checkout_path(path: str) -> str | None:
    """A path as the repository holds it (the container's /workspace is a link to the scratch copy)."""
    resolved = os.path.realpath(path)
    checkout = os.path.realpath(ROOT / "checkout")
    return os.path.relpath(resolved, checkout) if resolved.startswith(checkout + os.sep) else None


def project(folder: str) -> dict[str, object]:
    """An editable install's source: its name and version from pyproject.toml when the checkout holds it
    (a git submodule the reference copy left out is named so, the submodule's commit being its pin)."""
    found: dict[str, object] = {"editable": folder, "present": os.path.isdir(folder)}
    relative = checkout_path(folder)
    if relative:
        found["checkout_path"] = relative
    pyproject = Path(folder) / "pyproject.toml"
    if pyproject.is_file():
        import tomllib

        meta = tomllib.loads(pyproject.read_text()).get("project", {})
        found |= {"name": meta.get("name"), "version": meta.get("version")}
    modules = ROOT / "checkout" / ".gitmodules"
    if relative and modules.is_file():
        text = modules.read_text()
        match = re.search(rf"path\s*=\s*{re.escape(relative)}\s*\n\s*url\s*=\s*(\S+)", text)
        if match:
            found["submodule_url"] = match.group(1)
    return found


def requirements(path: str) -> dict[str, object]:
    found: dict[str, object] = {"requirements": path, "present": os.path.isfile(path)}
    if os.path.isfile(path):
        lines = [line.split("#", 1)[0].strip() for line in Path(path).read_text().splitlines()]
        found["specs"] = [line for line in lines if line]
    return found


def packages(words: list[str]) -> list[dict[str, object]]:
    """What an install command names: requirement specifiers, requirement files (read when the checkout
    holds them) and editable folders."""
    found: list[dict[str, object]] = []
    index = 0
    while index < len(words):
        word = words[index]
        name, eq, value = word.partition("=")
        if name in ("-r", "--requirement", "-e", "--editable"):
            if not eq:
                index += 1
                value = words[index] if index < len(words) else ""
            target = os.path.join(os.getcwd(), value)
            found.append(requirements(target) if name in ("-r", "--requirement") else project(target))
        elif name in INSTALL_VALUED and not eq:
            index += 1
        elif not word.startswith("-"):
            found.append({"spec": word})
        index += 1
    return found


def install(tool: str, argv: list[str], words: list[str], venv: str | None = None) -> int:
    """An install is recorded, never run: what it names is the build of whatever runs from it."""
    target = argv[argv.index("--python") + 1] if "--python" in argv[:-1] else None
    into = venv or (str(Path(target).parent.parent) if target else None)
    record(tool, argv, network=True, install={"into": into, "packages": packages(words)}, venv=venv)
    return 0


def make_venv(argv: list[str]) -> int:
    """`uv venv [options] PATH`: a virtualenv whose bin/ holds recorders, so what the chain runs from it
    (the benchmark client, `hf download`, its pip) is recorded like any other command."""
    words: list[str] = []
    index = argv.index("venv") + 1
    while index < len(argv):
        if argv[index] in (*INSTALL_VALUED, "--prompt"):
            index += 1
        elif not argv[index].startswith("-"):
            words.append(argv[index])
        index += 1
    path = os.path.join(os.getcwd(), words[-1] if words else ".venv")
    if not inside_scratch(path):
        return fail("uv", argv, f"would write outside the scratch folder: {path}")
    record("uv", argv, network=True, venv=path)
    folder = Path(path) / "bin"
    folder.mkdir(parents=True, exist_ok=True)
    for name in VENV_TOOLS:
        launcher = folder / name
        launcher.write_text(f'#!/bin/sh\nexec "{sys.executable}" -E -S "{SHIM}" "{name}@{path}" "$@"\n')
        launcher.chmod(0o755)
    return 0


def uv(argv: list[str]) -> int:
    words = [a for a in argv if not a.startswith("-")]
    if words[:1] == ["venv"]:
        return make_venv(argv)
    if words[:2] == ["pip", "install"]:
        start = argv.index("install") + 1
        return install("uv", argv, argv[start:])
    record("uv", argv, network=True)
    return 0


def pip(tool: str, argv: list[str], venv: str | None = None) -> int:
    if "install" in argv and "--help" not in argv:
        return install(tool, argv, argv[argv.index("install") + 1 :], venv)
    record(tool, argv, network=True, venv=venv)
    return 0


def venv_python(tool: str, argv: list[str], venv: str) -> int:
    """The client's virtualenv Python: its pip installs; anything else (the scripts aggregate, plot and
    validate the client's results with it) is recorded, not run."""
    if argv[:2] in (["-m", "pip"], ["-m", "pip3"]):
        return pip(tool, argv, venv)
    record(tool, argv, skipped=RESULTS_PYTHON, venv=venv)
    return 0


PYTHON_MODULES = {
    "sglang.launch_server": "engine",
    "sglang_router.launch_router": "router",
    "atom.entrypoints.openai_server": "engine",
    "vllm.entrypoints.openai.api_server": "engine",
    "lmcache.v1.api_server": "lmcache",
}
PYTHON_SCRIPTS = {"sync.py": "wait", "benchmark_serving.py": "client", "mooncake_lmcache_proxy.py": "router"}


def python(tool: str, argv: list[str]) -> int:
    """Engines, routers, clients and network waits are recorded; everything else (the chain's own inline
    YAML readers, its helper scripts) runs on the recorder's Python, which has PyYAML like the images."""
    real = [os.environ["RECORDER_PYTHON"], *argv]
    options = [a for a in argv if a.startswith("-")]
    if "-m" in argv:
        module = argv[argv.index("-m") + 1]
        if module in PYTHON_MODULES:
            return service(tool, argv, PYTHON_MODULES[module])
        if module.split(".")[0] in ("pip", "uv"):
            return pip(tool, argv) if module == "pip" else uv(argv[argv.index("-m") + 2 :])
        return fail(tool, argv, f"unknown module `python -m {module}`", 127)
    script = next((a for a in argv if not a.startswith("-")), None)
    if "-c" in options or script is None:
        return subprocess.run(real, timeout=remaining()).returncode
    kind = PYTHON_SCRIPTS.get(Path(script).name)
    if kind == "wait":
        record(tool, argv, answered="ready")
        return 0
    if kind:
        return service(tool, argv, kind)
    if not inside_scratch(script):
        return fail(tool, argv, f"script outside the checkout: {script}", 127)
    record(tool, argv)
    return subprocess.run(real, timeout=remaining()).returncode


def sudo(argv: list[str]) -> int:
    while argv and argv[0].startswith("-"):
        argv = argv[2:] if argv[0] in ("-u", "-g") else argv[1:]
    record("sudo", argv)
    if not argv:
        return 0
    launcher = Path(os.environ["RECORDER_BIN"]) / argv[0]
    if not launcher.exists():
        return fail("sudo", argv, f"`{argv[0]}` is neither shimmed nor whitelisted", 127)
    return subprocess.run([str(launcher), *argv[1:]], timeout=remaining()).returncode


def ours(pid: int) -> bool:
    """Whether PID (or, negative, the process group it leads) belongs to this chain: its environment names
    this chain's scratch folder. Chains run side by side on one host and pids wrap, so a pid the scripts
    kept may be another chain's process by the time they signal it."""
    try:
        environ = Path(f"/proc/{abs(pid)}/environ").read_bytes().split(b"\0")
    except OSError:
        return False
    return f"RECORDER_ROOT={ROOT}".encode() in environ


def kill(argv: list[str]) -> int:
    """bash's `kill` (the BASH_ENV function routes it here, job specs aside): signals only this chain's
    processes; any other pid is answered as gone, as it would be on a node of its own."""
    if any(a in ("-l", "-L") for a in argv):
        os.execv("/bin/kill", ["kill", *argv])
    sig, targets = int(signal.SIGTERM), list(argv)  # bash: kill [-s SIG | -n NUM | -SIG] [--] pid...
    if targets[:1] in (["-s"], ["-n"]) and len(targets) > 2:
        sig, targets = _signal(targets[1]), targets[2:]
    elif targets and targets[0].startswith("-") and targets[0] != "--" and len(targets) > 1:
        sig, targets = _signal(targets[0][1:]), targets[1:]
    if targets[:1] == ["--"]:
        targets = targets[1:]
    rc = 0
    step = ROOT / "run" / "step.pgid"
    for target in targets:
        pid = int(target)
        if pid <= 0 and step.is_file() and str(-pid) in (step.read_text(), "0"):
            # the whole recorded chain is the harness's group, not a node's: a script ending its own group
            # (`kill 0`, or a group read before its setsid took effect) ends only what it started on a node
            return fail("kill", argv, "would signal the recorder's whole chain (its process group)")
        if not ours(pid):
            print(f"kill: ({target}) - No such process", file=sys.stderr)
            rc = 1
            continue
        try:
            (os.killpg(-pid, sig) if pid < 0 else os.kill(pid, sig))
        except ProcessLookupError:
            print(f"kill: ({target}) - No such process", file=sys.stderr)
            rc = 1
    return rc


def tail(argv: list[str]) -> int:
    """`tail -F ... --pid=P` follows a log until P ends, checking every `-s` seconds (InferenceX's runner
    script polls its job that way, 2 s); here it prints the file once P has ended. Any other tail is real."""
    pid = next((int(a.split("=", 1)[1]) for a in argv if a.startswith("--pid=")), None)
    if pid is None:
        os.execv("/usr/bin/tail", ["tail", *argv])
    deadline = time.monotonic() + remaining()
    while time.monotonic() < deadline and started_at(pid) is not None:
        time.sleep(0.02)  # the followed process's exit, bounded by the harness's deadline
    keep, skip = [], {"-s", "--sleep-interval"}
    i = 0
    while i < len(argv):
        word = argv[i]
        if word in skip:
            i += 2
            continue
        if word not in ("-F", "-f", "--follow") and not word.startswith(("--pid=", "--sleep-interval=")):
            keep.append(word)
        i += 1
    os.execv("/usr/bin/tail", ["tail", *keep])
    return 0  # not reached


def ps(argv: list[str]) -> int:
    """The real ps; but `ps -o pgid= -p PID` right after `setsid cmd &` (InferenceX's scripts read the
    group they will kill at teardown that way) first waits, up to 2 s, for PID to have left the caller's
    group: under a loaded recorder the child may not have run setsid yet, and the caller's group is the
    whole recorded chain."""
    if "-p" in argv and any(a.startswith("pgid") for a in argv):
        pid = argv[argv.index("-p") + 1] if argv.index("-p") + 1 < len(argv) else ""
        deadline = time.monotonic() + 2.0
        while pid.isdigit() and time.monotonic() < deadline and pgid(int(pid)) == os.getpgid(0):
            time.sleep(0.01)  # bounded: the child's setsid, or 2 s
    os.execv("/usr/bin/ps", ["ps", *argv])
    return 0  # not reached


def _signal(name: str) -> int:
    if name.isdigit():
        return int(name)
    name = name.upper()
    return int(getattr(signal, name if name.startswith("SIG") else f"SIG{name}"))


def recorded(answer: int = 0) -> Callable[[str, list[str]], int]:
    def run(tool: str, argv: list[str]) -> int:
        record(tool, argv)
        return answer

    return run


def main() -> int:
    tool, _, venv = sys.argv[1].partition("@")  # `aiperf@<venv>`: a launcher in a recorded virtualenv
    argv = sys.argv[2:]
    if venv:
        if tool in ("python", "python3"):
            return venv_python(tool, argv, venv)
        if tool in ("pip", "pip3"):
            return pip(tool, argv, venv)
        if tool == "aiperf":
            return service(tool, argv, "client", venv)
        record(tool, argv, network=True, venv=venv)  # hf / huggingface-cli: downloads, never run
        return 0
    if tool in ("sbatch", "srun", "scontrol", "squeue", "docker"):
        from hops import HOPS  # type: ignore[import-not-found]  # a sibling file, as the shim runs

        return HOPS[tool](argv)
    answers: dict[str, Callable[[list[str]], int]] = {
        "hostname": answer_hostname,
        "ip": answer_ip,
        "nicctl": answer_nicctl,
        "rocm-smi": answer_rocm_smi,
        "ibv_devinfo": answer_ibv_devinfo,
        "whoami": answer_whoami,
    }
    if tool in answers:
        record(tool, argv)
        return answers[tool](argv)
    if tool == "sudo":
        return sudo(argv)
    if tool == "kill":
        return kill(argv)
    if tool == "tail":
        return tail(argv)
    if tool == "ps":
        return ps(argv)
    if tool in WRITE_TOOLS:
        return guarded(tool, argv)
    if tool in ("curl", "wget"):
        return answer_curl(tool, argv)
    if tool in ("python", "python3"):
        return python(tool, argv)
    if tool == "vllm" and argv[:1] == ["serve"] or tool == "atom":
        return service(tool, argv, "engine")
    services = {
        "vllm-router": "router",
        "atomesh": "router",
        "lmcache": "lmcache",
        "mooncake_master": "kv-store",
        "aiperf": "client",
    }
    if tool in services:
        return service(tool, argv, services[tool])
    if tool == "uv":
        return uv(argv)
    if tool in ("pip", "pip3"):
        return pip(tool, argv)
    if tool in NETWORK_TOOLS:
        record(tool, argv, network=True)
        return 0
    if tool == ".unknown":
        record(argv[0] if argv else "", argv[1:], unknown=True)
        print(f"[recorder] {shlex.join(argv)}: not shimmed and not whitelisted", file=sys.stderr)
        return 127
    handlers = {"sleep": recorded(), "scancel": recorded(), "salloc": recorded(), "amd-smi": recorded()}
    handlers |= {"pkill": recorded(), "killall": recorded()}  # never run: they match by name, host-wide
    return handlers[tool](tool, argv)


if __name__ == "__main__":
    sys.exit(main())
