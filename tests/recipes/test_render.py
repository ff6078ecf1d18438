"""Rendered files: deterministic, shellcheck- and bash -n-clean, and the golden seed recipe."""

from __future__ import annotations

import dataclasses
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


HOSTILE_KEYS = ["x$(touch F)", "x`id`", 'x";id;"', "a,BASH_ENV=F,X=", "x${IFS}y", "k'q'x", "x y"]


@pytest.mark.parametrize("key", HOSTILE_KEYS)
def test_a_hostile_config_key_reaches_bash_only_quoted(rendered, tmp_path, key):
    """Lint refuses such keys; past lint on purpose, the rendered job still runs nothing of them."""
    from recipes.render import render_plan

    plan = dataclasses.replace(next(iter(rendered.values())).plan, config_key=key)
    plan = dataclasses.replace(
        plan, benchmarks=tuple(dataclasses.replace(b, result=f"{key}_r.json") for b in plan.benchmarks)
    )
    files = render_plan(plan).files
    echo = next(line for line in files["job.sbatch"].splitlines() if line.startswith('echo "job'))
    probe = f"cd {tmp_path}; SLURM_JOB_ID=1 NODE_NAMES=n LEADER_ADDR=l; {echo}"
    done = subprocess.run(["bash", "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout == f"job 1: {key} {plan.variant} on n (leader l)\n"
    script = files[plan.script]
    at = script.index("collect_result ")
    call = script[at : script.index("\n", script.index("\n", at) + 1)]
    probe = f"cd {tmp_path}; collect_result() {{ printf '%s\\n' \"$2\"; }}; RESULTS_DIR=/r; {call}"
    done = subprocess.run(["bash", "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout == f"/r/{key}_r.json\n"
    assert list(tmp_path.iterdir()) == []  # nothing was created: nothing ran


@pytest.mark.parametrize("key", ["x\ntouch F", "x\r", "x\x1b[2J"])
def test_a_config_key_with_a_line_break_is_refused_at_render(rendered, key):
    from recipes.render import render_plan
    from recipes.words import UnsafePlacement

    plan = dataclasses.replace(next(iter(rendered.values())).plan, config_key=key)
    with pytest.raises(UnsafePlacement, match="control character or line break"):
        render_plan(plan)


def test_an_unfiltered_value_that_is_not_a_bare_word_is_refused():
    from recipes.words import UnsafePlacement, finalize

    assert finalize(8000) == "8000" and finalize("fsl8k1k_p2x8_d2x8") == "fsl8k1k_p2x8_d2x8"
    for bad in ("a b", "$(id)", "x;y", "'", "\n"):
        with pytest.raises(UnsafePlacement):
            finalize(bad)


@pytest.mark.parametrize("names", [("..", "x"), ("a/../../b",), ("/abs",), ("",), ("ok", "../..")])
def test_folder_names_cannot_leave_the_output_folder(tmp_path, names):
    from recipes.render import OutsideOut, inside

    with pytest.raises(OutsideOut):
        inside(tmp_path, *names)
    assert inside(tmp_path, "key", "variant") == (tmp_path / "key" / "variant").resolve()
