"""The faults of `make bench-failfast`: how each failure class of scripts/failures.py (the one catalog of
what the job prints) is injected into the demo job, and where its fault instant is read from.

Injection uses only knobs the job already has -- its environment (the simulator's SIM_FAULT*, passed
through `sbatch --export=ALL`), its PATH (a per-fault folder of wrappers put first), a port taken on a
node's address before submission, and signals to PIDs the run's state folder records -- never an edit
of the rendered recipe or of shared files.

Fault instant, per kind of injection:
  sim-line   the simulator's `SIM FAULT <kind> at <epoch>` line in the service's log (sim/engine.py)
  wrapper    the wrapper's `SIM FAULT <kind> at <epoch>` line in this fault's events file
  action     the bench's own clock just before it sends the signal
  step       the node's step starts (its `[HH:MM:SS] <node> step: <step>` line in job.out, 1 s resolution):
             a port taken before submission is found by the step that checks it (`ports free`)
A fault that only a timeout can reveal (a hang) also has a deadline: the instant the configured
timeout expires, from which its detection is measured (the bound itself is reported beside it).
"""

from __future__ import annotations

import re
import stat
from dataclasses import dataclass, field
from pathlib import Path

from scripts.failures import BY_NAME as CLASSES
from scripts.failures import FailureClass
from scripts.failures import fill as text

# The demo job most faults run on (vLLM) and the SGLang + MoRI job MoRI's faults run on: both 2P1D, the
# whole local cluster.
CONFIG, VARIANT = "local-sim-vllm-disagg-agentic", "agentic_p2x8_d1x8_conc4"
MORI_CONFIG, MORI_VARIANT = "local-sim-sglang-mori-disagg", "fsl1k64_p2x8_d1x8"
LEADER, PREFILL2, DECODE = "sim1", "sim2", "sim3"  # ranks 0 (prefill + router + benchmark), 1, 2
ADDR = {"sim1": "127.0.0.11", "sim2": "127.0.0.12", "sim3": "127.0.0.13"}
CONC4 = "benchmark conc4"
_SIM2 = r"(?:\bsim2\b|127\.0\.0\.12\b)"  # sim2 by name or address: where prefill-errors' 500s come from


@dataclass(frozen=True)
class Trigger:
    """When the bench acts: once NODE's step file reads STEP (or, with PID_OF, once that service's pid
    file exists), DELAY seconds later."""

    node: str
    step: str | None = None
    pid_of: str | None = None
    delay: float = 0.0


@dataclass(frozen=True)
class Action:
    """A signal from the bench: to a service's process (kill-service), its whole process group
    (stop-group), or the running benchmark client (kill-aiperf)."""

    kind: str  # kill-service | stop-group | kill-aiperf
    trigger: Trigger
    signal: str = "KILL"
    node: str = ""
    service: str = ""


@dataclass(frozen=True)
class Expect:
    """What the job's main output must show: the verdict naming NODE (and STEP, if given), a FAILED line
    of NODE matching WHAT, with SERVICE the tail of NODE's SERVICE log, with ROOT a line after the first
    FAILED one naming the root cause (another node's engine, say)."""

    node: str | None  # None: any node
    what: str  # regex within the FAILED line
    step: str | None = None
    service: str | None = None  # its log tail must be shown (None: a foreground command, output inline)
    root: str | None = None  # where the failing node is not the root cause: the root cause, named after it


@dataclass(frozen=True)
class Fault:
    """A failure class of scripts/failures.py (what the job prints) made to happen on the demo job."""

    failure: FailureClass
    how: str  # one line: the knob that injects it
    instant: str  # sim-line:<node>/<service> | wrapper | action | step:<node>/<step>
    node: str | None  # the node whose FAILED line names it (None: any node may)
    values: dict[str, str] = field(default_factory=dict)  # the class's placeholders, on this cluster
    env: dict[str, str] = field(default_factory=dict)
    wrappers: tuple[str, ...] = ()  # names in WRAPPERS
    hog: tuple[str, int] | None = None  # (address, port) taken before submission
    action: Action | None = None
    bound: tuple[str, float, str] | None = (
        None  # (what, seconds, start: start:<node>/<service> | step:<node>)
    )
    after_first_result: bool = False  # hits the second concurrency: the first one's result must survive
    quick: bool = False
    timeout: float = 240.0  # the job is cancelled (and the fault counted undetected) after this
    config: str = CONFIG  # the job it is injected into, and that job's engine service
    variant: str = VARIANT
    engine: str = "vllm"

    @property
    def name(self) -> str:
        return self.failure.name

    @property
    def title(self) -> str:
        return text(self.failure.title, **self._values)

    @property
    def expect(self) -> Expect:
        f, values = self.failure, self._values
        service = text(f.service, **values) if f.service else None
        return Expect(
            self.node,
            f.prints_pattern(**values),
            text(f.step, **values) if f.step else None,
            service,
            f.root_regex.format(node=_SIM2) if f.root_regex else None,
        )

    @property
    def _values(self) -> dict[str, str]:
        return {"engine": self.engine, **self.values}


def _fault(name: str, how: str, instant: str, node: str | None, **kw) -> Fault:
    return Fault(CLASSES[name], how, instant, node, **kw)


FAULTS: tuple[Fault, ...] = (
    _fault(
        "lmcache-exit-at-start",
        "PATH wrapper: `lmcache server` on sim2 exits 1 at once",
        "wrapper",
        PREFILL2,
        values={"code": "1"},
        wrappers=("lmcache-exit",),
        quick=True,
    ),
    _fault(
        "service-stopped",
        "SIGSTOP to sim2's LMCache process group 3 s after it starts (a hung server)",
        "action",
        PREFILL2,
        # the watchdog's grace (timeouts.stopped): found stopped at the next poll, failed this long after
        values={"service": "lmcache", "seconds": "10"},
        action=Action(
            "stop-group", Trigger(PREFILL2, pid_of="lmcache", delay=3.0), "STOP", PREFILL2, "lmcache"
        ),
        bound=("stopped grace", 10.0, "fault"),
        timeout=300.0,
    ),
    _fault(
        "lmcache-dies-mid-benchmark",
        "SIGKILL to sim2's LMCache server 3 s into conc4",
        "action",
        PREFILL2,
        values={"code": "137"},
        action=Action("kill-service", Trigger(LEADER, CONC4, delay=3.0), "KILL", PREFILL2, "lmcache"),
        after_first_result=True,
    ),
    _fault(
        "prefill-crash-during-load",
        "SIM_FAULT=crash-at-start on sim2's prefill",
        "sim-line:sim2/vllm",
        PREFILL2,
        values={"role": "prefill", "code": "1"},
        env={"SIM_FAULT": "crash-at-start", "SIM_FAULT_ROLE": "prefill", "SIM_FAULT_HOST": ADDR[PREFILL2]},
        quick=True,
    ),
    _fault(
        "start-stalled",
        "SIM_FAULT=hang-at-start on sim2's prefill (blocks before serving: silent, idle)",
        "sim-line:sim2/vllm",
        PREFILL2,
        # the watchdog's grace (the local runner's timeouts.stall): counted from the last log line
        values={"service": "vllm", "seconds": "15"},
        env={"SIM_FAULT": "hang-at-start", "SIM_FAULT_ROLE": "prefill", "SIM_FAULT_HOST": ADDR[PREFILL2]},
        bound=("stall grace", 15.0, "fault"),
    ),
    _fault(
        "serving-stalled",
        "SIM_FAULT=hang-after:12 on the decode: every request after its 12th hangs (/health 200)",
        "sim-line:sim3/vllm",
        LEADER,
        # the token watchdog's grace (the local runner's timeouts.serving-stall), from the first hung request
        values={"C": "2"},
        env={"SIM_FAULT": "hang-after:12", "SIM_FAULT_ROLE": "decode"},
        bound=("serving-stall grace", 15.0, "fault"),
    ),
    _fault(
        "decode-crash-mid-stream",
        "SIM_FAULT=crash-after:20 on the decode (streams in flight, conc2)",
        "sim-line:sim3/vllm",
        DECODE,
        values={"code": "1"},
        env={"SIM_FAULT": "crash-after:20", "SIM_FAULT_ROLE": "decode"},
        quick=True,
    ),
    _fault(
        "service-exit0-mid-run",
        "SIM_FAULT=exit0-after:10 on sim2's prefill (conc2)",
        "sim-line:sim2/vllm",
        PREFILL2,
        env={"SIM_FAULT": "exit0-after:10", "SIM_FAULT_ROLE": "prefill", "SIM_FAULT_HOST": ADDR[PREFILL2]},
    ),
    _fault(
        "router-bind-fails",
        "127.0.0.11:30000 taken by the bench before submission",
        "step:sim1/ports free",
        LEADER,
        hog=(ADDR[LEADER], 30000),
        quick=True,
    ),
    _fault(
        "nic-not-ready",
        "PATH wrapper: sim2's (simulated) nicctl shows DCQCN disabled on one RoCE device",
        "wrapper",
        PREFILL2,
        wrappers=("nicctl-dcqcn-off",),
        quick=True,
    ),
    _fault(
        "barrier-peer-missing",
        "PATH wrapper: sim2's preflight (`sync.py dist-version`) hangs",
        "wrapper",
        None,  # any waiting node may tell
        values={"ranks": "1", "nodes": PREFILL2},
        wrappers=("python3-hang",),
        bound=("start barrier timeout", 60.0, "step:sim1"),
        timeout=240.0,
    ),
    _fault(
        "port-in-use",
        "127.0.0.13:8000 (decode vLLM) taken by the bench before submission",
        "step:sim3/ports free",
        DECODE,
        values={"addr": ADDR[DECODE], "port": "8000"},
        hog=(ADDR[DECODE], 8000),
        quick=True,
    ),
    _fault(
        "kv-transfer-stalled",
        "SIM_FAULT=kv-stall-after:12 on the decode: its 13th KV transfer stalls, logging Mooncake's own line",
        "sim-line:sim3/vllm",
        DECODE,
        env={"SIM_FAULT": "kv-stall-after:12", "SIM_FAULT_ROLE": "decode"},
    ),
    _fault(
        "benchmark-client-fails",
        "SIGKILL to the aiperf process 3 s into conc4",
        "action",
        LEADER,
        values={"C": "4", "code": "137"},
        action=Action("kill-aiperf", Trigger(LEADER, CONC4, delay=3.0), "KILL", LEADER, "aiperf"),
        after_first_result=True,
    ),
    _fault(
        "prefill-errors",
        "SIM_FAULT=error-after:8 on sim2's prefill: after the smoke request and the same-answers check (at "
        "most 7 reach it), every request answers 500",
        "sim-line:sim2/vllm",
        LEADER,
        values={"C": "2"},
        env={"SIM_FAULT": "error-after:8", "SIM_FAULT_ROLE": "prefill", "SIM_FAULT_HOST": ADDR[PREFILL2]},
    ),
    _fault(
        "answers-differ",
        "SIM_FAULT=corrupt-kv on the decode: the KV it loads answers as another prompt's would",
        "sim-line:sim3/vllm",
        LEADER,
        values={"code": "17"},  # the proof's own exit code for a quality failure (scripts/failures.py)
        env={"SIM_FAULT": "corrupt-kv", "SIM_FAULT_ROLE": "decode"},
        quick=True,
    ),
    _fault(
        "accuracy-below-threshold",
        "SIM_FAULT=wrong-answers on every engine: each sum of the graded eval answered one too high, the "
        "same way through the router and served whole (a broken model path the KV path carries faithfully)",
        "sim-line:sim1/vllm",
        LEADER,
        values={"code": "18"},  # the eval's own exit code for a quality failure (scripts/failures.py)
        env={"SIM_FAULT": "wrong-answers"},
    ),
)

# SGLang + MoRI: the failures MoRI launches report upstream that leave the engine up, each logged as it is
# reported (sim/mori.py), on the 2P1D MoRI job.
MORI = {"config": MORI_CONFIG, "variant": MORI_VARIANT, "engine": "sglang"}
FAULTS += (
    _fault(
        "rdma-retry-exceeded",
        "SIM_FAULT=kv-stall-after:12 on sim1's prefill over MoRI: its 13th transfer's NIC runs out of "
        "retries, logging the ionic provider's `cqe with error 12`",
        "sim-line:sim1/sglang",
        LEADER,
        # one prefill only: with both, either may reach its 13th transfer first (the router's choice)
        env={"SIM_FAULT": "kv-stall-after:12", "SIM_FAULT_ROLE": "prefill", "SIM_FAULT_HOST": ADDR[LEADER]},
        **MORI,
    ),
    _fault(
        "rdma-register-failed",
        "SIM_FAULT=rdma-register-fails on the decode over MoRI: RegisterRdmaMemoryRegion fails (errno 22), "
        "the engine hangs there",
        "sim-line:sim3/sglang",
        DECODE,
        env={"SIM_FAULT": "rdma-register-fails", "SIM_FAULT_ROLE": "decode"},
        quick=True,
        **MORI,
    ),
)

BY_NAME = {f.name: f for f in FAULTS}
SIM_FAULT_LINE = re.compile(r"SIM FAULT (\S+) at ([0-9]+(?:\.[0-9]+)?)")


# ---------------------------------------------------------------- PATH wrappers


def _lmcache_exit(root: Path, events: Path) -> tuple[str, str]:
    """`lmcache server` on sim2 fails at start; anything else (the preflight's version probe reads this
    file's #! line, so it names LMCache's own interpreter) runs the real LMCache."""
    real = root / ".venv-lmcache" / "bin" / "lmcache"
    text = f"""#!{root / ".venv-lmcache" / "bin" / "python"}
import os, sys, time
if os.environ.get("SLURMD_NODENAME") == {PREFILL2!r} and sys.argv[1:2] == ["server"]:
    line = f"SIM FAULT lmcache-exit-at-start at {{time.time():.6f}}"
    with open({str(events)!r}, "a") as out:
        out.write(line + "\\n")
    print("RuntimeError: LMCache MP server failed to start (injected)", file=sys.stderr)
    print(line, file=sys.stderr)
    sys.exit(1)
os.execv({str(real)!r}, [{str(real)!r}, *sys.argv[1:]])
"""
    return "lmcache", text


def _python3_hang(root: Path, events: Path) -> tuple[str, str]:
    """sim2's preflight version check never returns (a cold shared filesystem, a stuck import):
    the node never reaches the start barrier. Everything else is the core virtualenv's python."""
    text = f"""#!/bin/sh
case "${{SLURMD_NODENAME:-}} $*" in
  "{PREFILL2} "*sync.py\\ dist-version*)
    echo "SIM FAULT preflight-hang at $(date +%s.%N)" >> '{events}'
    exec sleep 100000
    ;;
esac
exec '{root / ".venv" / "bin" / "python"}' "$@"
"""
    return "python3", text


def _nicctl_dcqcn_off(root: Path, events: Path) -> tuple[str, str]:
    """sim2's host shows a RoCE device with DCQCN disabled (the simulator's own fault); every other host and
    command is the simulated nicctl as the local runner has it."""
    nicctl = f"'{root / '.venv' / 'bin' / 'python'}' '{root / 'sim' / 'bin' / 'nicctl'}'"
    text = f"""#!/bin/sh
if [ "${{SLURMD_NODENAME:-}}" = {PREFILL2} ] && [ "$*" = "show dcqcn" ]; then
  echo "SIM FAULT nic-dcqcn-off at $(date +%s.%N)" >> '{events}'
  SIM_NIC_FAULT=dcqcn-off SIM_FAULT_HOST= exec {nicctl} "$@"
fi
exec {nicctl} "$@"
"""
    return "nicctl", text


WRAPPERS = {
    "lmcache-exit": _lmcache_exit,
    "python3-hang": _python3_hang,
    "nicctl-dcqcn-off": _nicctl_dcqcn_off,
}


def write_wrappers(fault: Fault, root: Path, folder: Path) -> Path:
    """The fault's wrappers in FOLDER/bin (put first on the job's PATH); their events go to
    FOLDER/events.log. Returns the bin folder."""
    bin_dir = folder / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    events = folder / "events.log"
    events.unlink(missing_ok=True)
    for name in fault.wrappers:
        command, text = WRAPPERS[name](root, events)
        path = bin_dir / command
        path.write_text(text)
        path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return bin_dir


def sim_fault_instant(text: str) -> float | None:
    """The first `SIM FAULT <kind> at <epoch>` instant in TEXT."""
    match = SIM_FAULT_LINE.search(text)
    return float(match[2]) if match else None
