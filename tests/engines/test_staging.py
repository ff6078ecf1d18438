"""The corpus staged by the client's own code (recipes/staging.py with AIPerf and the datasets library in
.venv-bench), on a small corpus made here under the pinned name (sim/corpus.py): AIPerf's plugin table names
the dataset, the datasets library finds it offline, make submit links exactly the hashed version for the run,
and the client's own trace model reads every row through that link, offline, without writing to the cache."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from recipes import staging
from recipes.plan import Staged
from scripts import inputs

pytestmark = pytest.mark.tools  # needs .venv-bench (`make tools`)

ROOT = Path(__file__).resolve().parents[2]
NAME = "semianalysis_cc_traces_weka_062126_256k"
READ = """
import json, os, sys
from datasets import load_dataset
from aiperf.dataset.loader.weka_trace_models import WekaTrace
rows = load_dataset(sys.argv[1], split="train")
traces = [WekaTrace.model_validate(row) for row in rows]
print(json.dumps({"traces": len(traces), "requests": sum(len(t.requests) for t in traces)}))
"""


@pytest.fixture
def made_up(tmp_path) -> Path:
    if not staging.CLIENT_PYTHON.is_file():
        message = ".venv-bench missing: run `make tools` (it holds the real AIPerf)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    cache = tmp_path / "hf-cache"
    done = subprocess.run(
        [str(staging.CLIENT_PYTHON), "-m", "sim.corpus", "--hf-cache", str(cache), "--name", NAME],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return cache


def test_the_client_stages_the_made_up_corpus_and_reads_it_offline_through_the_runs_link(made_up, tmp_path):
    said: list[str] = []
    run_dir = tmp_path / "run"
    entry = staging.stage_dataset(
        Staged("traces", "hf-dataset", str(made_up), NAME), "made-up", run_dir, said.append
    )
    assert (entry["hf_dataset"], entry["split"], entry["rows"]) == (
        "semianalysisai/cc-traces-weka-062126-256k",
        "train",
        24,
    )
    assert entry["corpus"] == "made-up" and entry["staged_with"] == "aiperf 0.13.0"
    folder = Path(entry["path"])
    assert folder.is_relative_to(made_up / "datasets") and entry["sha256"] == inputs.digest(folder)["sha256"]
    before = sorted(p.relative_to(made_up) for p in made_up.rglob("*"))
    done = subprocess.run(
        [str(staging.CLIENT_PYTHON), "-E", "-s", "-c", READ, entry["hf_dataset"]],
        env={"PATH": os.environ["PATH"], "HOME": str(tmp_path), "HF_DATASETS_OFFLINE": "1",
             "HF_HUB_OFFLINE": "1", "HF_DATASETS_CACHE": str(run_dir / "datasets-cache"),
             "HF_HOME": str(tmp_path / "elsewhere")},
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    read = json.loads(done.stdout.strip().splitlines()[-1])
    assert read["traces"] == 24 and read["requests"] > 24
    # the site's cache is read, never written: the datasets library's lock file lands in the run's folder
    assert sorted(p.relative_to(made_up) for p in made_up.rglob("*")) == before
    assert any(p.suffix == ".lock" for p in (run_dir / "datasets-cache").iterdir())


def test_a_corpus_the_client_cannot_have_stops_staging_in_its_words(made_up):
    with pytest.raises(staging.StagingError, match="semianalysisai/cc-traces-weka-062126 is not in"):
        staging.client_dataset("semianalysis_cc_traces_weka_062126", made_up, download=False, say=print)
    with pytest.raises(staging.StagingError, match="AIPerf 0.13.0 has no public dataset 'no_such_corpus'"):
        staging.client_dataset("no_such_corpus", made_up, download=False, say=print)
