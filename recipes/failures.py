"""The failure classes of a job and what its main output (job.out) says for each: the one catalog that
`make bench-failfast` injects and checks (tests/bench/failfast_faults.py) and recipe pages document.

Text fields are templates: `<name>` stands for a value known only at run time (a node, an exit code,
a URL); `<...>` for any text. `text()` fills the values given and leaves the others as placeholders;
`pattern()` turns a template into a regex that the job's output must match, the values given taken
literally and the others matched loosely. `<engine>` is the engine service's name (vllm, ...).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# What every failing node prints (scripts/lib/node.sh), and the job's last line (scripts/outcome.py).
HEADLINE = "FAILED <step> on <node>: <message>"
VERDICT = "job failed: first failure on <node> in step '<step>' (exit code <code>)"
_PLACEHOLDER = re.compile(r"<(\w+|\.\.\.)>")
# How a value nobody filled in is matched; anything else is matched by ".*?".
_LOOSE = {"code": "[1-9][0-9]*", "line": "[0-9]+", "timeout": "[0-9]+", "C": "[0-9]+"}


def text(template: str, **values) -> str:
    """TEMPLATE with the VALUES given filled in; other placeholders stay."""
    return _PLACEHOLDER.sub(lambda m: str(values.get(m[1], m[0])), template)


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


@dataclass(frozen=True)
class FailureClass:
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
    cause: str = ""  # the `cause:` line after the log tail
    detail: str = ""  # another line that names the root cause where the failing node is not it
    needs: tuple[str, ...] = ()  # what a plan must have for the class to apply (pages filter on it)
    # a line after the first FAILED one that names the root cause, {node} a regex of its node (the bench's)
    root_regex: str = ""

    def values(self, **given) -> dict:
        """GIVEN plus <service>, this class's service with GIVEN filled in."""
        if self.service and "service" not in given:
            given["service"] = text(self.service, **given)
        return given

    def message(self, **given) -> str:
        """The FAILED line's message (the first alternative)."""
        return text(self.prints[0], **self.values(**given))

    def prints_pattern(self, **given) -> str:
        return "|".join(pattern(p, **self.values(**given)) for p in self.prints)


_SERVICE_EXIT = "<service> exited (code <code>)"
_AIPERF_EXIT = "command 'aiperf profile <...>' exited (code <code>)"

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
    ),
    FailureClass(
        "lmcache-never-healthy",
        "LMCache never becomes healthy",
        "prefill lmcache",
        ("<service> not ready at <url> after <timeout> s (last: <...>)",),
        4,
        "readiness timeout (sync.py wait-http)",
        "the LMCache process is alive but not answering: a hung start, an L1 pool too large to allocate",
        service="lmcache",
        cause="not ready in time (the process is still running)",
        needs=("lmcache",),
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
        cause="killed by signal SIGKILL",
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
    ),
    FailureClass(
        "service-exit0-mid-run",
        "a service exits 0 mid-run",
        None,
        (text(_SERVICE_EXIT, code="0"),),
        1,
        "a service that ends while the job runs is a failure, even with code 0",
        "who stopped it: an engine that exits on its own after an idle or request limit, a stray kill",
        service="<engine>",
        cause="exited cleanly while it should keep serving",
    ),
    FailureClass(
        "router-bind-fails",
        "proxy/router fails to bind its port",
        "router",
        (_SERVICE_EXIT,),
        3,
        "the router's own exit code",
        "another process on the router port of rank 0 (`ss -ltnp`): a leftover job, another user's",
        service="router",
        cause="port already in use",
        needs=("router",),
    ),
    FailureClass(
        "barrier-peer-missing",
        "a node's barrier peer never arrives",
        "start barrier",
        ("barrier start: <...>timed out after <timeout> s; missing rank(s) <ranks> (<nodes>) (code 5)",),
        5,
        "barrier failed (sync.py)",
        "the missing node's own lines in job.out (its last step): a hung preflight, a node never started",
        needs=("multinode",),
    ),
    FailureClass(
        "port-in-use",
        "a port already in use on one node",
        "<role> <engine>",
        (_SERVICE_EXIT,),
        1,
        "the engine's own exit code",
        "the process holding the port on that node (`ss -ltnp`); ports are listed in plan.json",
        service="<engine>",
        cause="port already in use",
    ),
    FailureClass(
        "benchmark-client-fails",
        "the benchmark client fails",
        "benchmark conc<C>",
        (_AIPERF_EXIT,),
        137,
        "the benchmark's own exit code (137: killed by SIGKILL)",
        "AIPerf's output just above the FAILED line; earlier concurrencies' results stay in results/",
    ),
    FailureClass(
        "prefill-errors",
        "prefill returns errors for every request",
        "benchmark conc<C>",
        (_AIPERF_EXIT, "result <file> is not valid: <...>requests failed"),
        1,
        "the result gate (scripts/results.py) refused the result",
        "AIPerf's error summary above the FAILED line: which backend answered which HTTP status",
        needs=("prefill",),
        root_regex=r"(?m)^(?!srun: ).*(?:{node}.*\b500\b|\b500\b.*{node})",
    ),
    # Not injected by make bench-failfast (yet): documented from the node scripts' own messages.
    FailureClass(
        "known-issue-signature",
        "an engine log shows a known issue's signature",
        None,
        (_SERVICE_EXIT,),
        12,
        "scripts/logwatch.py found the signature and ended the job",
        "the issue's fix and workarounds (Known engine issues, below); the engine log around that line",
        service="known-issues",
        cause="known issue <issue> (configs/known-issues.yaml)",
        detail="KNOWN ISSUE <issue>: its log signature appeared in <log> line <line>",
        needs=("log-signatures",),
    ),
    FailureClass(
        "command-missing",
        "a program the node needs is not in the image",
        "preflight",
        ("not on PATH: <commands> (PATH=<...>)",),
        1,
        "preflight failed",
        "the image: every program a role starts must be on its PATH (nothing is installed at run time)",
    ),
    FailureClass(
        "component-version-mismatch",
        "the image carries another build of a pinned component",
        "preflight",
        ("dist-version <command>: <dist> <found> is installed (<...>), the recipe pins <version>",),
        1,
        "preflight failed",
        "use an image with the pinned build, or pin the build the image has (and say so in the changelog)",
    ),
    FailureClass(
        "kv-not-moved",
        "the smoke request is answered but no KV moved",
        "smoke and KV proof",
        ("command 'python3 <...>/proof.py smoke <...>' exited (code <code>)",),
        1,
        "the proof failed",
        "a router speaking an old PD contract gets answers while decode recomputes: router and engine "
        "versions",
        detail="proof failed: the answer came back but no KV moved prefill -> decode <...>",
        needs=("smoke", "decode"),
    ),
    FailureClass(
        "lmcache-no-hits",
        "LMCache served no hit over the whole sweep",
        "LMCache proof",
        ("command 'python3 <...>/proof.py l2 <...>' exited (code <code>)",),
        1,
        "the proof failed",
        "the LMCache logs and the prefill engines' connector lines: a dead or unreachable LMCache server "
        "degrades to no cache silently",
        detail="proof failed: LMCache served no prefix hit on any prefill node <...>",
        needs=("l2-proof",),
    ),
)

BY_NAME = {c.name: c for c in CLASSES}
