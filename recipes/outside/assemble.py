"""The recorder's call log (one JSON line per shimmed call) to the recorded launch: sbatch, per node its host
commands, its container and the services started in it, and what no shim covered."""

from __future__ import annotations

import json
import os
import re
import shlex
from pathlib import Path
from typing import Any

from recipes.outside.sandbox import Sandbox

# The harness's own environment, never part of what a process of the chain sees.
HARNESS_ENV = ("BASH_ENV", "HOME", "LANG", "SHLVL", "PWD", "OLDPWD", "_")
REPO_VIEWS = ("checkout", "fs/workspace")  # where the sandbox holds the repository (sandbox.Sandbox)
ROLES = (
    (re.compile(r"--disaggregation-mode[ =]prefill|kv_producer|--kv-role[ =]prefill"), "prefill"),
    (re.compile(r"--disaggregation-mode[ =]decode|kv_consumer|--kv-role[ =]decode"), "decode"),
)


class Paths:
    """Scratch paths and the fixture's invented values back to what they stand for, so the record depends
    neither on where it ran nor on the fixture: a node's address is `<node N address>`, the default route's
    interface `<the default route's interface>` (both what the scripts looked up on the node), a host tool
    the recorder stood in for is at its host path, the runner's home is `$HOME`."""

    def __init__(self, box: Sandbox, fixture: dict[str, Any]) -> None:
        tools = {f"{box.bin}/{tool}": path for tool, path in sorted(fixture["host_tools"].items())}
        self.pairs = [
            *tools.items(),
            (str(box.fs), ""),
            (str(box.checkout), "$GITHUB_WORKSPACE"),
            (str(box.bin), "$RECORDER_BIN"),
            (str(box.root / "home"), "$HOME"),
            (str(box.root), "$SCRATCH"),
        ]
        prefix, first = re.escape(fixture["address_prefix"]), int(fixture["address_first"])
        self.address = re.compile(rf"(?<![\w.]){prefix}(\d+)(?![\w.])")
        self.first, self.gateway = first, fixture["gateway"]
        self.interface = re.compile(rf"(?<![\w.-]){re.escape(fixture['default_interface'])}(?![\w.-])")
        rdma = re.escape(fixture.get("rdma_address_prefix") or "-")
        self.rdma = re.compile(rf"(?<![\w.]){rdma}(\d+)\.(\d+)(?![\w.])")

    def _address(self, match: re.Match[str]) -> str:
        if match.group(0) == self.gateway:
            return "<the default gateway>"
        return f"<node {int(match.group(1)) - self.first} address>"

    @staticmethod
    def _rdma(match: re.Match[str]) -> str:
        nic, host = match[1], int(match[2])
        side = "its switch port" if host % 2 else "address"
        return f"<node {host // 2} RDMA NIC {nic} {side}>"

    def text(self, value: str) -> str:
        for path, name in self.pairs:
            value = value.replace(path, name)
        value = self.address.sub(self._address, value)
        value = self.rdma.sub(self._rdma, value)
        return self.interface.sub("<the default route's interface>", value)

    def all(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, list):
            return [self.all(v) for v in value]
        if isinstance(value, dict):
            return {self.text(k): self.all(v) for k, v in value.items()}
        return value


def process_env(env: dict[str, str], box: Sandbox) -> dict[str, str]:
    kept = {k: v for k, v in env.items() if k not in HARNESS_ENV and not k.startswith("RECORDER_")}
    if "PATH" in kept:
        parts = [p for p in kept["PATH"].split(":") if p and p != str(box.bin)]
        kept.pop("PATH")
        if parts:
            kept["PATH"] = ":".join(parts)  # what the chain itself put on PATH (e.g. UCX tools)
    return dict(sorted(kept.items()))


def where(entry: dict[str, Any]) -> tuple[str, int | None]:
    """The script (repository-relative) and line that ran the command; a `bash -c` string is placed at
    the line that started it."""
    loc = entry["loc"] if not str(entry["loc"]).startswith("bash -c") else entry["parent"] or entry["loc"]
    script, _, line = str(loc).rpartition(":")
    script = script or str(loc)
    if script != "bash -c":
        script = os.path.normpath(os.path.join(entry["cwd"], script))
        for repo in REPO_VIEWS:
            # the checkout, on the host or mounted in a container
            script = re.sub(rf"^.*?/{repo}/", "", script)
    return script, int(line) if line.isdigit() else None


def command(entry: dict[str, Any]) -> dict[str, Any]:
    script, line = where(entry)
    found: dict[str, Any] = {"argv": [entry["tool"], *entry["argv"]], "script": script, "line": line}
    for key in ("refused", "answered", "network", "skipped", "venv"):
        if key in entry:
            found[key] = entry[key]
    return found


def container_values(argv: list[str], env: dict[str, str]) -> dict[str, str]:
    """The -e values of a `docker run` argv (`-e NAME` alone takes NAME from the caller's environment)."""
    values: dict[str, str] = {}
    for flag, value in zip(argv, argv[1:], strict=False):
        if flag in ("-e", "--env"):
            key, eq, val = value.partition("=")
            values[key] = val if eq else env.get(key, "")
    return dict(sorted(values.items()))


def service(entry: dict[str, Any], box: Sandbox) -> dict[str, Any]:
    script, line = where(entry)
    text = shlex.join(entry["argv"])
    role = next((name for pattern, name in ROLES if pattern.search(text)), None)
    return {
        "kind": entry["service"],
        "role": role,
        "argv": [entry["tool"], *entry["argv"]],
        "env": process_env(entry["env"], box),
        "container": entry["container"],
        "script": script,
        "line": line,
    } | ({"venv": entry["venv"]} if "venv" in entry else {})


def installs(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every package install the node's scripts ran (recorded, never run): the build of the container's
    additions and of the client's virtualenv."""
    return [command(e) | e["install"] for e in entries if "install" in e]


def downloads(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Model and dataset fetches (`hf download ...`), recorded, never run."""
    tools = ("hf", "huggingface-cli")
    return [command(e) for e in entries if e["tool"] in tools and "download" in e["argv"][:1]]


def container(entry: dict[str, Any], box: Sandbox) -> dict[str, Any]:
    argv = ["docker", *entry["argv"]]
    return {
        "name": entry["container_name"],
        "image": entry["image"],
        "argv": argv,
        "env": container_values(argv, entry["env"]),
        "command": entry["command"],
        "script": where(entry)[0],
        "line": where(entry)[1],
    }


def node(rank: str, entries: list[dict[str, Any]], box: Sandbox) -> dict[str, Any]:
    mine = [e for e in entries if e["node"] == rank]
    runs = [e for e in mine if e["tool"] == "docker" and e["argv"][:1] == ["run"]]
    main = [e for e in runs if not {"-d", "--detach"} & set(e["argv"])]
    # the node's container is its engine's: a node may also run the client in a container of its own
    engines = {e["container"] for e in mine if e.get("service") == "engine"}
    main.sort(key=lambda e: e["container_name"] in engines)
    plain = [e for e in mine if "service" not in e and e not in runs and not e.get("unknown")]
    return {
        "rank": int(rank),
        "name": next((e["env"].get("SLURMD_NODENAME") for e in mine if "SLURMD_NODENAME" in e["env"]), None),
        "host": [command(e) for e in plain if e["container"] is None],
        "container": container(main[-1], box) if main else None,
        "sidecars": [container(e, box) for e in runs if not main or e is not main[-1]],
        "container_commands": [command(e) for e in plain if e["container"] is not None],
        "services": [service(e, box) for e in mine if "service" in e],
        "installs": installs(mine),
        "downloads": downloads(mine),
    }


def read_log(log: Path) -> list[dict[str, Any]]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


def assemble(
    entries: list[dict[str, Any]], box: Sandbox, head: dict[str, Any], fixture: dict[str, Any]
) -> dict[str, Any]:
    submits = [e for e in entries if e["tool"] == "sbatch"]
    sbatch = None
    if submits:
        entry = submits[-1]
        sbatch = {
            "argv": ["sbatch", *entry["argv"]],
            "options": entry["directives"] | entry["options"],
            "directives": entry["directives"],
            "script": Path(entry["script"]).name,
            "env": process_env(entry["env"], box),
            "host": [command(e) for e in entries if e["node"] == "batch" and "service" not in e],
        }
    ranks = sorted({e["node"] for e in entries if str(e["node"]).isdigit()}, key=int)
    unrecorded = [command(e) | {"node": e["node"]} for e in entries if e.get("unknown")]
    refused = [command(e) | {"node": e["node"]} for e in entries if "refused" in e]
    runner = [command(e) for e in entries if e["node"] is None and e["tool"] != "sbatch"]
    launch = head | {
        "runner": runner,
        "sbatch": sbatch,
        "nodes": [node(rank, entries, box) for rank in ranks],
        "unrecorded": unrecorded,
        "refused": refused,
    }
    return dict(Paths(box, fixture).all(launch))
