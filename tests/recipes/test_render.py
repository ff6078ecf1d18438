"""Rendered files: deterministic, shellcheck- and bash -n-clean, and the golden seed recipe."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from recipes.render import main as render_main

from .golden import GOLDEN, GOLDEN_CONFIGS

SHELLCHECK = shutil.which("shellcheck") or str(Path(sys.executable).parent / "shellcheck")


def shell_files(rendered):
    return [
        (key, name, text)
        for key, r in rendered.items()
        for name, text in r.files.items()
        if name != "plan.json"
    ]


def test_rendering_twice_is_byte_identical(rendered, configs, tmp_path):
    assert render_main(["--out", str(tmp_path / "a")]) == 0
    assert render_main(["--out", str(tmp_path / "b")]) == 0
    a = {p.relative_to(tmp_path / "a"): p.read_bytes() for p in (tmp_path / "a").rglob("*") if p.is_file()}
    b = {p.relative_to(tmp_path / "b"): p.read_bytes() for p in (tmp_path / "b").rglob("*") if p.is_file()}
    assert a == b and len(a) == 4 * len(rendered)


def test_every_rendered_script_is_shellcheck_and_bash_n_clean(rendered, tmp_path):
    paths = []
    for (key, variant), name, text in shell_files(rendered):
        path = tmp_path / key / variant / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        paths.append(str(path))
        assert subprocess.run(["bash", "-n", str(path)], capture_output=True).returncode == 0, path
    sc = subprocess.run([SHELLCHECK, "-x", "--severity=style", *paths], capture_output=True, text=True)
    assert sc.returncode == 0, sc.stdout


def test_plan_json_is_the_plan(rendered):
    for r in rendered.values():
        data = json.loads(r.files["plan.json"])
        assert data["config_key"] == r.plan.config_key and len(data["nodes"]) == r.plan.slurm.nodes


def test_env_sh_only_sets_variables(rendered):
    for r in rendered.values():
        env = r.files["env.sh"]
        probe = f"set -u; before=$(compgen -v | sort); source /dev/stdin <<'EOF'\n{env}\nEOF\necho ok"
        done = subprocess.run(["bash", "-c", probe], capture_output=True, text=True)
        assert done.returncode == 0 and done.stdout == "ok\n" and done.stderr == ""


@pytest.mark.parametrize("key", GOLDEN_CONFIGS)
def test_golden_files_match(rendered, key):
    got = {(v, name): text for (k, v), r in rendered.items() if k == key for name, text in r.files.items()}
    want = {(p.parent.name, p.name): p.read_text() for p in (GOLDEN / key).glob("*/*")}
    assert got.keys() == want.keys(), "variants changed: run `make golden` and review the diff"
    for k in got:
        assert got[k] == want[k], (
            f"{key}/{k[0]}/{k[1]} differs from tests/golden: `make golden`, review the diff"
        )


def test_render_rejects_unknown_config_with_a_close_match(capsys):
    assert render_main(["kimik2.5-fp4-mi355x-vllm-disagg-agentik"]) == 1
    assert "did you mean 'kimik2.5-fp4-mi355x-vllm-disagg-agentic'" in capsys.readouterr().out
