"""make parity on a config InferenceX has no known-working launch of (said up front, without InferenceX's
files, exit 3), and on a site's copy of an InferenceX entry on a runner of its own (the site's launch is
what is compared, its runner a difference like any other, never a silent pass)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from recipes import parity
from schemas import lint
from tests.paths import INFERENCEX_REF, reference

MINICPM = "minicpm-sala-bf16-h200-sglang"
QWEN = "qwen3.5-fp8-mi355x-sglang-disagg"  # InferenceX's own entry (its launch renders ours from it)
KIMI = "kimik2.5-fp4-mi355x-vllm-disagg-agentic"  # a config of ours held against PR #1924's launch
SITE, AMDS = "cluster:acme-mi355x", "cluster:mi355x-amds"  # a site's own cluster: MI355X nodes, its own label


def _no_inferencex(tmp_path: Path) -> list[str]:
    return ["--inferencex", str(tmp_path / "no-inferencex-here")]


def test_a_config_inferencex_never_ran_says_so_before_asking_for_inferencex_s_files(capsys, tmp_path):
    assert parity.main([MINICPM, *_no_inferencex(tmp_path)]) == parity.EXIT_NO_COUNTERPART == 3
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith(
        "parity: no known-working counterpart: InferenceX never ran openbmb/MiniCPM-SALA with sglang on "
        f"h200; parity has nothing to compare {MINICPM} with."
    )
    assert "What follows: " in err and "What to do instead: " in err
    assert f"make check-engines CONFIG={MINICPM}" in err and f"make submit CONFIG={MINICPM}" in err
    assert "configs/parity/inferencex.yaml" in err  # where a launch InferenceX runs later is recorded
    for said_before in ("is not a folder", "INFERENCEX=", "no InferenceX launch recorded", "Traceback"):
        assert said_before not in err
    assert "shared" not in err and "FACTS" not in err


def test_a_model_inferencex_ran_only_elsewhere_names_where_it_did_run(capsys, tmp_path):
    """Kimi-K2.5 with vLLM ran on InferenceX's MI355X runners, never on the local simulated cluster: the
    local config has no counterpart, and the message names the keys that do."""
    key = "local-sim-vllm-disagg-agentic"
    assert parity.main([key, *_no_inferencex(tmp_path)]) == parity.EXIT_NO_COUNTERPART
    err = capsys.readouterr().err
    assert "InferenceX never ran amd/Kimi-K2.5-MXFP4 with vllm on cluster:local-sim" in err
    assert "it ran it on mi355x" in err and "make parity CONFIG=kimik2.5-fp4-mi355x-vllm-disagg" in err
    assert f"make demo CONFIG={key}" in err  # a local runner's run is make demo, not make submit


def test_an_unrecorded_key_of_a_combination_inferencex_ran_says_which_launch_to_record_it_under(
    capsys, tmp_path
):
    ours = yaml.safe_load((parity.ROOT_DIR / "configs" / "amd-master.yaml").read_text(encoding="utf-8"))
    master = tmp_path / "site-master.yaml"
    key = "kimik2.5-fp4-mi355x-vllm-disagg-site"
    master.write_text(yaml.safe_dump({key: ours["kimik2.5-fp4-mi355x-vllm-disagg"]}, sort_keys=False))
    assert parity.main([key, *_no_inferencex(tmp_path), "--configs", str(master)]) == 2
    err = capsys.readouterr().err
    assert (
        f"parity: no InferenceX launch recorded for {key}: InferenceX ran amd/Kimi-K2.5-MXFP4 with vllm"
        in err
    )
    assert "kimik2.5-fp4-mi355x-vllm-disagg-agentic" in err and "configs/parity/inferencex.yaml" in err
    assert "no known-working counterpart" not in err and "is not a folder" not in err


def test_an_unknown_key_is_said_as_one_not_as_a_missing_checkout(capsys, tmp_path):
    assert parity.main(["no-such-config", *_no_inferencex(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "parity: no-such-config: no such config" in err and "is not a folder" not in err


# ---- a site's copy of an InferenceX entry, on the site's own cluster ------------------------------------


@pytest.fixture
def site_cluster(monkeypatch):
    """A site's cluster label with MI355X nodes (a copy of our MI355X runner's shape and launch profile)."""
    real_launch, real_runners = lint.lint_launch, lint.lint_runners

    def launch(path, report):
        got = real_launch(path, report)
        site = got.profiles[AMDS].model_copy(update={"aliases": []})
        return got.model_copy(update={"profiles": {**got.profiles, SITE: site}})

    def runners(path, report):
        got = real_runners(path, report)
        return got.model_copy(
            update={
                "hardware": {**got.hardware, SITE: got.hardware[AMDS]},
                "labels": {**got.labels, SITE: got.labels[AMDS]},
            }
        )

    monkeypatch.setattr(lint, "lint_launch", launch)
    monkeypatch.setattr(lint, "lint_runners", runners)


def _site_copy(tmp_path: Path, key: str, source: Path) -> Path:
    """A master file holding KEY as SOURCE has it, on the site's runner."""
    entry = yaml.safe_load(source.read_text(encoding="utf-8"))[key]
    master = tmp_path / "site-master.yaml"
    master.write_text(yaml.safe_dump({key: {**entry, "runner": SITE}}, sort_keys=False))
    return master


def _sources() -> dict:
    return {
        QWEN: reference("amd-master.yaml"),  # skips loudly without InferenceX's files (fails under CI=true)
        KIMI: parity.ROOT_DIR / "configs" / "amd-master.yaml",
    }


@pytest.mark.parametrize("key", [QWEN, KIMI])
def test_a_site_copy_in_our_configs_is_compared_on_its_runner_never_passed_as_inferencex_s(
    site_cluster, monkeypatch, capsys, tmp_path, key
):
    reference("amd_utils/models.yaml")
    master = _site_copy(tmp_path, key, _sources()[key])
    monkeypatch.setattr(lint, "default_configs", lambda: [master])  # the site's configs/*-master.yaml
    compared = parity.compare(key, None, INFERENCEX_REF)
    assert compared and all(c.plan.runner == SITE for c in compared)  # the site's launch, not InferenceX's
    for c in compared:
        [runner] = [d for d in c.found if d.item == "runner"]
        assert (runner.category, runner.ours, runner.explained_by) == ("derived", SITE, None)
        assert runner.theirs  # InferenceX's runner as its entry names it
    assert parity.main([key, "--inferencex", str(INFERENCEX_REF)]) == 1  # never a pass until reviewed
    out = capsys.readouterr().out
    first = compared[0]
    theirs = next(d.theirs for d in first.found if d.item == "runner")
    said = f"parity {key} {first.plan.variant} on {SITE} against what InferenceX's own scripts launch on "
    assert said + theirs in out
    assert f"InferenceX never ran this entry on {SITE}" in out
    assert f"runner: ours '{SITE}', InferenceX '{theirs}'" in out


def test_a_site_master_file_given_as_configs_is_held_against_inferencex_s_own_entry(
    site_cluster, capsys, tmp_path
):
    reference("amd_utils/models.yaml")
    master = _site_copy(tmp_path, QWEN, reference("amd-master.yaml"))
    [c] = parity.compare(QWEN, None, INFERENCEX_REF, master)
    assert c.plan.runner == SITE
    [runner] = [d for d in c.found if d.item == "runner"]
    assert (runner.ours, runner.theirs, runner.explained_by) == (SITE, "mi355x-disagg", None)
    assert parity.main([QWEN, "--inferencex", str(INFERENCEX_REF), "--configs", str(master)]) == 1
    said = capsys.readouterr().out
    assert f"on {SITE} against what InferenceX's own scripts launch on mi355x-disagg" in said


def test_inferencex_s_own_entry_on_its_own_runner_has_no_runner_difference():
    reference("amd_utils/models.yaml")
    [c] = parity.compare(QWEN, None, INFERENCEX_REF, reference("amd-master.yaml"))
    assert c.plan.runner == AMDS and not [d for d in c.found if d.item == "runner"]


def test_a_site_variant_inferencex_s_entry_has_no_point_for_is_said_as_never_compared(
    site_cluster, monkeypatch, capsys, tmp_path
):
    reference("amd_utils/models.yaml")
    entry = yaml.safe_load(reference("amd-master.yaml").read_text(encoding="utf-8"))[QWEN]
    [group] = entry["scenarios"]["fixed-seq-len"]
    point = group["search-space"][0]
    wider = {**point, "prefill": {**point["prefill"], "tp": 8}}  # a point of the site's own
    group["search-space"] = [point, wider]
    master = tmp_path / "site-master.yaml"
    master.write_text(yaml.safe_dump({QWEN: {**entry, "runner": SITE}}, sort_keys=False))
    monkeypatch.setattr(lint, "default_configs", lambda: [master])
    # the copy's own point is said as never compared; the other is compared (its runner unexplained: exit 1)
    assert parity.main([QWEN, "--inferencex", str(INFERENCEX_REF)]) == parity.EXIT_UNEXPLAINED
    out = capsys.readouterr().out
    never = f"parity {QWEN} fsl8k1k_p1x8_d1x8: never compared: InferenceX's matrix for {QWEN} has no row"
    assert never in out
    assert "prefill.tp=8" in out and "2 variants: 1 compared" in out
