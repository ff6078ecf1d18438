"""`make export` (recipes/export.py): a config written out as an srt-slurm recipe and the InferenceX row that
points at it. The round trip renders the same launch (every engine line's environment and flags), the row
passes InferenceX's newest validator, srtctl merges the recipe into the variants it was made from, and a
changed recipe is seen in the round trip."""

from __future__ import annotations

import subprocess

import pytest
import yaml

from recipes import export, render
from recipes.outside import srt_export, srt_recipe
from tests.outside.test_srt_recipe import resolved_by_srtctl
from tests.paths import reference, reference_now
from tests.schemas.test_inferencex_validator import theirs

KEY = "dsr1-fp8-mi355x-sglang-disagg"  # InferenceX's SGLang+MoRI entry, as its August snapshot has it


def engine_lines(key: str, master) -> dict:
    """(variant, role) -> (environment, flags) of every SGLang engine line the config renders, with env.sh's
    values put in: what the node runs, whatever the order of its words."""
    out = {}
    for r in render.render_config(key, render.load(key, [master])):
        plan = r.plan.to_json()
        shell = dict(plan["env_shell"])
        for role in plan["roles"]:
            argv = list(next(s for s in role["services"] if s["name"] == "sglang")["argv"])
            env = dict(plan["env_exported"])
            if argv[0] == "env":
                argv.pop(0)
                while "=" in argv[0]:
                    name, _, value = argv.pop(0).partition("=")
                    env[name] = value
            for name, value in env.items():
                for var, known in shell.items():
                    env[name] = value = value.replace("${" + var + "}", known)
            out[(plan["variant"], role["name"])] = (env, srt_export.flags(argv[3:], ("--host",), shell, key))
    return out


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    out = tmp_path_factory.mktemp("export")
    return export.export(KEY, [reference("amd-master.yaml")], out)


def test_the_round_trip_renders_the_same_launch(exported, monkeypatch):
    monkeypatch.setenv(srt_recipe.RECIPES_ENV, "")
    recipe, master = exported
    ours = engine_lines(KEY, reference("amd-master.yaml"))
    back = engine_lines(KEY, master)
    assert set(back) == set(ours) and len(ours) == 6
    for line, (env, flags) in ours.items():
        assert back[line][0] == env, line
        assert back[line][1] == flags, line
    assert "srt-recipe" in master.read_text() and "additional-settings" not in master.read_text()


def test_a_changed_recipe_is_seen_in_the_round_trip(exported, monkeypatch):
    """The check can fail: one section's flag changed, the round trip differs there and only there."""
    monkeypatch.setenv(srt_recipe.RECIPES_ENV, "")
    recipe, master = exported
    original = recipe.read_text()
    bundle = yaml.safe_load(original)
    bundle["override_fsl8k1k_p1x4_d1x8"].setdefault("roles", {}).setdefault("decode", {}).setdefault(
        "args", {}
    )
    bundle["override_fsl8k1k_p1x4_d1x8"]["roles"]["decode"]["args"]["mem-fraction-static"] = 0.5
    recipe.write_text(yaml.safe_dump(bundle, sort_keys=False))
    try:
        back = engine_lines(KEY, master)
    finally:
        recipe.write_text(original)
    ours = engine_lines(KEY, reference("amd-master.yaml"))
    differ = [line for line in ours if back[line] != ours[line]]
    assert differ == [("fsl8k1k_p1x4_d1x8", "decode")]
    assert back[differ[0]][1]["mem-fraction-static"] == 0.5


def test_the_row_passes_inferencex_newest_validator(exported):
    recipe, master = exported
    verdicts = theirs(master, reference_now("configs/runners.yaml"))
    assert verdicts["newest"]["entries"] == {KEY: None}


@pytest.mark.tools
def test_srtctl_merges_the_recipe_into_its_variants(exported):
    recipe, _ = exported
    merged = resolved_by_srtctl(recipe)
    raw = srt_recipe.load(recipe)
    ours = {s.removeprefix("override_"): srt_recipe.variant(raw, s) for s in srt_recipe.sections(raw)}
    assert merged == ours and len(ours) == 3
    # each section, merged, is what its variant renders: the role's flags as written from its plan
    assert ours["fsl8k1k_p2xdep8_d1xdep8"]["roles"]["prefill"]["args"]["ep-size"] == 8


def test_a_vllm_config_is_refused_by_name(tmp_path, capsys):
    assert export.main(["kimik2.5-fp4-mi355x-vllm-disagg-agentic", "--out", str(tmp_path)]) == 1
    assert "only SGLang launches are exported so far" in capsys.readouterr().err


def test_make_export_prints_where_and_how_to_render_back(tmp_path):
    done = subprocess.run(
        [
            "make",
            "-s",
            "export",
            f"CONFIG={KEY}",
            f"CONFIGS={reference('amd-master.yaml')}",
            f"OUT={tmp_path}",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0].endswith("disagg-variants.yaml")
    assert f"make render CONFIG={KEY} CONFIGS=" in done.stderr
    assert list(yaml.safe_load(open(done.stdout.splitlines()[1]))) == [KEY]
