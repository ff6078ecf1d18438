#!/usr/bin/env python3
"""The failure vocabulary of a job, defined once; stdlib only.

What every node tool and node script prints when something fails (WORDS), the exit codes of the node
tools (EXIT_*), the cause classifier for a service's log (cause()), and the catalog of failure classes
(CLASSES) that recipe pages document and `make bench-failfast` injects. Bash gets its words from here,
as printf formats in scripts/lib/names.sh (written by recipes/pages/bashnames.py); outcome.py, the other node
tools, the renderer's docs and the bench import it.

Templates: `<name>` stands for a value known only at run time (a node, an exit code, a URL); `<...>` for
any text. fill() puts values in, pattern() turns a template into a regex for the job's output.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from typing import TYPE_CHECKING, NamedTuple, NoReturn

if TYPE_CHECKING:  # mypy reads the node tools as nodes run them (make check): files, siblings by name
    import causes
    import statefiles
else:
    try:
        from . import causes, statefiles  # host side: scripts.failures
    except ImportError:  # a node tool, run as a file: its siblings are plain modules
        import causes
        import statefiles

one_line = causes.one_line  # node tools and the proxy import it from here

# Exit codes of the node tools (argparse's own is 2); docs/reference/exit-codes.md lists them (make docs).
EXIT_USAGE = 2
EXIT_PROCESS_GONE = 3
EXIT_NOT_READY = 4
EXIT_BARRIER = 5
EXIT_BIND = 6
EXIT_ADDR = 7
EXIT_PEERS = 8
EXIT_VERSION = 9
EXIT_INVALID_RESULT = 10
EXIT_PROOF = 11
EXIT_KNOWN_ISSUE = 12
EXIT_SECRET = 13  # the barrier's --secret-file is missing, unreadable, too short or open to others
EXIT_STALLED = 14  # wait-http: the starting service made no progress (the node exits 4, not ready)
EXIT_NO_TOKENS = 15  # tokenwatch: requests in flight, no token for timeouts.serving-stall seconds
EXIT_NOT_FLUSHED = 16  # flush-caches: an engine did not empty its caches before the next concurrency
EXIT_ANSWERS_DIFFER = 17  # same-answers: through the router the answers differ from those served whole
EXIT_BELOW_THRESHOLD = 18  # accuracy: the graded eval scored below the model's threshold

WORDS = {
    # every failing node's line, and the job's last line (outcome.py)
    "headline": "FAILED <step> on <node>: <message>",
    "verdict": "job failed: first failure on <node> in step '<step>' (exit code <code>)",
    "verdict-router": "job failed: first failure on <node>: the router found its <role> engine (<url>) "
    "unhealthy <seconds> s before <symptom> failed",
    "verdict-missing": "job failed: no outcome from <nodes> (killed before it could report?)",
    "verdict-srun": "job failed: srun exited <code> although every node ended cleanly",
    "verdict-ok": "job succeeded: every node ended cleanly",
    # node scripts (scripts/lib/*.sh)
    "service-exit": "<service> exited (code <code>)",
    "service-stopped": "<service> stopped (process state T, pid <pid>) for <seconds> s: it cannot answer",
    "command-exit": "command '<command>' exited (code <code>) at line <line>",
    "signal": "received SIG<signal>",
    "not-on-path": "not on PATH: <commands> (PATH=<path>)",
    "watcher-stopped": "the service watcher stopped with code <code>",
    "result-missing": "result <file> is missing or empty (the benchmark exited 0 without writing it)",
    "cause": "cause: <cause>",
    # node tools
    "not-ready": "<service> not ready at <url> after <timeout> s (last: <last>)",
    "no-progress": "<service> made no progress for <seconds> s while starting: nothing answered, "
    "its log did not grow and it used no CPU time",
    "no-tokens": "no token generated for <seconds> s in step '<step>' while <count> request(s) were in "
    "flight (<engines>): serving has stalled",
    "barrier-timeout": "timed out after <timeout> s; missing rank(s) <missing>",
    "barrier-claimed-twice": "rank <rank> claimed twice: by <first> and <second>",
    "barrier-not-sealed": "the answer of <leader> is not sealed with this job's secret "
    "(is --secret-file this job's, and <leader> this job's leader?)",
    "secret-file": "secret file <path>: <problem>",
    "port-taken": "<addr>:<port>, where <service> will listen, is taken: <error>",
    "version-mismatch": "dist-version <command>: <dist> <found> is installed (<python>), "
    "the recipe pins <version>",
    "setup-failed": "node setup <set>: <problem>",
    "gpu-not-drained": "GPUs not drained: <problems>",
    "nic-not-ready": "NICs not ready: <problems>",
    "image-not-ready": "image not ready: <problems>",
    "leftover-processes": "processes of earlier jobs still run here: <problems>",
    "result-invalid": "result <file> is not valid: <problems>",
    "proof-failed": "proof failed: <reason>",
    "no-kv-moved": "the answer came back but no KV moved prefill -> decode (decode external_kv_transfer "
    "tokens did not rise): decode recomputed the prompt; is the router speaking the vLLM >= 0.16 contract?",
    "no-l2-hits": "LMCache served no prefix hit on any prefill node (<metric> = 0): is its server alive?",
    "not-cold": "the point would not start cold: <served> before its first request (an agentic point is "
    "measured on empty caches)",
    "answers-differ": "answers differ: prompt <prompt> through the router gave token <token> <routed> where "
    "the prefill serving it whole gave <whole> (the engine repeats its own answer through token <own>): the "
    "KV that moved prefill -> decode is not the KV the prompt makes",
    "accuracy-scored": "<eval> scored <score> on <samples> questions through the router "
    "(threshold <threshold>)",
    "accuracy-below": "accuracy below the model's threshold: <scored>: the answers are wrong",
    "accuracy-unscored": "accuracy not scored: <reason>",
    "answers-alike": "every one of <prompts> prompts got the same answer: equal answers would prove nothing",
    "answers-unrepeatable": "the engine does not repeat its own greedy answer (<differ> of <prompts> prompts "
    "differ from the first token): nothing to compare the router's answers against",
    "not-served-whole": "the prefill engine answered <got> of <tokens> tokens (<url>): it does not serve a "
    "request whole, so there is nothing to compare against",
    "known-issue": "KNOWN ISSUE <issue>: its log signature appeared in <log> line <line>",
    "not-flushed": "<url> did not empty its caches within <timeout> s (last: <last>): the next concurrency "
    "would not start cold",
}

_PLACEHOLDER = re.compile(r"<(\w+|\.\.\.)>")
# How a value nobody filled in is matched; anything else is matched by ".*?".
_LOOSE = {"code": "[1-9][0-9]*", "line": "[0-9]+", "timeout": "[0-9]+", "C": "[0-9]+"}


def fill(template: str, **values) -> str:
    """TEMPLATE with the VALUES given filled in; other placeholders stay."""
    return _PLACEHOLDER.sub(lambda m: str(values.get(m[1], m[0])), template)


def line(name: str, **values) -> str:
    """WORDS[name] with every value given."""
    return fill(WORDS[name], **values)


def pattern(template: str, **values) -> str:
    """A regex matching what TEMPLATE describes: VALUES literally, other placeholders loosely."""
    out, at = [], 0
    for m in _PLACEHOLDER.finditer(template):
        out.append(re.escape(template[at : m.start()]))
        given = values.get(m[1])
        out.append(re.escape(str(given)) if given is not None else _LOOSE.get(m[1], ".*?"))
        at = m.end()
    out.append(re.escape(template[at:]))
    return "".join(out)


def printf_format(template: str) -> str:
    """The template as a printf format for bash: each placeholder a %s, in order; a literal % doubled."""
    return _PLACEHOLDER.sub("%s", template.replace("%", "%%"))


def die(message: str, code: int) -> NoReturn:
    """How a node tool fails: one line on stderr, its documented exit code."""
    print(message, file=sys.stderr, flush=True)
    sys.exit(code)


# ---------------------------------------------------------------- causes

CAUSE_LINES = 200  # wider than the tail shown: the root cause is often further up


def cause(*, text: str, code: str | None, step: str = "", service: str = "") -> causes.Classified:
    """The cause class of a failure (scripts/causes.json): CODE None while the service still runs."""
    return causes.classify(causes.load(), text=text, code=code or "", step=step, service=service)


def record_cause(path: str, found: causes.Classified) -> None:
    """The node's first classified failure, kept for its outcome file: a later one does not replace it."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return
    with os.fdopen(fd, "w") as out:
        out.write(f"{found.id}\t{found.blame}\t{found.detail}\n")


def tail(path: str, lines: int) -> str:
    text = causes.read_tail(path)
    if text is None:
        return "(no log file)"
    kept = text.splitlines()[-lines:]
    return "\n".join(kept) if kept else "(empty log)"


def service_report(
    *,
    step: str,
    node: str,
    service: str,
    headline: str,
    log: str,
    code: str | None,
    lines: int,
    cause_file: str | None = None,
):
    """What a node prints when a service fails: the headline, its log tail and the classified cause (kept
    in CAUSE_FILE, unless the node has classified a failure already)."""
    found = cause(text=f"{headline}\n{tail(log, CAUSE_LINES)}", code=code, step=step, service=service)
    if cause_file:
        record_cause(cause_file, found)
    return "\n".join(
        (
            line("headline", step=step, node=node, message=headline),
            f"--- last {lines} lines of {log} ---",
            tail(log, lines),
            f"--- end of {service} log ---",
            line("cause", cause=found.line()),
        )
    )


# ---------------------------------------------------------------- the catalog


class FailureClass(NamedTuple):
    """One way a job fails and what it prints: `FAILED <step> on <node>: <message>` (one of PRINTS),
    with SERVICE the tail of that service's log and a classified `cause: <CAUSE>` line, then the verdict
    `job failed: first failure on <node> in step '<step>' (exit code <EXIT_CODE>)`."""

    name: str
    title: str
    step: str | None  # the step named; None: whichever step runs when it happens
    prints: tuple[str, ...]  # the FAILED line's message, alternatives
    exit_code: int  # the job's exit code (where make bench-failfast injects the class: as it measures)
    exit_why: str
    check: str  # what to look at first
    service: str | None = None  # whose log tail is shown; None: a foreground command, output inline
    cause: str = ""  # the cause class (scripts/causes.json) the verdict names
    detail: str = ""  # another line that names the root cause where the failing node is not it
    needs: tuple[str, ...] = ()  # what a plan must have for the class to apply (pages filter on it)
    # a line after the first FAILED one that names the root cause, {node} a regex of its node (the bench's)
    root_regex: str = ""

    def values(self, **given) -> dict:
        """GIVEN plus <service>, this class's service with GIVEN filled in."""
        if self.service and "service" not in given:
            service = fill(self.service, **given)
            if "<" not in service:  # a class of any service (<service>) names it only where it is given
                given["service"] = service
        return given

    def message(self, **given) -> str:
        """The FAILED line's message (the first alternative)."""
        return fill(self.prints[0], **self.values(**given))

    def prints_pattern(self, **given) -> str:
        return "|".join(pattern(p, **self.values(**given)) for p in self.prints)


_SERVICE_EXIT = WORDS["service-exit"]
_PORTS_FREE = (
    "`sync.py ports-free`: every port the node's services will listen on, tried before anything starts"
)
_AT_LINE = " at line <line>"  # cut without str.removesuffix: node tools import this on Python 3.8
_AIPERF_EXIT = fill(WORDS["command-exit"], command="aiperf profile <...>")[: -len(_AT_LINE)]
_PROOF_EXIT = fill(WORDS["command-exit"], command="python3 <...>/proof.py {} <...>")[: -len(_AT_LINE)]

CLASSES: tuple[FailureClass, ...] = (
    FailureClass(
        "lmcache-exit-at-start",
        "LMCache server exits at start",
        "prefill lmcache",
        (_SERVICE_EXIT,),
        1,
        "LMCache's own exit code",
        "the LMCache log tail: its flags (env.sh values), the host DRAM it may take, the pinned build",
        service="lmcache",
        needs=("lmcache",),
        cause="crashed",
    ),
    FailureClass(
        "lmcache-never-healthy",
        "LMCache never becomes healthy",
        "prefill lmcache",
        (fill(WORDS["not-ready"], last="<...>"),),
        4,
        "readiness timeout (sync.py wait-http)",
        "the LMCache process is alive but not answering: a hung start, an L1 pool too large to allocate",
        service="lmcache",
        cause="ready-timeout",
        needs=("lmcache",),
    ),
    FailureClass(
        "start-stalled",
        "a starting service makes no progress",
        None,
        (fill(WORDS["no-progress"]),),
        4,
        "the node's readiness wait saw neither its log grow nor its CPU time move for timeouts.stall seconds",
        "where it stopped: the log tail's last line (a collective init, a peer it waits for, a weights "
        "mount); without the watchdog the job waits for the readiness timeout (an hour for an engine)",
        service="<service>",
        cause="stalled",
    ),
    FailureClass(
        "service-stopped",
        "a service is stopped (SIGSTOP, a debugger)",
        None,
        (fill(WORDS["service-stopped"], pid="<...>"),),
        1,
        "the node's watcher found it stopped (process state T) for timeouts.stopped seconds (default 10)",
        "who stopped it: a debugger or job-control signal on the node (`ps -o pid,stat,args`: stat T); "
        "without the watchdog the job would wait for the readiness timeout, or forever once serving",
        service="<service>",
        cause="service-stopped",
    ),
    FailureClass(
        "serving-stalled",
        "serving stops: requests held, no token",
        "benchmark conc<C>",
        (_SERVICE_EXIT,),
        EXIT_NO_TOKENS,
        "the token watchdog (scripts/tokenwatch.py): requests in flight and no token for "
        "timeouts.serving-stall seconds",
        "the engines' lines in the watchdog's log tail: which held requests; then their own logs (a KV "
        "transfer that never completes, a wedged engine whose /health stays 200); without the watchdog "
        "the benchmark would wait out its duration, and a Mooncake transfer 480 s",
        service="tokenwatch",
        cause="serving-stalled",
    ),
    FailureClass(
        "lmcache-dies-mid-benchmark",
        "LMCache dies mid-benchmark",
        None,
        (_SERVICE_EXIT,),
        137,
        "128 + 9: killed by SIGKILL (the out-of-memory killer, say)",
        "kernel log (dmesg) for the OOM killer; the L1 size in env.sh against the node's free DRAM",
        service="lmcache",
        cause="killed",
        needs=("lmcache",),
    ),
    FailureClass(
        "prefill-crash-during-load",
        "an engine crashes during load",
        "<role> <engine>",
        (_SERVICE_EXIT,),
        1,
        "the engine's own exit code",
        "the engine log tail: the exception, out of memory, a flag the engine build does not know",
        service="<engine>",
        cause="crashed",
    ),
    FailureClass(
        "decode-crash-mid-stream",
        "an engine crashes mid-stream",
        None,
        (_SERVICE_EXIT,),
        1,
        "the engine's own exit code",
        "the engine log tail; results of the concurrencies finished before it stay in results/",
        service="<engine>",
        cause="crashed",
    ),
    FailureClass(
        "service-exit0-mid-run",
        "a service exits 0 mid-run",
        None,
        (fill(_SERVICE_EXIT, code="0"),),
        1,
        "a service that ends while the job runs is a failure, even with code 0",
        "who stopped it: an engine that exits on its own after an idle or request limit, a stray kill",
        service="<engine>",
        cause="exited",
    ),
    FailureClass(
        "router-bind-fails",
        "the proxy/router's port is taken before the job starts",
        "ports free",
        (WORDS["port-taken"],),
        EXIT_BIND,
        _PORTS_FREE,
        "another process on the router port of rank 0 (`ss -ltnp`): a leftover job, another user's",
        needs=("router",),
        cause="port-in-use",
    ),
    FailureClass(
        "barrier-peer-missing",
        "a node's barrier peer never arrives",
        "start barrier",
        ("barrier start: <...>" + fill(WORDS["barrier-timeout"], missing="<ranks> (<nodes>)") + " (code 5)",),
        EXIT_BARRIER,
        "barrier failed (sync.py)",
        "the missing node's own lines in job.out (its last step): a hung preflight, a node never started",
        needs=("multinode",),
        cause="barrier-timeout",
    ),
    FailureClass(
        "port-in-use",
        "a port already in use on one node",
        "ports free",
        (WORDS["port-taken"],),
        EXIT_BIND,
        _PORTS_FREE,
        "the process holding the port on that node (`ss -ltnp`); ports are listed in plan.json",
        cause="port-in-use",
    ),
    FailureClass(
        "benchmark-client-fails",
        "the benchmark client fails",
        "benchmark conc<C>",
        (_AIPERF_EXIT,),
        137,
        "the benchmark's own exit code (137: killed by SIGKILL)",
        "AIPerf's output just above the FAILED line; earlier concurrencies' results stay in results/",
        cause="benchmark-client-failed",
    ),
    FailureClass(
        "prefill-errors",
        "prefill returns errors for every request",
        "benchmark conc<C>",
        (_AIPERF_EXIT, fill(WORDS["result-invalid"], problems="<...>requests failed")),
        1,
        "the result gate (scripts/results.py) refused the result",
        "the router's last warnings after the FAILED line: which engine answered which HTTP status (our "
        "proxy names it; AIPerf's error summary above has the status and body only)",
        needs=("prefill",),
        root_regex=r"(?m)^(?!srun: ).*(?:{node}.*\b500\b|\b500\b.*{node})",
        cause="requests-failed",
    ),
    FailureClass(
        "kv-transfer-stalled",
        "a KV transfer stalls: Mooncake gives up on it, the prefill keeps its KV blocks",
        None,
        (_SERVICE_EXIT,),
        EXIT_KNOWN_ISSUE,
        "scripts/logwatch.py found Mooncake's `ClientSession: no transfer progress within` line "
        "(recipes/vllm.py MOONCAKE_TRANSFER_STALLED) and ended the job",
        "the engine log's lines before it: which peer, which request; then that peer's engine and the "
        "data-plane path between them; without the watcher the prefill holds the failed request's KV blocks "
        "for the Mooncake abort timeout (480 s) and its next requests wait until the token watchdog",
        service="known-issues",
        cause="kv-transfer-stalled",
        needs=("signature:mooncake-tcp-transfer-stalled",),
    ),
    FailureClass(
        "rdma-retry-exceeded",
        "a NIC's RDMA retries run out mid-run",
        None,
        (_SERVICE_EXIT,),
        EXIT_KNOWN_ISSUE,
        "scripts/logwatch.py found the NIC's `cqe with error 12` (transport retry counter exceeded) line "
        "(recipes/sglang.py RDMA_RETRY_EXCEEDED) and ended the job",
        "the NIC the engine log names before it, and its link: nicctl and ibv_devinfo on that node (the "
        "verdict excludes it next time); without the watcher the request waits out "
        "SGLANG_DISAGGREGATION_WAITING_TIMEOUT, an hour as MoRI launches set it",
        service="known-issues",
        cause="rdma-retry-exceeded",
        needs=("signature:rdma-retry-exceeded",),
    ),
    FailureClass(
        "rdma-register-failed",
        "MoRI cannot register KV memory",
        None,
        (_SERVICE_EXIT,),
        EXIT_KNOWN_ISSUE,
        "scripts/logwatch.py found MoRI's `RegisterRdmaMemoryRegion failed!` line (recipes/sglang.py "
        "MORI_REGISTER_FAILED) and ended the job",
        "its errno in the engine log: 22, the NIC refuses the access flags MoRI asks for (AMD ionic NICs and "
        "remote atomics, ROCm/mori#497); 14, GPU memory cannot be pinned for RDMA on that node; without the "
        "watcher a prefill that hangs there waits for the engine-ready timeout",
        service="known-issues",
        cause="rdma-register-failed",
        needs=("signature:mori-rdma-register-failed",),
    ),
    # Not injected by make bench-failfast (yet): documented from the node scripts' own messages.
    FailureClass(
        "known-issue-signature",
        "an engine log shows a known issue's signature",
        None,
        (_SERVICE_EXIT,),
        EXIT_KNOWN_ISSUE,
        "scripts/logwatch.py found the signature and ended the job",
        "the issue's fix and workarounds (Known engine issues, below); the engine log around that line",
        service="known-issues",
        cause="known-issue",
        detail=WORDS["known-issue"],
        needs=("log-signatures",),
    ),
    FailureClass(
        "command-missing",
        "a program the node needs is not in the image",
        "preflight",
        (fill(WORDS["not-on-path"], path="<...>"),),
        1,
        "preflight failed",
        "the image: every program a role starts must be on its PATH (nothing is installed at run time)",
        cause="command-missing",
    ),
    FailureClass(
        "component-version-mismatch",
        "the image carries another build of a pinned component",
        "preflight",
        (fill(WORDS["version-mismatch"], python="<...>"),),
        1,
        "preflight failed",
        "use an image with the pinned build, or pin the build the image has (and say so in the changelog)",
        cause="version-mismatch",
    ),
    FailureClass(
        "gpu-not-drained",
        "a GPU is still in use when the job starts (AMD runners)",
        "preflight",
        (WORDS["gpu-not-drained"],),
        1,
        "preflight failed",
        "the card, bus address and VRAM in use are named: a leftover of an earlier job (scancel it, or ask "
        "the site to reset the GPU); the run's state/<node>/node-facts.json has every GPU's numbers",
        cause="gpu-not-drained",
    ),
    FailureClass(
        "leftover-processes",
        "a process of an earlier job still runs on the node's host",
        "host preflight",
        (WORDS["leftover-processes"],),
        1,
        "host preflight failed, before any container started",
        "each process is named with its pid, command, job and run folder: a child that escaped its job's "
        "end; kill it (or ask the site to), and make submit leaves the node out meanwhile (make nodes)",
        cause="leftover-process",
    ),
    FailureClass(
        "nic-not-ready",
        "a data-plane NIC is missing or down, or its QoS/DCQCN is not RoCE's (runners with nic-check)",
        "host preflight",
        (WORDS["nic-not-ready"],),
        1,
        "host preflight failed, before any container started",
        "the NIC (bus address or RoCE device) and the value seen are named; the site fixes the NIC or its "
        "QoS/DCQCN (nicctl), and make submit leaves the node out meanwhile (make nodes); the run's "
        "state/<node>/nic-facts.json has what every NIC showed",
        cause="nic-not-ready",
        needs=("nic-check",),
    ),
    FailureClass(
        "node-setup-fails",
        "the pinned tools the image lacks cannot be installed",
        "node setup",
        (WORDS["setup-failed"],),
        1,
        "node setup failed",
        "the problem named: the image's python3 is not the runner's node-setup.python, a wheel does not "
        "match its pinned SHA-256, or the image has no pip (see recipe/setup and recipe/wheelhouse)",
        cause="node-setup-failed",
    ),
    FailureClass(
        "kv-not-moved",
        "the smoke request is answered but no KV moved",
        "smoke and KV proof",
        (_PROOF_EXIT.format("smoke"),),
        1,
        "the proof failed",
        "a router speaking an old PD contract gets answers while decode recomputes: router and engine "
        "versions",
        detail=line("proof-failed", reason=WORDS["no-kv-moved"].split(" (")[0] + " <...>"),
        needs=("smoke", "decode"),
        cause="smoke-failed",
    ),
    FailureClass(
        "lmcache-no-hits",
        "LMCache served no hit over the whole sweep",
        "LMCache proof",
        (_PROOF_EXIT.format("l2"),),
        1,
        "the proof failed",
        "the LMCache logs and the prefill engines' connector lines: a dead or unreachable LMCache server "
        "degrades to no cache silently",
        detail=line("proof-failed", reason=WORDS["no-l2-hits"].split(" (")[0] + " <...>"),
        needs=("l2-proof",),
        cause="lmcache-no-hits",
    ),
    FailureClass(
        "answers-differ",
        "the router's answers differ from a prefill's served whole: the KV path corrupts what it moves",
        "same answers",
        (_PROOF_EXIT.format("same-answers"),),  # exit code EXIT_ANSWERS_DIFFER: a quality failure
        1,
        "the proof failed",
        "the token named and the KV path between the roles: the KV layout, block or page size, the "
        "KV-cache dtype and its scales on both sides, the transfer library's version",
        detail=line("proof-failed", reason=WORDS["answers-differ"].split(":")[0] + ": <...>"),
        needs=("same-answers",),
        cause="answers-differ",
    ),
    FailureClass(
        "accuracy-below-threshold",
        "the model's graded eval through the router scores below its threshold: the answers are wrong",
        "accuracy",
        (fill(WORDS["command-exit"], command="python3 <...>/accuracy.py <...>")[: -len(_AT_LINE)],),
        1,
        "the eval scored below the threshold (exit code EXIT_BELOW_THRESHOLD: a quality failure)",
        "the samples lm-eval kept (results/accuracy/): a model path that computes wrongly (weights, the "
        "expert-parallel path, quantization) or KV the transfer corrupted; the same-answers check before "
        "the sweep tells the two apart",
        detail=line("accuracy-below", scored="<...>"),
        needs=("accuracy",),
        cause="accuracy-below-threshold",
    ),
    FailureClass(
        "not-cold",
        "the caches served hits before the point's first request",
        "cold start proof",
        (_PROOF_EXIT.format("cold"),),
        1,
        "the proof failed",
        "what ran before the benchmark (the smoke request, an earlier job's engines still serving): an "
        "agentic point measured on warm caches does not compare with InferenceX's",
        detail=line("proof-failed", reason=WORDS["not-cold"].split(":")[0] + " <...>"),
        needs=("cold-proof",),
        cause="not-cold",
    ),
)

BY_NAME = {c.name: c for c in CLASSES}


# ---------------------------------------------------------------- command line (for the bash library)


def node_cause(state_dir: str, *, step: str, code: str) -> causes.Classified:
    """The cause of a node's failure for its outcome file: the one its service report classified, else
    what the node said (STATE_DIR/said: its FAILED lines) with its step and exit code."""
    path = os.path.join(state_dir, statefiles.CAUSE)
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            id_, blame, detail = handle.read(4096).rstrip("\n").split("\t", 2)
        return causes.Classified(id_, blame, detail)
    except (OSError, ValueError):
        pass  # none recorded (or garbled): classify what the node said
    said = causes.read_tail(os.path.join(state_dir, statefiles.SAID)) or ""  # none: the cause is unknown
    found = cause(text=said, code=code, step=step)
    record_cause(path, found)
    return found


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="failures.py", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    c = sub.add_parser("cause", help="the classified cause of a service's failure: <id> (<detail>)")
    c.add_argument("--log", required=True)
    c.add_argument("--code", default=None, help="its exit code (none: it still runs)")
    c.add_argument("--step", default="")
    c.add_argument("--service", default="")
    r = sub.add_parser("report", help="headline, log tail and cause of a failed service")
    for name in ("step", "node", "service", "headline", "log"):
        r.add_argument(f"--{name}", required=True)
    r.add_argument("--code", default=None, help="its exit code (none: it still runs)")
    r.add_argument("--lines", type=int, required=True, help="log lines shown (the plan's)")
    r.add_argument("--cause-file", default=None, help="where the node keeps its first failure's cause")
    n = sub.add_parser("node-cause", help="<id><TAB><detail> of a failed node, for its outcome file")
    n.add_argument("--state-dir", required=True)
    n.add_argument("--step", required=True)
    n.add_argument("--code", required=True)
    args = p.parse_args(argv)
    try:
        if args.command == "cause":
            text = tail(args.log, CAUSE_LINES)
            print(cause(text=text, code=args.code, step=args.step, service=args.service).line())
        elif args.command == "node-cause":
            found = node_cause(args.state_dir, step=args.step, code=args.code)
            print(f"{found.id}\t{found.detail}")
        else:
            values = {k: getattr(args, k) for k in ("step", "node", "service", "headline", "log", "lines")}
            print(service_report(code=args.code or None, cause_file=args.cause_file, **values))
    except causes.CausesError as exc:
        die(f"failures.py: {exc}", EXIT_USAGE)
    return 0


if __name__ == "__main__":
    sys.exit(main())
