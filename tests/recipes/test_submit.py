"""make submit: the exact sbatch command, a unique job name per run, a self-contained run folder."""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path

import pytest

from recipes import accuracy, nodesetup, staging, submit
from recipes.render import render_config

LOCAL = "local-sim-vllm-disagg-agentic"


@pytest.fixture
def rendered(configs):
    return render_config(LOCAL, configs)[0]


@pytest.fixture
def fake_sbatch(tmp_path: Path):
    """sbatch on PATH that records its argv and answers like `sbatch --parsable` (or fails)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    record = tmp_path / "sbatch.json"
    script = bin_dir / "sbatch"
    script.write_text(
        "#!/usr/bin/env python3\nimport json, os, sys\n"
        "seen = {'argv': sys.argv[1:], 'marker': os.environ.get('DEMO_MARKER'),\n"
        "        'run_dir': os.environ.get('RUN_DIR'), 'recipe_dir': os.environ.get('RECIPE_DIR')}\n"
        f"json.dump(seen, open({str(record)!r}, 'w'))\n"
        "if os.environ.get('FAKE_SBATCH_FAIL'):\n"
        "    sys.exit('sbatch: error: Invalid partition name specified')\n"
        "print('4242;cluster')\n"
    )
    script.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "DEMO_MARKER": "x"}
    return env, record


def test_run_ids_are_unique_so_job_names_never_collide():
    assert len({submit.new_run_id() for _ in range(50)}) == 50


def test_dry_run_prints_the_exact_command_and_submits_nothing(capsys, tmp_path):
    assert (
        submit.main([LOCAL, "--variant", "agentic_p2x8_d1x8_conc4", "--dry-run", "--out", str(tmp_path)]) == 0
    )
    command, *notes = capsys.readouterr().out.splitlines()
    argv = shlex.split(command)
    assert all(n.startswith("# ") for n in notes)
    corpus = "AIPerf --public-dataset semianalysis_cc_traces_weka_062126_256k"
    assert any(corpus in n and "never a submission" in n for n in notes), notes
    assert argv[0] == "env" and argv[1].startswith("RUN_DIR=") and argv[2].startswith("RECIPE_DIR=")
    assert argv[3:5] == ["sbatch", "--parsable"]
    assert argv[5].startswith(f"--job-name={LOCAL}_agentic_p2x8_d1x8_conc4-")
    assert argv[-1].endswith("/recipe/job.sbatch")
    assert not (tmp_path / "runs").exists()


def test_submit_snapshots_everything_the_job_reads(rendered, tmp_path, fake_sbatch):
    env, record = fake_sbatch
    job = submit.submit(rendered, tmp_path, env=env)
    assert job.job_id == "4242"
    recipe = job.run_dir / "recipe"
    for name in (
        "job.sbatch",
        "server_vllm.sh",
        "env.sh",
        "plan.json",
        "scripts/sync.py",
        "scripts/lib/node.sh",
    ):
        assert (recipe / name).is_file(), name
    assert (recipe / "server_vllm.sh").read_text() == rendered.files["server_vllm.sh"]
    lock = json.loads((job.run_dir / "lock.json").read_text())
    assert lock["components"] == {
        "vllm": "0.33.0",
        "mooncake": "as in vllm/vllm-openai-rocm:v0.33.0",
        "mooncake-protocol": "tcp",
        "lmcache": "0.5.6",
        "pd-proxy": "0.1.0",
        "aiperf": "0.13.0",
    }
    assert len(lock["config_sha256"]) == len(lock["rendered_sha256"]) == 64
    sent = json.loads(record.read_text())
    assert sent["marker"] == "x"  # the job inherits the environment it was given
    # the paths travel in sbatch's environment (--export=ALL), never in --export's comma list
    assert "--export=ALL" in sent["argv"] and (sent["run_dir"], sent["recipe_dir"]) == (
        str(job.run_dir),
        str(recipe),
    )
    assert f"--job-name={job.job_name}" in sent["argv"]


def test_sbatch_refusal_is_reported_with_its_message(rendered, tmp_path, fake_sbatch):
    env, _ = fake_sbatch
    with pytest.raises(submit.SubmitError, match="Invalid partition name"):
        submit.submit(rendered, tmp_path, env={**env, "FAKE_SBATCH_FAIL": "1"})


def test_missing_sbatch_says_how_to_get_a_cluster(rendered, tmp_path):
    with pytest.raises(submit.SubmitError, match="make cluster-up"):
        submit.submit(rendered, tmp_path, env={"PATH": str(tmp_path)})


def test_a_recorded_known_issue_workaround_reaches_the_lock_file(configs, tmp_path, fake_sbatch):
    env, _ = fake_sbatch
    rendered = render_config("local-sim-sglang-disagg", configs)[0]
    job = submit.submit(rendered, tmp_path, env=env)
    lock = json.loads((job.run_dir / "lock.json").read_text())
    assert lock["mode"] == "sweep"
    (w,) = lock["workarounds"]
    assert (w["issue"], w["workaround"], w["changes-performance"]) == (
        "minicpm-sala-kv-indptr",
        "minicpm-flashattn",
        True,
    )
    assert (
        w["settings"] == "ATTENTION_BACKEND=minicpm_flashattn instead of ATTENTION_BACKEND=minicpm_flashinfer"
    )
    plain_run = submit.submit(render_config(LOCAL, configs)[0], tmp_path, env=env).run_dir
    plain = json.loads((plain_run / "lock.json").read_text())
    assert plain["workarounds"] == []


def test_submit_copies_only_what_the_plan_ships(configs, tmp_path, fake_sbatch, monkeypatch, staged_image):
    """A real cluster's run folder holds no simulator trace set; our proxy only where it is the router; the
    node setup's lock and wheels where the runner has one (tests/recipes/test_nodesetup.py)."""
    env, _ = fake_sbatch
    monkeypatch.setattr(
        nodesetup, "wheelhouse", lambda lock, python, platform, dest, **kw: dest.mkdir(exist_ok=True) or []
    )
    setup = {"setup", "wheelhouse", "evals"}  # evals: the graded eval's staged questions, not shipped
    staged = {"sha256": "0" * 64, "files": {}, "bytes": 0}  # the site's trace set: test_staging below
    monkeypatch.setattr(staging.inputs, "digest", lambda path: staged)
    # the published GSM8K set is a download where you submit (tests/recipes/test_accuracy.py stages the
    # made-up one for real): made up here too
    monkeypatch.setattr(
        staging, "stage_eval_set", lambda s, recipe, say: accuracy.write_made_up_set(recipe / s.path)
    )
    keys = (LOCAL, "kimik2.5-fp4-mi355x-vllm-disagg-agentic", "kimik2.5-fp4-mi355x-vllm-disagg")
    rendered_configs = {
        (r.plan.config_key, r.plan.variant): r for k in keys for r in render_config(k, configs)
    }
    for key, variant, expected in (
        (LOCAL, "agentic_p2x8_d1x8_conc4", {"scripts", "proxy", "traces", "evals"}),
        (LOCAL, "agentic_p2x8_d1x8_vllm-router_conc4", {"scripts", "traces", "evals"}),
        (
            "kimik2.5-fp4-mi355x-vllm-disagg-agentic",
            "agentic_p1x8_d1x8_conc8",
            {"scripts", "proxy", "setup", "wheelhouse"},
        ),
        ("kimik2.5-fp4-mi355x-vllm-disagg", "fsl8k1k_p2x8_d2x8", {"scripts", *setup}),
    ):
        r = rendered_configs[(key, variant)]
        assert {name for name, _ in r.plan.shipped} == expected - setup, (key, variant)
        recipe = submit.submit(r, tmp_path / variant, env=env).run_dir / "recipe"
        assert {p.name for p in recipe.iterdir() if p.is_dir()} == expected, (key, variant)


def test_staging_hashes_the_corpus_into_the_lock_and_links_it_for_the_run_or_stops_naming_it(
    configs, tmp_path, fake_sbatch, monkeypatch, staged_image
):
    """Nothing is fetched on a compute node: the client's own staging puts the pinned public dataset in the
    site's cache at submission (tests/recipes/conftest.py stands in for it here; tests/engines/
    test_staging.py runs the real one); lock.json records every file's SHA-256, which rank 0 checks at
    preflight, and the run's datasets-cache folder links exactly that version. A corpus the client cannot
    have stops the submission."""
    env, _ = fake_sbatch
    # The wheels are tests/recipes/test_nodesetup.py's (a real download: ~90 s even from pip's cache).
    monkeypatch.setattr(
        nodesetup, "wheelhouse", lambda lock, python, platform, dest, **kw: dest.mkdir(exist_ok=True) or []
    )
    seed = render_config("kimik2.5-fp4-mi355x-vllm-disagg-agentic", configs)[0]
    run_dir = submit.submit(seed, tmp_path / "staged", env=env).run_dir
    locked = json.loads((run_dir / "lock.json").read_text())
    assert locked["image_staging"] == staged_image  # the id every node's host check holds its runtime to
    traces = locked["inputs"]["traces"]
    name = "semianalysis_cc_traces_weka_with_subagents_060826_256k"
    assert (traces["kind"], traces["dataset"], traces["corpus"]) == ("hf-dataset", name, "published")
    assert set(traces["files"]) == {f"{name}-train.arrow"} and len(traces["sha256"]) == 64
    link = run_dir / "datasets-cache" / Path(*Path(traces["path"]).parts[-4:])
    assert link.is_symlink() and link.resolve() == Path(traces["path"]).resolve()

    def unavailable(name, cache, *, download, say):
        raise staging.StagingError(f"staged input: corpus {name}: ConnectionError: no route to the Hub")

    monkeypatch.setattr(staging, "client_dataset", unavailable)
    with pytest.raises(submit.SubmitError, match="corpus semianalysis_cc_traces_weka_.*: ConnectionError"):
        submit.submit(seed, tmp_path / "missing", env=env)
    assert not any((tmp_path / "missing").rglob("lock.json"))  # no run folder without its inputs


def test_a_made_up_corpus_is_refused_where_the_runner_replays_the_pinned_one(
    configs, tmp_path, fake_sbatch, monkeypatch
):
    """sim/corpus.py's stand-in under the pinned name in a real runner's cache would pass for the published
    corpus: refused, and so is the published one on a runner that labels its runs made up."""
    env, _ = fake_sbatch
    monkeypatch.setattr(
        nodesetup, "wheelhouse", lambda lock, python, platform, dest, **kw: dest.mkdir(exist_ok=True) or []
    )
    folder = tmp_path / "hf" / "datasets" / "semianalysisai___x" / "default" / "0.0.0" / ("1" * 40)
    folder.mkdir(parents=True)
    (folder / "x-train.arrow").write_bytes(b"rows")
    (folder / staging.MADE_UP_MARKER).write_text("made up\n")
    found = {"name": "x", "hf_dataset": "semianalysisai/x", "split": "train", "folder": str(folder),
             "rows": 1, "aiperf": "0.13.0"}  # fmt: skip
    monkeypatch.setattr(staging, "client_dataset", lambda *a, **kw: found)
    seed = render_config("kimik2.5-fp4-mi355x-vllm-disagg-agentic", configs)[0]
    with pytest.raises(
        submit.SubmitError, match="holds a corpus made up by sim/corpus.py .* benchmark.corpus is 'pinned'"
    ):
        submit.submit(seed, tmp_path / "out", env=env)
    (folder / staging.MADE_UP_MARKER).unlink()
    local = render_config(LOCAL, configs)[0]
    with pytest.raises(
        submit.SubmitError, match="holds the published semianalysisai/x .* benchmark.corpus is 'made-up'"
    ):
        submit.submit(local, tmp_path / "out", env=env)
