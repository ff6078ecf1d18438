#!/usr/bin/env python3
"""`sync.py gpu-drain`: every AMD GPU of the node is free before any engine starts. A GPU an earlier job
still holds would fail the engine's model load ~15 minutes in with an out-of-memory error; here it fails in
the first second, naming the card, its bus address and the memory in use, and any process of this node (or
container) holding a GPU device. Reads the amdgpu driver's sysfs (mem_info_vram_used and
mem_info_vram_total, in bytes), so it needs no SMI tool in the image. Also writes what the run's provenance
records of the node: driver, ROCm and RDMA NIC firmware versions. Stdlib only."""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

from failures import die, line, one_line
from nodeargs import positive_float

AMD = "0x1002"  # PCI vendor id
EXIT_GPU_BUSY = 1  # a preflight failure, as every other check of that step
_CARD = re.compile(r"card[0-9]+")


class DrainError(Exception):
    """The GPUs could not be read; one line."""


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace").strip()
    except OSError as err:
        raise DrainError(f"cannot read {path}: {err.strerror}") from None


def amd_gpus(sysfs: Path) -> list[dict]:
    """Each AMD card under SYSFS (/sys/class/drm): name, bus address, VRAM total and used (bytes)."""
    out = []
    try:
        cards = sorted((p for p in sysfs.iterdir() if _CARD.fullmatch(p.name)), key=lambda p: int(p.name[4:]))
    except OSError as err:
        raise DrainError(f"cannot list {sysfs}: {err.strerror}") from None
    for card in cards:
        device = card / "device"
        if not (device / "mem_info_vram_total").exists() or _read(device / "vendor") != AMD:
            continue
        total, used = _read(device / "mem_info_vram_total"), _read(device / "mem_info_vram_used")
        if not (total.isdigit() and used.isdigit() and int(total) > 0):
            raise DrainError(f"{card.name}: VRAM total {total!r}, used {used!r} are not byte counts")
        bus = os.path.basename(os.path.realpath(device))
        out.append({"card": card.name, "bus": bus, "total": int(total), "used": int(used)})
    return out


def holders(proc: Path, devices: list[str]) -> list[str]:
    """'pid N (comm) holds DEVICE' for every process under PROC with one of DEVICES open."""
    wanted = {os.path.realpath(d) for d in devices}
    found = []
    for entry in sorted((p for p in proc.iterdir() if p.name.isdigit()), key=lambda p: int(p.name)):
        try:
            fds = list((entry / "fd").iterdir())
        except OSError:
            continue  # gone, or not ours to read
        held = set()
        for fd in fds:
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target in wanted:
                held.add(target)
        if held:
            comm = one_line(read_value(entry / "comm", "?"), 40)
            found += [f"pid {entry.name} ({comm}) holds {d}" for d in sorted(held)]
    return found


def read_value(path: Path, missing: str | None = None) -> str | None:
    """One small kernel file's value (sysfs, /proc), stripped; MISSING when it cannot be read."""
    try:
        return path.read_text(errors="replace").strip()
    except OSError:
        return missing


def _gib(n: int) -> str:
    return f"{n / 2**30:.1f} GiB"


def node_facts(module: Path, rocm: Path, rdma: Path) -> dict:
    """What the run's provenance records of this node: the amdgpu driver's version, the ROCm release the
    image carries, each RDMA device's firmware (None where the file is absent)."""
    facts: dict[str, Any] = {"amdgpu_driver": read_value(module, "?") if module.exists() else None}
    facts["rocm"] = read_value(rocm, "?") if rocm.exists() else None
    firmware = {}
    for fw in sorted(glob.glob(str(rdma / "*" / "fw_ver"))):
        firmware[Path(fw).parent.name] = read_value(Path(fw), "?")
    facts["rdma_firmware"] = firmware
    return facts


def _check(args: argparse.Namespace) -> tuple[list[dict], list[str]]:
    """The node's AMD GPUs, and what keeps them from being free (empty: drained)."""
    gpus = amd_gpus(Path(args.sysfs))
    if not gpus:
        raise DrainError(
            f"no AMD GPU under {args.sysfs} (is amdgpu loaded, and are /dev/kfd and /dev/dri passed in?)"
        )
    busy = [
        f"{g['card']} ({g['bus']}): {_gib(g['used'])} of {_gib(g['total'])} VRAM in use "
        f"({100 * g['used'] / g['total']:.0f} %)"
        for g in gpus
        if g["used"] / g["total"] > args.max_used
    ]
    devices = [d for pattern in args.device for d in sorted(glob.glob(pattern))]
    return gpus, busy + (holders(Path(args.proc), devices) if devices else [])


def cmd_gpu_drain(args: argparse.Namespace) -> int:
    """Checked until drained or --wait seconds have passed (an earlier job's processes may still be
    releasing VRAM as this one starts), each wait said; then fails naming what is still held."""
    deadline = time.monotonic() + args.wait
    try:
        gpus, problems = _check(args)
        while problems and time.monotonic() < deadline:
            left = max(0, round(deadline - time.monotonic()))
            print(one_line(f"gpu-drain: not drained yet, re-checking for up to {left} s more: "
                           f"{'; '.join(problems)}", 600), file=sys.stderr, flush=True)  # fmt: skip
            time.sleep(min(args.interval, max(0.0, deadline - time.monotonic())))
            gpus, problems = _check(args)
    except DrainError as err:
        die(line("gpu-not-drained", problems=err), EXIT_GPU_BUSY)
    if args.facts_out:
        facts = node_facts(Path(args.driver_version), Path(args.rocm_version), Path(args.rdma))
        facts["gpus"] = gpus
        Path(args.facts_out).write_text(json.dumps(facts, indent=1, sort_keys=True) + "\n")
    if problems:
        waited = f" after waiting {args.wait} s" if args.wait else ""
        die(line("gpu-not-drained", problems="; ".join(problems) + waited), EXIT_GPU_BUSY)
    worst = max(g["used"] / g["total"] for g in gpus)
    print(f"GPUs drained: {len(gpus)} AMD GPUs, at most {100 * worst:.1f} % of VRAM in use "
          f"(limit {100 * args.max_used:.0f} %), no process holds a GPU device")  # fmt: skip
    return 0


def _fraction(text: str) -> float:
    value = positive_float(text)
    if value >= 1:
        raise argparse.ArgumentTypeError(f"{text} is not a fraction below 1")
    return value


def add_parser(sub: Any) -> None:
    p = sub.add_parser("gpu-drain", help="every AMD GPU of the node is free (VRAM, device holders)")
    p.add_argument(
        "--max-used", type=_fraction, required=True, help="VRAM in use above this fraction fails (the plan's)"
    )
    p.add_argument(
        "--wait", type=int, default=0, help="seconds to keep re-checking a node whose GPUs are still held"
    )
    p.add_argument("--interval", type=float, default=10.0, help="seconds between checks while waiting")
    p.add_argument("--sysfs", default="/sys/class/drm", help="where the cards are (tests: a fake tree)")
    p.add_argument("--proc", default="/proc")
    p.add_argument(
        "--device", action="append", default=[], help="glob of GPU device files (default /dev/kfd, renderD*)"
    )
    p.add_argument("--facts-out", help="write the node's driver, ROCm, NIC firmware and GPUs here (JSON)")
    p.add_argument("--driver-version", default="/sys/module/amdgpu/version")
    p.add_argument("--rocm-version", default="/opt/rocm/.info/version")
    p.add_argument("--rdma", default="/sys/class/infiniband")
    p.set_defaults(func=_with_default_devices)


def _with_default_devices(args: argparse.Namespace) -> int:
    args.device = args.device or ["/dev/kfd", "/dev/dri/renderD*"]
    return cmd_gpu_drain(args)
