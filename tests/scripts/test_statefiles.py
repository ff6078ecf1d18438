"""scripts/statefiles.py, the one declaration of a node's state file names: bash reads the same names, and
the node library defaults none of the runner's values."""

from __future__ import annotations

import subprocess

from recipes.pages import bashnames
from scripts import statefiles
from tests.scripts.conftest import SCRIPTS


def test_bash_loads_every_declared_name():
    done = subprocess.run(
        [
            "bash",
            "-c",
            'set -Eeuo pipefail; source "$1/lib/outcome.sh"; declare -p "${!STATE_@}"',
            "-",
            SCRIPTS,
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    loaded = dict(line.split(" ", 2)[2].split("=", 1) for line in done.stdout.splitlines())
    assert loaded == {f"STATE_{name}": f'"{value}"' for name, value in statefiles.names().items()}
    assert {"STATE_FAILURE", "STATE_OUTCOME", "STATE_PEERS", "STATE_FOLDER"} <= loaded.keys()


def test_names_sh_is_written_from_the_declarations():
    """The node's bash reads the names from scripts/lib/names.sh: written from the Python, never by hand."""
    assert not bashnames.stale(), "scripts/lib/names.sh is stale: run `make docs`"


def test_a_runner_value_left_unset_fails_the_node_naming_it(node):
    run = node.run('echo "never here"\n', env={"GRACE_S": ""})
    assert run.rc == 1 and "never here" not in run.out
    assert "node_init: GRACE_S must be a number of seconds" in run.err
