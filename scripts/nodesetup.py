#!/usr/bin/env python3
"""`sync.py setup-env`: what a node needs that the image lacks, installed from the run's wheelhouse with no
network: every wheel is named with its SHA-256 (pip --require-hashes), nothing is resolved (--no-deps: the
requirements are complete) and no index is asked (--no-index). A tool (AIPerf) gets an environment of the
image's own python3, isolated from the image's packages; a library the engine imports (a site's LMCache
build, --layer-link) is installed into a folder of its own that the node puts on PYTHONPATH, so nothing of
the image is replaced (engines are never reinstalled). Either is kept under ROOT by the requirements' hash:
a later job with the same ones reuses it. Only the set's commands go on PATH; stdlib only.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from failures import EXIT_VERSION, die, line, one_line
from nodeargs import positive_float

COMPLETE = ".complete"  # written last, holding the lock's hash: a folder without it is half-built


class SetupError(Exception):
    """Why the set could not be installed; one line."""


def _pip_env() -> dict[str, str]:
    """No pip configuration of the node's (an index, find-links, constraints) may change what is installed."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    return env | {
        "PIP_CONFIG_FILE": os.devnull,
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        "PYTHONNOUSERSITE": "1",
    }


def _run(argv: list[str], timeout: float, what: str) -> None:
    try:
        done = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            errors="replace",
            env=_pip_env(),
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise SetupError(f"{what} did not finish within {timeout:g} s") from None
    except OSError as err:
        raise SetupError(f"{what}: {one_line(err)}") from None
    if done.returncode != 0:
        lines = (done.stderr or done.stdout).strip().splitlines()
        errors = [x for x in lines if x.startswith("ERROR")] or lines[-3:]
        raise SetupError(f"{what} exited {done.returncode}: {one_line(' '.join(errors), 400)}")


def _lock_file(path: Path, timeout: float):
    """An exclusive flock on PATH (two jobs, or two nodes on a shared ROOT, never build one folder twice)."""
    handle = path.open("a")
    deadline = time.monotonic() + timeout
    while True:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return handle
        except BlockingIOError:
            if time.monotonic() > deadline:
                handle.close()
                raise SetupError(
                    f"{path} stayed locked for {timeout:g} s (another job installing?)"
                ) from None
            time.sleep(0.5)


def install(args: argparse.Namespace) -> str:
    have = "{}.{}".format(*sys.version_info[:2])
    if have != args.python:
        raise SetupError(
            f"the image's python3 is {have} ({sys.executable}); the wheelhouse is for {args.python}: set "
            "the runner's node-setup.python to it and run `make lock-setup`"
        )
    lock = Path(args.lock)
    try:
        text = lock.read_bytes()
    except OSError as err:
        raise SetupError(f"cannot read the lock {lock}: {err.strerror}") from None
    digest = hashlib.sha256(text).hexdigest()
    wheels = text.count(b"==")
    root = Path(args.root)
    env = root / f"{lock.stem}-{digest[:16]}"
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise SetupError(f"cannot make {root}: {err.strerror}") from None
    layer = args.layer_link is not None
    started, how = time.monotonic(), "reused"
    with _lock_file(root / f"{env.name}.lock", args.timeout):
        done = env / COMPLETE
        if not (done.is_file() and done.read_text().strip() == digest):
            how = "installed"
            shutil.rmtree(env, ignore_errors=True)
            _run([sys.executable, "-m", "pip", "--version"], 60, "the image's pip (python3 -m pip)")
            if layer:  # scripts land in site/bin, run by the image's python3
                pip, into = [], ["--target", str(env / "site")]
            else:  # pip's own option: it installs for that interpreter
                _run([sys.executable, "-m", "venv", "--without-pip", str(env)], 120, "python3 -m venv")
                pip, into = ["--python", str(env / "bin" / "python")], []
            _run(
                [
                    sys.executable, "-m", "pip", *pip, "install", "--quiet", "--no-index", "--no-deps",
                    "--require-hashes", "--only-binary", ":all:", *into, "--find-links", args.wheelhouse,
                    "--requirement", str(lock),
                ],
                args.timeout,
                f"pip install of {lock.name} from {args.wheelhouse}",
            )  # fmt: skip
            done.write_text(digest + "\n")
    bin_dir = Path(args.bin_dir)
    bin_dir.mkdir(parents=True, exist_ok=True)
    scripts = env / "site" / "bin" if layer else env / "bin"
    if layer:  # the node script puts this link on PYTHONPATH
        link = Path(args.layer_link)
        link.unlink(missing_ok=True)
        link.symlink_to(env / "site")
    for command in args.command:
        _put_on_path(command, scripts, bin_dir, lock.name)
    took = time.monotonic() - started
    where = f"; on python3's path as {args.layer_link}" if layer else ""
    return (
        f"node setup {lock.stem}: {wheels} pinned wheels {how} in {took:.0f} s at {env} "
        f"(lock sha256 {digest[:16]}); on PATH: {', '.join(args.command)}{where}"
    )


def _put_on_path(command: str, scripts: Path, bin_dir: Path, lock: str) -> None:
    """COMMAND, a console script of the set, linked into BIN_DIR; NAME=python3, the environment's own
    python3 as NAME (for a program the job ships, the proxy): a script that runs it by its path, as a link
    would start the image's Python outside the environment (it finds its pyvenv.cfg by the path it ran as)."""
    name, _, program = command.partition("=")
    if program not in ("", "python3"):
        raise SetupError(f"--command {command}: only python3 is given another name")
    target = scripts / (program or name)
    if not os.access(target, os.X_OK):
        raise SetupError(f"{lock} installs no command {program or name} ({target})")
    link = bin_dir / name
    link.unlink(missing_ok=True)
    if program:
        link.write_text(f'#!/bin/sh\nexec {shlex.quote(str(target))} "$@"\n')
        link.chmod(0o755)
    else:
        link.symlink_to(target)


def cmd_setup_env(args: argparse.Namespace) -> int:
    try:
        print(install(args), flush=True)
    except SetupError as err:
        die(line("setup-failed", set=Path(args.lock).stem, problem=err), EXIT_VERSION)
    return 0


def add_parser(sub: Any) -> None:
    p = sub.add_parser("setup-env", help="install a pinned tool set from the run's wheelhouse (no network)")
    p.add_argument("--lock", required=True, help="the set's lock: NAME==VERSION --hash=sha256:... lines")
    p.add_argument("--wheelhouse", required=True, help="folder of the lock's wheels (written by make submit)")
    p.add_argument("--root", required=True, help="where environments are kept, one per lock hash")
    p.add_argument("--python", required=True, help="MAJOR.MINOR the wheels are for; python3 must be it")
    p.add_argument("--bin-dir", required=True, help="folder the set's commands are linked into")
    p.add_argument(
        "--command",
        action="append",
        default=[],
        help="a console script the set provides; NAME=python3: the environment's python3, as NAME",
    )
    p.add_argument(
        "--layer-link",
        help="install onto the image's Python path instead (pip --target, a library the engine imports); "
        "this link points at the folder, for PYTHONPATH",
    )
    p.add_argument("--timeout", type=positive_float, default=1800.0, help="seconds for the install")
    p.set_defaults(func=cmd_setup_env)
