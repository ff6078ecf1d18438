"""scripts/lib/names.sh, written from the one declaration of each name: the state files' names
(statefiles.py) and the failure vocabulary (failures.py). `make docs` writes it; a test fails when it is
stale. Node scripts source it instead of asking Python at every start (two interpreters a node script,
each ~0.05 s of CPU: where many nodes share a host, that was a third of their start)."""

from __future__ import annotations

import shlex
from pathlib import Path

from scripts import failures, statefiles

PATH = Path(__file__).resolve().parents[2] / "scripts" / "lib" / "names.sh"
HEAD = """\
# shellcheck shell=bash disable=SC2034
# Written by `make docs` (recipes/pages/bashnames.py) from scripts/statefiles.py and scripts/failures.py: edit
# those, not this file (a test fails when it is stale). The state files' names as STATE_<NAME>, a name
# dropped there an unset variable that `set -u` refuses; the failure vocabulary as printf formats.
"""


def render() -> str:
    state = [
        f"declare -g STATE_{name}={shlex.quote(value)}" for name, value in sorted(statefiles.names().items())
    ]
    words = [f"  [{name}]={shlex.quote(failures.printf_format(t))}" for name, t in failures.WORDS.items()]
    return "\n".join([HEAD.rstrip("\n"), *state, "declare -gA _NODE_WORDS=(", *words, ")"]) + "\n"


def stale() -> bool:
    return not PATH.is_file() or PATH.read_text() != render()


def write() -> None:
    PATH.write_text(render())
