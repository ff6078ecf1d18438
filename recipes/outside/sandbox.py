"""The scratch folder InferenceX's chain runs in: a copy of the checkout, declared path rewrites, and a PATH
holding only the recorder's shims and a whitelist of harmless local tools."""

from __future__ import annotations

import re
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

SHIMS = Path(__file__).resolve().parent / "shims"
FIXTURES = Path(__file__).resolve().parent / "fixtures"

# Tools that only read, compute or print locally: the real binaries, unrecorded.
WHITELIST = (
    "bash", "sh", "cat", "grep", "egrep", "awk", "sed", "head", "tr", "cut", "paste", "sort", "uniq",
    "wc", "seq", "date", "dirname", "basename", "readlink", "realpath", "ls", "stat", "sync", "id", "xargs",
    "find", "true", "false", "env", "printf", "expr", "setsid", "yq", "which", "nproc", "od", "mktemp",
    "md5sum", "sha256sum", "timeout", "nohup", "flock", "numfmt", "column", "getconf", "test", "jq", "cmp",
    "diff", "comm", "fold", "rev", "nl", "tac", "shuf", "uname", "mawk", "gawk", "echo",
)  # fmt: skip
# Commands that would reach SLURM, containers, hardware or the network, and file writers kept in scratch.
SHIMMED = (
    "sbatch", "srun", "scontrol", "squeue", "scancel", "salloc", "docker", "sudo", "sleep", "nicctl",
    "rocm-smi", "amd-smi", "ibv_devinfo", "hostname", "ip", "whoami", "curl", "wget", "python", "python3",
    "vllm", "vllm-router", "atom", "atomesh", "lmcache", "mooncake_master", "aiperf", "pip", "pip3", "uv",
    "git", "apt-get", "hf", "huggingface-cli", "pkill", "killall", "mkdir", "rm", "cp", "mv", "tee", "chmod",
    "chown", "touch", "ln", "tar", "kill", "tail", "ps", ".unknown",
)  # fmt: skip

# Every bash the chain starts sources this (BASH_ENV): it names the script and line of each command for the
# records (one line: $LINENO counts the trap's own lines), restores the recorder PATH a login shell's
# /etc/profile replaced, records unknown commands, and routes `kill` (job specs aside) to a recorder that
# signals only this chain's processes (chains run side by side here, and pids wrap).
BASH_RC = """\
case ":$PATH:" in *":$RECORDER_BIN:"*) ;; *) PATH="$RECORDER_BIN" ;; esac
case "${RECORDER_LOC:-}" in "bash -c:"*|"") ;; *) export RECORDER_PARENT="$RECORDER_LOC" ;; esac
set -T
trap '[[ ${BASH_SOURCE:-} == "$BASH_ENV" ]] || export RECORDER_LOC="${BASH_SOURCE:-bash -c}:$LINENO"' DEBUG
command_not_found_handle() { "$RECORDER_BIN/.unknown" "$@"; }
kill() { case " $* " in *" %"*) builtin kill "$@" ;; *) "$RECORDER_BIN/kill" "$@" ;; esac; }
"""


@dataclass(frozen=True)
class PathRule:
    """An absolute path of the chain that does not exist here, moved under <scratch>/fs."""

    path: str
    why: str


PATH_RULES = (
    PathRule("/it-share/data", "the runner script's MODEL_PATH (shared model store) does not exist here"),
    PathRule("/models", "container path where job.slurm mounts MODEL_DIR"),
    PathRule("/workspace", "container path where job.slurm mounts the repository"),
    PathRule("/run_logs", "container path where job.slurm mounts the node's /tmp for logs"),
    PathRule("/benchmark_logs", "container path where job.slurm mounts BENCHMARK_LOGS_DIR"),
    PathRule("/config/hicache_mc.env", "container path where job.slurm mounts the HiCache/Mooncake settings"),
    PathRule(
        "/tmp",
        "node-local scratch (router canary output, log mounts, the client's virtualenv) kept out of this "
        "host's /tmp",
    ),
)

# A whole path word: not part of a longer path (`$(pwd)/models.yaml` is not `/models`), or a bash default
# (`${TMPDIR:-/tmp}/...`, `${INFMAX_CONTAINER_WORKSPACE:-/workspace}`).
ANY_RULE = re.compile(
    rf"(?:(?<=:-)|(?<![\w./$-]))(?:{'|'.join(re.escape(r.path) for r in PATH_RULES)})(?![\w.-])"
)


@dataclass(frozen=True)
class Sandbox:
    root: Path

    @property
    def checkout(self) -> Path:
        return self.root / "checkout"

    @property
    def fs(self) -> Path:
        return self.root / "fs"

    @property
    def bin(self) -> Path:
        return self.root / "bin"

    @property
    def log(self) -> Path:
        return self.root / "records.jsonl"

    @property
    def rc(self) -> Path:
        return self.root / "bashrc"


# A shimmed program called by its absolute path (`/usr/local/bin/atomesh`) would bypass PATH and fail here
# unrecorded: the call is pointed at its recorder (a `#!` line is left alone).
PROGRAM_DIRS = ("/usr/local/bin", "/usr/bin", "/usr/sbin", "/opt/conda/bin")
ANY_PROGRAM = re.compile(
    rf"(?<![\w./$!-])(?:{'|'.join(map(re.escape, PROGRAM_DIRS))})/"
    rf"({'|'.join(re.escape(t) for t in SHIMMED if not t.startswith('.'))})(?![\w.-])"
)


def rewrite_scripts(checkout: Path, root: Path) -> list[dict[str, str]]:
    """Applies PATH_RULES to the copy's shell scripts, and points shimmed programs called by absolute path
    at their recorders; returns one adjustment per rule that matched."""
    hits: dict[str, list[str]] = {}
    programs: dict[str, list[str]] = {}
    scripts = sorted([*checkout.glob("benchmarks/**/*.sh"), *checkout.glob("benchmarks/**/*.slurm")])
    for script in [*scripts, *sorted(checkout.glob("runners/*.sh"))]:
        original = script.read_text()
        # One pass: a moved path is never moved again (the scratch folder may itself be under /tmp).
        text = ANY_RULE.sub(lambda match: str(root / "fs") + match.group(0), original)
        for path in sorted({match.group(0) for match in ANY_RULE.finditer(original)}):
            hits.setdefault(path, []).append(str(script.relative_to(checkout)))
        for path in sorted({match.group(0) for match in ANY_PROGRAM.finditer(text)}):
            programs.setdefault(path, []).append(str(script.relative_to(checkout)))
        text = ANY_PROGRAM.sub(lambda match: str(root / "bin" / match.group(1)), text)
        if text != original:
            script.write_text(text)
    return [
        {"kind": "path", "what": f"{rule.path} -> <scratch>/fs{rule.path} in {', '.join(hits[rule.path])}",
         "why": rule.why}
        for rule in PATH_RULES
        if rule.path in hits
    ] + [
        {"kind": "shim", "what": f"{path} -> its recorder in {', '.join(where)}",
         "why": "a program called by its absolute path is recorded like one found on PATH"}
        for path, where in sorted(programs.items())
    ]  # fmt: skip


def install_bin(box: Sandbox) -> None:
    box.bin.mkdir(parents=True)
    for tool in WHITELIST:
        real = shutil.which(tool, path="/usr/bin:/bin:/usr/sbin:/sbin")
        if real:
            (box.bin / tool).symlink_to(real)
    # -E: the recorder's own interpreter ignores the chain's PYTHON* variables (they are recorded, not obeyed:
    # a PYTHONPYCACHEPREFIX the chain never got to create would make every call recompile the stdlib)
    for tool in SHIMMED:
        launcher = box.bin / tool
        launcher.write_text(f'#!/bin/sh\nexec "{sys.executable}" -E -S "{SHIMS / "shim.py"}" "{tool}" "$@"\n')
        launcher.chmod(0o755)


def build(checkout: Path, root: Path) -> tuple[Sandbox, list[dict[str, str]]]:
    """The scratch folder, and the adjustments that made it (path rewrites and shims)."""
    box = Sandbox(root)
    shutil.copytree(checkout, box.checkout, symlinks=True, ignore=shutil.ignore_patterns(".git"))
    for folder in ("fs/it-share/data", "fs/tmp", "fs/root", "run", "home"):
        (root / folder).mkdir(parents=True, exist_ok=True)
    adjustments = rewrite_scripts(box.checkout, root)
    install_bin(box)
    box.rc.write_text(BASH_RC)
    shims = ", ".join(t for t in SHIMMED if not t.startswith("."))
    adjustments.append({
        "kind": "shim",
        "what": f"PATH holds only recorders ({shims}) and whitelisted local tools ({', '.join(WHITELIST)})",
        "why": "each command that would reach SLURM, containers, hardware or the network is recorded instead",
    })  # fmt: skip
    return box, adjustments
