"""Every shell file the run folder ships (scripts/**/*.sh) is shellcheck- and bash -n-clean, as the
rendered ones are (tests/recipes/test_render.py)."""

from __future__ import annotations

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
