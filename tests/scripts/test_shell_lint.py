"""Every shell file the run folder ships (scripts/**/*.sh) is shellcheck- and bash -n-clean, as the
rendered ones are (tests/recipes/test_render.py)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SHELLCHECK = shutil.which("shellcheck") or str(Path(sys.executable).parent / "shellcheck")
SHIPPED = sorted((ROOT / "scripts").rglob("*.sh"))


def test_the_shipped_shell_files_are_shellcheck_clean():
    assert ROOT / "scripts" / "container.sh" in SHIPPED and len(SHIPPED) > 5
    for path in SHIPPED:
        assert subprocess.run(["bash", "-n", str(path)], capture_output=True).returncode == 0, path
    done = subprocess.run(
        [SHELLCHECK, "--severity=style", *map(str, SHIPPED)], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout


# `${NAME:-60}`: a number decided in bash, a second home of a value the runner's launch profile decides
# (schemas/launch.py) and the plan carries; the node reads such a value with `${NAME:?...}` instead.
NUMBER_DEFAULT = re.compile(r"\$\{[A-Za-z_][A-Za-z0-9_]*:?-[0-9]")
TEMPLATES = sorted((ROOT / "recipes" / "templates").glob("*.j2"))


def test_no_shipped_bash_defaults_a_number():
    assert TEMPLATES and SHIPPED
    found = [
        f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
        for path in (*SHIPPED, *TEMPLATES)
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if NUMBER_DEFAULT.search(line)
    ]
    assert found == [], "\n".join(found)


def test_the_rule_sees_a_numeric_default():
    assert NUMBER_DEFAULT.search('sleep "${POLL_INTERVAL:-1}"')
    assert NUMBER_DEFAULT.search("grace=${GRACE_S-15}")
    assert not NUMBER_DEFAULT.search('"${POLL_INTERVAL:?set by the node script}" ${PYTHON:-python3}')


def command_in_arithmetic(line: str) -> bool:
    """A $(...) inside ((...)) or $((...)): bash 5.2 parses it only when it is reached, and a signal's trap
    running during that parse breaks it ("unexpected EOF while looking for matching )", exit 2): a watcher
    TERMed there failed a clean node. Assign the command's output to a variable first."""
    start = line.find("((")
    while start != -1:
        depth, i = 0, start
        while i < len(line):
            depth += {"(": 1, ")": -1}.get(line[i], 0)
            if depth == 0:
                break
            if line.startswith("$(", i) and not line.startswith("$((", i):
                return True
            i += 1
        start = line.find("((", i)
    return False


def test_no_shipped_bash_runs_a_command_inside_arithmetic():
    found = [
        f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
        for path in (*SHIPPED, *TEMPLATES)
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if command_in_arithmetic(line)
    ]
    assert found == [], "\n".join(found)


def test_the_rule_sees_a_command_inside_arithmetic():
    assert command_in_arithmetic("if ((now - since >= $(_node_us 1))); then")
    assert command_in_arithmetic("deadline=$(($(_node_now_us) + 5))")
    assert not command_in_arithmetic('((${#missing[@]} == 0)) || fail "$(_node_word x)"')
    assert not command_in_arithmetic("at=$((since / 1000000)).$(printf '%06d' $((since % 1000000)))")
    assert not command_in_arithmetic("deadline=$((_NODE_NOW + grace))")
