"""InferenceX's launch obtained by running InferenceX's own chain from a checkout, every command that would
touch hardware, SLURM, containers or the network replaced by a recorder: the recorded launch.

    python -m recipes.outside.chain --inferencex <checkout> --config <key> [--row N|field=value] --out x.json
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from recipes.outside import actions, matrix, sandbox
from recipes.outside.assemble import assemble, read_log
from recipes.outside.shims.procs import started_at

FORMAT = "recorded-launch v1"
TIMEOUT = 60.0
RUNNER_SCRIPT = "bash ./runners/launch_"
FIXTURE = sandbox.FIXTURES / "mi355x"


class ChainError(RuntimeError):
    pass


@dataclass(frozen=True)
class Edit:
    """A declared change to one of InferenceX's files in the scratch copy: INSERT goes after the one line
    of FILE that is AFTER (stripped), for the reason WHY. An anchor found no time or twice is an error."""

    file: str
    after: str
    insert: str
    why: str


def apply_edits(box: sandbox.Sandbox, edits: tuple[Edit, ...]) -> list[dict[str, str]]:
    out = []
    for edit in edits:
        path = box.checkout / edit.file
        if not path.is_file():
            raise ChainError(f"declared edit: {edit.file} is not in the checkout")
        lines = path.read_text().splitlines(keepends=True)
        hits = [i for i, line in enumerate(lines) if line.strip() == edit.after.strip()]
        if len(hits) != 1:
            raise ChainError(
                f"declared edit: {edit.file} has {len(hits)} lines {edit.after.strip()!r}, not one"
            )
        lines.insert(hits[0] + 1, edit.insert if edit.insert.endswith("\n") else edit.insert + "\n")
        path.write_text("".join(lines))
        shown = " ".join(edit.insert.split())
        out.append(
            {"kind": "edit", "what": f"{edit.file}: after `{edit.after.strip()}`: `{shown}`", "why": edit.why}
        )
    return out


def runner_name(checkout: Path, label: str) -> str:
    """The first concrete runner of the row's label in InferenceX's runners.yaml (GitHub would pick any)."""
    labels = yaml.safe_load((checkout / "configs" / "runners.yaml").read_text())["labels"]
    if not labels.get(label):
        raise ChainError(f"configs/runners.yaml has no runner for label {label!r}")
    return str(labels[label][0])


def launch_step(script: str) -> tuple[str, dict[str, str]]:
    """The launch step up to the runner script's call: what follows checks result files a recorded run
    does not produce."""
    lines = script.splitlines()
    cut = next((i for i, line in enumerate(lines) if RUNNER_SCRIPT in line), None)
    if cut is None:
        raise ChainError(f"the '{actions.LAUNCH_STEP}' step no longer calls `{RUNNER_SCRIPT}...`")
    adjustment = {
        "kind": "path",
        "what": f"'{actions.LAUNCH_STEP}' step run up to line {cut + 1} (`{lines[cut].strip()}`)",
        "why": "the lines after it check benchmark result files, which a recorded launch does not produce",
    }
    return "\n".join(lines[: cut + 1]) + "\n", adjustment


def model_folder(box: sandbox.Sandbox, row: dict[str, Any]) -> dict[str, str]:
    """The model's folder in the model store, by the names job.slurm looks under (MODEL's last part, and
    the hf_dir models*.yaml gives it)."""
    name = str(row["model"]).rsplit("/", 1)[-1]
    names = {name}
    for models in sorted((box.checkout / "benchmarks/multi_node/amd_utils").glob("models*.yaml")):
        entry = (yaml.safe_load(models.read_text()) or {}).get(name) or {}
        if isinstance(entry, dict) and entry.get("hf_dir"):
            names.add(str(entry["hf_dir"]))
    for folder in sorted(names):
        (box.fs / "it-share/data" / folder).mkdir(parents=True, exist_ok=True)
    return {
        "kind": "fixture",
        "what": f"empty model folder(s) {', '.join(sorted(names))} under /it-share/data",
        "why": "job.slurm checks on every node that the model folder exists before starting containers",
    }


def environment(box: sandbox.Sandbox, launch: actions.Launch, deadline: float) -> dict[str, str]:
    fixture = json.loads((FIXTURE / "node.json").read_text())
    github = {
        "GITHUB_ACTIONS": "true",
        "CI": "true",
        "GITHUB_WORKSPACE": str(box.checkout),
        "GITHUB_ENV": str(box.root / "github_env"),
        "RUNNER_TEMP": str(box.root / "runner_temp"),
        "USER": str(fixture["runner_user"]),
    }
    harness = {
        "PATH": str(box.bin),
        "HOME": str(box.root / "home"),
        "LANG": "C.UTF-8",
        "BASH_ENV": str(box.rc),
        "RECORDER_ROOT": str(box.root),
        "RECORDER_LOG": str(box.log),
        "RECORDER_BIN": str(box.bin),
        "RECORDER_FIXTURE": str(FIXTURE),
        "RECORDER_PYTHON": sys.executable,
        "RECORDER_DEADLINE": str(deadline),
    }
    return harness | github | launch.env | launch.step_env


def run_step(box: sandbox.Sandbox, script: str, env: dict[str, str], timeout: float) -> int:
    """`bash -e` as GitHub runs a step; stdin is an open pipe so a foreground call is told apart from a
    background one (bash gives `cmd &` /dev/null). The whole process group ends with the step."""
    step = box.root / "step.sh"
    step.write_text(script)
    with open(box.root / "chain.out", "w") as out, open(box.root / "chain.err", "w") as err:
        process = subprocess.Popen(
            ["/bin/bash", "-e", str(step)], cwd=box.checkout, env=env, stdin=subprocess.PIPE, stdout=out,
            stderr=err, start_new_session=True,
        )  # fmt: skip
        (box.root / "run" / "step.pgid").write_text(str(process.pid))  # the kill recorder spares it
        try:
            return process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            raise ChainError(f"the chain did not finish within {timeout:.0f}s; {last_call(box)}") from None
        finally:
            end_lingering(box)
            end_group(process.pid)


def end_group(pgid: int, grace: float = 5.0) -> None:
    """Kills what the step left running in its session (a backgrounded loop, a detached container's
    command) and waits until none is left, so nothing writes into the scratch folder afterwards."""
    deadline = time.monotonic() + grace
    while True:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            return
        if time.monotonic() > deadline:
            raise ChainError(f"processes of the chain's session {pgid} outlived SIGKILL for {grace:.0f}s")
        time.sleep(0.05)  # until the kernel has removed them (bounded by the deadline)


def end_lingering(box: sandbox.Sandbox, grace: float = 5.0) -> None:
    """Ends the recorded services still running (TERM, then KILL after GRACE seconds), and waits until they
    are gone, so nothing writes into the scratch folder once the chain has returned. Only the recorded
    processes themselves: a pid whose start time differs from its pidfile's is another process now (several
    chains run at once, and pids wrap)."""
    files = sorted((box.root / "run" / "linger").glob("*"))
    pids = {int(p.name): p.read_text() for p in files}
    pids = {pid: start for pid, start in pids.items() if start and started_at(pid) == start}
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + grace
        while pids and time.monotonic() < deadline:
            for pid in [p for p in pids if not _alive(p, pids[p])]:
                del pids[pid]
            if pids:
                time.sleep(0.05)  # a poll of the processes' exit, bounded by the deadline
        if not pids:
            return


def _alive(pid: int, start: str) -> bool:
    try:
        os.waitpid(pid, os.WNOHANG)  # reaps it if it is our child
    except ChildProcessError:
        pass
    return started_at(pid) == start


def last_call(box: sandbox.Sandbox) -> str:
    entries = read_log(box.log)
    if not entries:
        return "no command was recorded"
    last = entries[-1]
    return f"last recorded call: {last['tool']} {' '.join(last['argv'])[:200]} at {last['loc']}"


def record(
    checkout: Path,
    key: str,
    row: str | int | None = None,
    *,
    scratch: Path | None = None,
    timeout: float = TIMEOUT,
    edits: tuple[Edit, ...] = (),
) -> dict[str, Any]:
    """Runs InferenceX's chain for one row of `key` from `checkout` and returns the recorded launch; EDITS:
    declared changes to the scratch copy, each listed in its adjustments with its reason."""
    checkout = checkout.resolve()
    picked = matrix.pick(matrix.rows(checkout, key), row)
    root = Path(tempfile.mkdtemp(prefix="recorded-launch-")) if scratch is None else scratch
    box, adjustments = sandbox.build(checkout, root)
    adjustments += apply_edits(box, edits)
    launch = actions.launch(
        box.checkout / ".github" / "workflows", picked, runner_name(checkout, picked["runner"])
    )
    script, cut = launch_step(launch.script)
    adjustments += [cut, model_folder(box, picked), fixture_adjustment()]
    rc = run_step(box, script, environment(box, launch, time.time() + timeout), timeout)
    head = {
        "format": FORMAT,
        "checkout": str(checkout),
        "config": key,
        "row": picked,
        "caller": launch.caller,
        "exit": rc,
        "adjustments": adjustments,
    }
    entries = read_log(box.log)
    adjustments += client_adjustments(entries)
    recorded = assemble(entries, box, head, json.loads((FIXTURE / "node.json").read_text()))
    pin_submodules(recorded, checkout)
    if picked.get("scenario-type") == "agentic-coding" and not clients(recorded):
        recorded["no_client"] = {
            "why": "the row is agentic but the scripts launched no benchmark client",
            "log_errors": log_errors(box),
        }
    if rc != 0:
        tail = (box.root / "chain.err").read_text().splitlines()[-15:]
        recorded["error"] = f"the launch step exited {rc}; {last_call(box)}; stderr tail:\n" + "\n".join(tail)
    return recorded


def client_adjustments(entries: list[dict[str, Any]]) -> list[dict[str, str]]:
    """The departures that let the scripts reach a client run from a virtualenv they build at run time,
    listed when the chain built one."""
    if not any(e["tool"] == "uv" and "venv" in e for e in entries):
        return []
    return [
        {"kind": "shim",
         "what": "`uv venv PATH` makes PATH/bin with recorders for python, pip, aiperf and hf",
         "why": "the benchmark client runs from a virtualenv the scripts build at run time; its `aiperf` is "
                "recorded as the client service with its argv and environment"},
        {"kind": "shim",
         "what": "`uv pip install` / `pip install` recorded with the packages they name (requirement files "
                 "and editable folders read from the checkout), never run; `hf download` recorded, never run",
         "why": "installs and downloads reach the network; what they name is the client's build"},
        {"kind": "shim",
         "what": "the virtualenv's `python` records the scripts' result processing (aggregation, plots, "
                 "validation) without running it",
         "why": "it reads the benchmark's result files, which a recorded launch does not produce"},
        {"kind": "shim",
         "what": "`command -v uv` finds the recorder, so the scripts' fallback `curl .../uv/install.sh | sh` "
                 "is not taken",
         "why": "whether the image ships uv is not known here"},
    ]  # fmt: skip


def clients(recorded: dict[str, Any]) -> list[dict[str, Any]]:
    return [s for n in recorded["nodes"] for s in n["services"] if s["kind"] == "client"]


def log_errors(box: sandbox.Sandbox, limit: int = 20) -> list[str]:
    """Lines of the nodes' logs (what the containers wrote under the node's /tmp and the log mounts) that
    start with Error/ERROR: why a launch stopped short."""
    found: list[str] = []
    for log in sorted(box.fs.rglob("*.log")):
        for line in log.read_text(errors="replace").splitlines():
            if line.startswith(("Error", "ERROR")):
                found.append(f"{log.name}: {line.strip()}")
    return list(dict.fromkeys(found))[:limit]


def pin_submodules(recorded: dict[str, Any], checkout: Path) -> None:
    """An editable install from a folder the checkout holds as a git submodule is pinned by the submodule's
    commit: read it (`git ls-tree`, read-only) when the checkout is a git work tree."""
    for install in [i for n in recorded["nodes"] for i in n["installs"]]:
        for package in install["packages"]:
            if "checkout_path" not in package or not (checkout / ".git").exists():
                continue
            listed = subprocess.run(
                ["git", "-C", str(checkout), "ls-tree", "HEAD", package["checkout_path"]],
                capture_output=True, text=True, check=False,
            ).stdout.split()  # fmt: skip
            if listed[:2] == ["160000", "commit"]:
                package["submodule_commit"] = listed[2]


def fixture_adjustment() -> dict[str, str]:
    about = json.loads((FIXTURE / "node.json").read_text())["about"]
    return {"kind": "fixture", "what": f"recipes/outside/fixtures/mi355x: {about}", "why": "no MI355X here"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m recipes.outside.chain", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--inferencex", type=Path, required=True, help="an InferenceX checkout")
    parser.add_argument("--config", required=True, help="a key of the checkout's configs/amd-master.yaml")
    parser.add_argument("--row", help="row index, or field=value[,field=value] (e.g. isl=8192,decode.tp=8)")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--scratch", type=Path, help="keep the scratch folder here (default: a temp folder)")
    parser.add_argument("--timeout", type=float, default=TIMEOUT)
    args = parser.parse_args(argv)
    try:
        recorded = record(args.inferencex, args.config, args.row, scratch=args.scratch, timeout=args.timeout)
    except (ChainError, matrix.RowError, actions.ExpressionError, LookupError) as error:
        print(f"recipes.outside.chain: {args.config}: {error}", file=sys.stderr)
        return 1
    args.out.write_text(json.dumps(recorded, indent=2) + "\n")
    if "error" in recorded:
        print(f"recipes.outside.chain: {args.config}: {recorded['error']}", file=sys.stderr)
        return 1
    if "no_client" in recorded:
        why = "; ".join(recorded["no_client"]["log_errors"]) or "no error line in the node logs"
        print(f"recipes.outside.chain: {args.config}: no benchmark client launched ({why})", file=sys.stderr)
    print(f"{args.out}: {len(recorded['nodes'])} nodes, {len(recorded['unrecorded'])} unrecorded commands")
    return 0


if __name__ == "__main__":
    sys.exit(main())
