"""The files a node keeps under $RUN_DIR/state/<node>/: their names' one declaration, for the Python that
reads them and for the node's bash, which reads them as STATE_<NAME> from scripts/lib/names.sh (written from
here by recipes/pages/bashnames.py, `make docs`).

A name changed here is changed on both sides; a name dropped here is an unset variable in bash, which
`set -u` refuses at its first use.
"""

from __future__ import annotations

import os
import re

FOLDER = "state"  # $RUN_DIR/<FOLDER>/<node>: one folder per node

# What the node script and its watcher write, and job.sbatch and make report read.
OUTCOME = "outcome"  # how the node ended (scripts/lib/outcome.sh writes it, scripts/outcome.py reads it)
FAILURE = "failure"  # the watcher's failure report, printed by the node script's trap
FAILURE_CODE = "failure.code"  # its exit code
FAILURE_AT = "failure.at"  # when the service failed (epoch seconds)
CAUSE = "cause"  # the classified cause of the node's failure (scripts/failures.py)
SAID = "said"  # the node's FAILED lines, its cause classified from them when no report classified one
STEP = "step"  # the current step, for the watcher and scripts/tokenwatch.py
MARKS = "marks"  # "<epoch> <cpu ticks> <what>" per step, barrier release, service ready: timings only
SERVICES = "services"  # the services started, one name a line, in start order
FOREGROUND_PID = "foreground.pid"  # the foreground command's session (the benchmark client, a proof)
SCANCEL_OUT = "scancel.out"  # what scancel said when a failing node told the others to stop
PEERS = "peers.json"  # the start barrier's table: every node's published address
PEER_ADDRS = "peer-addrs"  # those addresses, one line per rank (the start barrier checks and writes them)
NODE_FACTS = "node-facts.json"  # GPU driver, ROCm and NIC firmware (AMD preflight)
NIC_FACTS = "nic-facts.json"  # what the host's NIC check saw (scripts/nics.py)
IMAGE = "image"  # the container image's id and digests on this node (scripts/container.sh)
BIN = "bin"  # node-setup: the installed tools' commands, first on PATH

# Files of one service, barrier or installed set: <name><SUFFIX>, <PREFIX><name>.
PID_SUFFIX = ".pid"  # a service's session id
RC_SUFFIX = ".rc"  # a service's exit code and when it exited (scripts/lib/run-service.sh)
OUT_SUFFIX = ".out"  # a captured command's output
WAIT_ERR_SUFFIX = ".wait-http.err"  # a readiness wait's messages
BARRIER_ERR_PREFIX = "barrier-"  # <prefix><barrier>.err: a barrier's messages
SITE_PREFIX = "site-"  # <prefix><set>: a library set's import folder (node-setup layer)

_NAME = re.compile(r"[A-Z][A-Z_]*")
_VALUE = re.compile(r"[a-z.-][a-z0-9.-]*")  # no quote, space or '$': bash takes it as it is


def names() -> dict:
    """Every declared name, NAME -> file name (or its prefix or suffix)."""
    found = {k: v for k, v in globals().items() if _NAME.fullmatch(k) and isinstance(v, str)}
    for name, value in found.items():
        if not _VALUE.fullmatch(value):
            raise ValueError(f"statefiles.{name} = {value!r}: not a plain file name")
    return found


def node_dir(run_dir: str, node: str) -> str:
    """A node's state folder in a run folder."""
    return os.path.join(run_dir, FOLDER, node)
