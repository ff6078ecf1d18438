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
    """(variant, role) -> (environment, flags) of every SGLang engine line the config renders."""
    out = {}
    for r in render.render_config(key, render.load(key, [master])):
        for role, line in srt_export.launched(r.plan.to_json()).items():
            out[(r.plan.variant, role)] = line
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


def test_the_row_passes_inferencex_newest_validator(exported, tmp_path):
    recipe, master = exported
    verdicts = theirs(master, reference_now("configs/runners.yaml"), tmp_path)
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


def test_an_export_that_does_not_render_back_is_refused(tmp_path, capsys):
    """A KV-offload (HiCache) config: its recipe is written, but the row does not render back (an offload
    tier is not rendered from a recipe yet), so the export says it is no proposal."""
    key = "dsv4-fp4-mi355x-sglang-disagg-agentic-hicache-mtp"
    assert export.main([key, "--configs", str(reference("amd-master.yaml")), "--out", str(tmp_path)]) == 1
    captured = capsys.readouterr()
    assert "a KV offload tier is not rendered from a recipe yet" in captured.out
    assert "the exported row does not render back" in captured.out
    assert "nothing exported as a proposal" in captured.err


def test_an_export_that_loses_a_flag_is_refused(tmp_path, monkeypatch, capsys):
    """The export's own round trip can fail: a writer that drops one flag is caught, the flag named."""
    written = srt_export.variant_recipe

    def lossy(plan, workers, precision):
        recipe = written(plan, workers, precision)
        recipe["roles"]["decode"]["args"].pop("mem-fraction-static")
        return recipe

    monkeypatch.setattr(srt_export, "variant_recipe", lossy)
    monkeypatch.setenv(srt_recipe.RECIPES_ENV, "")
    assert export.main([KEY, "--configs", str(reference("amd-master.yaml")), "--out", str(tmp_path)]) == 1
    assert "the exported recipe renders back otherwise: --mem-fraction-static" in capsys.readouterr().err
