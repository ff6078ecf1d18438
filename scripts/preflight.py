#!/usr/bin/env python3
"""`sync.py dist-version`: the package behind a command is exactly the pinned version (an image may lack a
component, or carry another build of it); stdlib only."""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
from typing import Any

from failures import EXIT_VERSION, die, line, one_line
from nodeargs import positive_float
from safejson import open_regular

VERSION_PROBE = "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))"
IMPORT_PROBE = "import importlib, sys\nfor name in sys.argv[1:]: importlib.import_module(name)"


class VersionError(Exception):
    """Why the installed version of a component could not be confirmed."""


# pip's console script when its interpreter's path is too long for a #! line (over 127 bytes):
#   #!/bin/sh
#   '''exec' /path/to/python "$0" "$@"
_SH_TRAMPOLINE = re.compile('\'\'\'exec\' ("[^"]+"|\\S+) "\\$0" "\\$@"')


def _interpreter_of(script: str) -> str:
    """The Python that runs a console script: its `#!/path/python` or `#!/usr/bin/env python3` line, or
    the `exec` line of pip's /bin/sh trampoline."""
    try:
        with os.fdopen(open_regular(script), "rb") as handle:  # not a FIFO on PATH: it would never open
            first = handle.readline(512).decode("utf-8", "replace").strip()
            second = handle.readline(4096).decode("utf-8", "replace").strip()
        if not first.startswith("#!"):
            raise VersionError(f"{script} is not a script with a #! line")
    except OSError as err:
        raise VersionError(f"cannot read {script}: {err.strerror or err}") from None
    trampoline = _SH_TRAMPOLINE.fullmatch(second) if first.split()[0] == "#!/bin/sh" else None
    if trampoline:
        return trampoline[1].strip('"')
    words = first[2:].split()
    if words and os.path.basename(words[0]) == "env":
        words = [w for w in words[1:] if not w.startswith("-")]
        words[:1] = [shutil.which(words[0]) or words[0]] if words else []
    if not words or not os.path.basename(words[0]).startswith("python"):
        raise VersionError(f"cannot tell which Python runs {script} (first line: {first[:80]!r})")
    return words[0]


def cmd_dist_version(args: argparse.Namespace) -> int:
    """The distribution behind a command must be exactly the pinned version (the image may lack it)."""
    try:
        script = shutil.which(args.command)
        if script is None:
            raise VersionError("not on PATH")
        python = _interpreter_of(script)
        probe = _probe(python, VERSION_PROBE, [args.dist], args.timeout, "")
        found = one_line(probe.stdout, 100)
        if probe.returncode != 0 or not found:
            raise VersionError(f"no {args.dist} distribution installed for {python}")
        if found != args.expect:
            die(
                line(
                    "version-mismatch",
                    command=args.command,
                    dist=args.dist,
                    found=found,
                    python=python,
                    version=args.expect,
                ),
                EXIT_VERSION,
            )
        _imports(python, args)
    except VersionError as err:
        die(f"dist-version {args.command}: {err}", EXIT_VERSION)
    imported = f"; imports {', '.join(args.imports)}" if args.imports else ""
    print(f"{args.command}: {args.dist} {found} ({python}){imported}")
    return 0


def _probe(python: str, code: str, words: list, timeout: float, doing: str) -> subprocess.CompletedProcess:
    """CODE run by PYTHON with WORDS as its arguments, bounded; a Python that cannot run is a VersionError."""
    try:
        return subprocess.run(
            [python, "-c", code, *words],
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        raise VersionError(f"{python}: {doing}{one_line(err)}") from None


def _imports(python: str, args: argparse.Namespace) -> None:
    """Each module of args.imports imports with the command's own Python; the first failure is named with
    the last line of its error (an ImportError of a compiled part, a missing dependency)."""
    if not args.imports:
        return
    probe = _probe(python, IMPORT_PROBE, args.imports, args.timeout, f"importing {', '.join(args.imports)}: ")
    if probe.returncode != 0:
        said = [ln for ln in probe.stderr.splitlines() if ln.strip()]
        raise VersionError(
            f"{args.dist} {args.expect} is installed but {python} cannot import {', '.join(args.imports)}: "
            f"{one_line(said[-1] if said else f'exit {probe.returncode}', 300)}"
        )


def add_parser(sub: Any) -> None:
    p = sub.add_parser("dist-version", help="check the installed version of the package behind a command")
    p.add_argument("--command", required=True, help="console script on PATH, e.g. lmcache")
    p.add_argument("--dist", required=True, help="distribution name, e.g. lmcache")
    p.add_argument("--expect", required=True, help="the exact version the recipe pins")
    p.add_argument(
        "--import",
        dest="imports",
        action="append",
        default=[],
        metavar="MODULE",
        help="a module the command's Python must import (repeatable)",
    )
    p.add_argument("--timeout", type=positive_float, default=120.0, help="seconds the version probe may take")
    p.set_defaults(func=cmd_dist_version)
