#!/usr/bin/env python3
"""`sync.py rdma-register`: Mooncake registers this node's GPU memory over RDMA the way the runner says it
does (mooncake-registration), before any engine loads. How Mooncake registers HIP memory is a fact of the
site: plain ibv_reg_mr fails on some NICs, the dma-buf path crashes in the HIP runtime on some clusters. An
engine finds out after loading its weights; this probe finds out in seconds, in a child process of the
engine's own Python with the engines' environment, so a crash is a named failure, not a dead node. Stdlib
only here; the child imports the image's torch and mooncake."""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys

from failures import die, one_line
from preflight import VersionError, _interpreter_of

EXIT_REGISTER = 1  # a preflight failure, as every other check of that step
PROBE_BYTES = 64 << 20  # one buffer the size of a few KV blocks

CHILD = """
import sys
import torch
from mooncake.engine import TransferEngine
host, devices, size = sys.argv[1], sys.argv[2], int(sys.argv[3])
engine = TransferEngine()
rc = engine.initialize(host, "P2PHANDSHAKE", "rdma", devices)
if rc != 0:
    print(f"TransferEngine.initialize(rdma, {devices}) returned {rc}")
    sys.exit(3)
buffer = torch.empty(size, dtype=torch.uint8, device="cuda")
rc = engine.batch_register_memory([buffer.data_ptr()], [size])
if rc != 0:
    print(f"batch_register_memory of {size >> 20} MiB of GPU memory returned {rc}")
    sys.exit(4)
print(f"registered {size >> 20} MiB of GPU memory over {devices}")
"""


def _other(mode: str) -> str:
    return "ibv-reg-mr" if mode == "dmabuf" else "dmabuf"


def cmd_rdma_register(args: argparse.Namespace) -> int:
    mode = "ibv-reg-mr" if os.environ.get("MOONCAKE_DISABLE_HIP_DMABUF") == "1" else "dmabuf"
    python = args.python
    if args.engine_command:
        script = shutil.which(args.engine_command)
        if script is None:
            die(f"Mooncake cannot register GPU memory: {args.engine_command} is not on PATH", EXIT_REGISTER)
        try:
            python = _interpreter_of(script)
        except VersionError as err:
            die(f"Mooncake cannot register GPU memory: {err}", EXIT_REGISTER)
    cmd = [python, "-c", CHILD, args.host, args.devices, str(PROBE_BYTES)]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout, check=False)
    except subprocess.TimeoutExpired:
        die(f"Mooncake cannot register GPU memory: the probe ({mode} registration) did not finish in "
            f"{args.timeout} s", EXIT_REGISTER)  # fmt: skip
    except OSError as err:
        die(f"Mooncake cannot register GPU memory: cannot run {python}: {err}", EXIT_REGISTER)
    output = (done.stdout + done.stderr).strip()
    said = one_line(output.splitlines()[-1] if output else "", 300)
    if done.returncode == 0:
        print(f"rdma registration ({mode}): {said}")
        return 0
    if done.returncode < 0:
        name = signal.Signals(-done.returncode).name
        why = f"the probe crashed with {name} registering with {mode}"
    elif done.returncode in (3, 4):
        why = f"{said} ({mode} registration)"
    else:
        why = f"the probe exited {done.returncode} ({mode} registration): {said}"
    die(f"Mooncake cannot register GPU memory: {why}; if the other way works on this site, set the runner's "
        f"mooncake-registration: {_other(mode)} (configs/launch.yaml)", EXIT_REGISTER)  # fmt: skip
    return 1


def add_parser(sub) -> None:
    p = sub.add_parser("rdma-register", help="Mooncake registers GPU memory over the runner's RDMA devices")
    p.add_argument("--host", required=True, help="the address the engine's transfer engine will use")
    p.add_argument("--devices", required=True, help="the RDMA devices, comma-separated (nic-devices)")
    p.add_argument("--python", default=sys.executable, help="the engine's Python (the image's)")
    p.add_argument("--engine-command", help="instead of --python: the Python that runs this command (vllm)")
    p.add_argument("--timeout", type=int, default=120)
    p.set_defaults(func=cmd_rdma_register)
