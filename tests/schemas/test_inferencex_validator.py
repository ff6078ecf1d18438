"""`make lint PROFILE=inferencex` gives InferenceX's own verdict, entry by entry: InferenceX's validator
(infx/matrix/validation.py, newest 07db303e, and the one before it, ba3e5976, which still took CONFIG_FILE)
runs on the same files as our profiles, and each entry is accepted by both or refused by both.

The files are InferenceX's newest amd-master.yaml and runners.yaml, and mutated copies of a few of their
entries and of the runners file, each carrying one defect a rule exists for: every check here is shown
refusing something, on both sides.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from tests.paths import INFERENCEX_NOW, reference_now

from .conftest import run_lint, write

# InferenceX's validator, imported from its own tree; the older one from a saved copy where the corpus holds
# one. Prints, per version, each entry's verdict (None: accepted, else the first line of the refusal) and the
# runners file's (UNJUDGED where infx.clusters, which judges it, is not the real module).
_RUN_THEIRS = """
import importlib.util, json, sys
import yaml
from infx import clusters
from infx.matrix import validation as newest
versions = [("newest", newest)]
if sys.argv[3]:
    spec = importlib.util.spec_from_file_location("validation_ba3e5976", sys.argv[3])
    older = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(older)
    versions.append(("older", older))
master = yaml.safe_load(open(sys.argv[1]))
runners = yaml.safe_load(open(sys.argv[2]))
def first(exc):
    lines = [l.strip() for l in str(exc).splitlines() if l.strip()]
    return " | ".join(lines[1:3] or lines[:1])
out = {}
for name, v in versions:
    entries = {}
    for key, entry in master.items():
        try:
            v.validate_master_config({key: entry})
            entries[key] = None
        except Exception as exc:
            entries[key] = first(exc)
    verdict = "UNJUDGED"
    if not getattr(clusters, "STAND_IN", False):
        try:
            v.validate_runner_config(runners)
            verdict = None
        except Exception as exc:
            verdict = first(exc)
    out[name] = {"entries": entries, "runners": verdict}
print(json.dumps(out))
"""

# The validator imports infx.clusters, which the corpus may not hold (its copy of InferenceX has
# infx/matrix/validation.py alone). An entry's verdict needs one value of it, the runner-label prefix
# agentic entries must carry; InferenceX's configuration procedures state it (`cluster:<id>`) and the test
# below holds the stand-in to them. The runners file is judged by the real module only.
_CLUSTERS_STAND_IN = """
STAND_IN = True
CLUSTER_LABEL_PREFIX = "cluster:"


class RunnerInventory:
    @classmethod
    def model_validate(cls, data):
        raise RuntimeError("infx.clusters is a stand-in here: the runners file is not judged")
"""

OUR_PROFILE = {"newest": "inferencex", "older": "inferencex-legacy"}
OLDER_COPY = INFERENCEX_NOW / "_alt_versions/infx/matrix/validation.ba3e5976.py"
CLUSTERS = INFERENCEX_NOW / "infx/clusters/__init__.py"


def theirs(master, runners, stand_in_dir: Path) -> dict:
    """InferenceX's verdicts on a master and a runners file: the newest validator always (the corpus holds
    it), the older one where its saved copy is present, the runners file where infx.clusters is."""
    reference_now("infx/matrix/validation.py")
    path = [str(INFERENCEX_NOW)]
    if not CLUSTERS.exists():
        stand_in = Path(stand_in_dir)
        (stand_in / "infx" / "clusters").mkdir(parents=True, exist_ok=True)
        (stand_in / "infx" / "clusters" / "__init__.py").write_text(_CLUSTERS_STAND_IN)
        path.append(str(stand_in))  # infx is a namespace package: both trees join
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            _RUN_THEIRS,
            str(master),
            str(runners),
            str(OLDER_COPY) if OLDER_COPY.exists() else "",
        ],
        cwd=INFERENCEX_NOW,
        env={"PYTHONPATH": os.pathsep.join(path), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def _needs(verdicts: dict, version: str) -> dict:
    """One validator's verdicts, or a skip naming what the corpus lacks (never silent: pytest's summary)."""
    if version not in verdicts:
        pytest.skip(
            f"InferenceX's validator ba3e5976 is not in the reference corpus ({OLDER_COPY}): our "
            "inferencex-legacy profile is compared with nothing here; its rules are tested in "
            "test_inferencex.py"
        )
    return verdicts[version]


def ours(profile: str, master, runners) -> tuple[set[str], list[str]]:
    """(config keys with a finding, runners findings) under our profile."""
    _, out, _ = run_lint("--profile", profile, "--runners", runners, master)
    known = sorted(yaml.safe_load(master.read_text()), key=len, reverse=True)  # keys hold '.' (qwen3.5)
    keys, runner_lines = set(), []
    for line in out.splitlines():
        file, _, rest = line.partition(": ")
        if file.rsplit(":", 1)[0] == str(runners):
            runner_lines.append(line)
            continue
        path = rest.split(": ", 1)[0]
        keys.add(next(k for k in known if path == k or path.startswith(k + ".") or path.startswith(k + "[")))
    return keys, runner_lines


# ---------------------------------------------------------------- mutations, one defect each

FIXED = "dsr1-fp4-mi355x-sglang-disagg"  # multinode fixed-seq-len, CONFIG_FILE on prefill
AGENTIC = "dsv4-fp4-mi355x-atom-disagg-agentic-lmcache-dspark"  # multinode agentic, CONFIG_FILE on prefill
SINGLE = "dsr1-fp4-mi355x-sglang"  # single-node, srt-recipe on its points


def _points(entry: dict) -> list[dict]:
    return [p for groups in entry["scenarios"].values() for g in groups for p in g["search-space"]]


def _move_config_file(entry: dict) -> None:
    """The newer form: CONFIG_FILE's value as the point's srt-recipe."""
    for point in _points(entry):
        for role in ("prefill", "decode"):
            settings = point[role].get("additional-settings") or []
            for item in list(settings):
                if item.startswith("CONFIG_FILE="):
                    point["srt-recipe"] = item.partition("=")[2]
                    settings.remove(item)


def _both_forms(entry: dict) -> None:
    _points(entry)[0]["srt-recipe"] = "recipes/x.yaml:override_a"


def _worker_on_disagg(entry: dict) -> None:
    _points(entry)[0].update(
        {"worker": {"num-worker": 1, "tp": 8, "ep": 1, "dp-attn": False}, "num-nodes": 2}
    )


def _aggregate_with_roles(entry: dict) -> None:
    entry["disagg"] = False
    entry.pop("kv-p2p-transfer", None)


def _runner_not_a_cluster(entry: dict) -> None:
    entry["runner"] = "mi355x"


def _pp_on_multinode_agentic(entry: dict) -> None:
    _points(entry)[0]["pp"] = 2


def _require_power(value) -> Callable[[dict], None]:
    def mutate(entry: dict) -> None:
        entry["scenarios"]["fixed-seq-len"][0]["require-power"] = value

    return mutate


def _eval_recipe(entry: dict) -> None:
    _points(entry)[0]["eval-srt-recipe"] = "recipes/eval.yaml"


def _prefill_on_single_node(entry: dict) -> None:
    _points(entry)[0]["prefill"] = {"num-worker": 1, "tp": 8, "ep": 1, "dp-attn": False}


def _empty_srt_recipe(entry: dict) -> None:
    _points(entry)[0]["srt-recipe"] = ""


def _transfer_twice(entry: dict) -> None:
    _points(entry)[0]["kv-p2p-transfer"] = "mooncake"


def _worker_without_ep(entry: dict) -> None:
    _move_config_file(entry)
    point = _points(entry)[0]
    entry.update(disagg=False)
    entry.pop("kv-p2p-transfer", None)
    point["worker"] = {"num-worker": 1, "tp": 8, "dp-attn": False}
    point["num-nodes"] = 1
    del point["prefill"], point["decode"]


MUTATIONS: dict[str, tuple[str, Callable[[dict], None]]] = {
    "srt-recipe-form": (FIXED, _move_config_file),
    "srt-recipe-form-agentic": (AGENTIC, _move_config_file),
    "both-forms": (FIXED, _both_forms),
    "worker-on-disagg": (FIXED, _worker_on_disagg),
    "aggregate-with-roles": (FIXED, _aggregate_with_roles),
    "runner-not-a-cluster": (AGENTIC, _runner_not_a_cluster),
    "pp-on-multinode-agentic": (AGENTIC, _pp_on_multinode_agentic),
    "require-power-true": (SINGLE, _require_power(True)),
    "require-power-multinode": (FIXED, _require_power(True)),
    "eval-srt-recipe": (SINGLE, _eval_recipe),
    "eval-srt-recipe-multinode": (FIXED, _eval_recipe),
    "require-power-string": (SINGLE, _require_power("yes")),
    "prefill-on-single-node": (SINGLE, _prefill_on_single_node),
    "empty-srt-recipe": (SINGLE, _empty_srt_recipe),
    "transfer-twice": (FIXED, _transfer_twice),
    "aggregate-worker-without-ep": (FIXED, _worker_without_ep),
}


def _runners_mutations(runners: dict) -> dict[str, dict]:
    out = {"as-it-is": runners}
    cut = copy.deepcopy(runners)
    del cut["clusters"]
    out["no-clusters"] = cut
    extra = copy.deepcopy(runners)
    extra["clusters"]["unlabelled"] = copy.deepcopy(next(iter(extra["clusters"].values())))
    out["cluster-without-label"] = extra
    shared = copy.deepcopy(runners)
    labels = [k for k in shared["labels"] if k.startswith("cluster:")]
    shared["labels"][labels[1]].append(shared["labels"][labels[0]][0])
    out["runner-in-two-clusters"] = shared
    hardware = copy.deepcopy(runners)
    hardware["hardware"] = {"mi355x": {"gpus-per-node": 8}}
    out["with-hardware"] = hardware
    orphan = copy.deepcopy(runners)
    orphan["labels"]["extra-label"] = ["a-runner-of-no-cluster"]
    out["runner-of-no-cluster"] = orphan
    return out


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("inferencex-validator")
    master = yaml.safe_load(reference_now("configs/amd-master.yaml").read_text())
    for name, (base, mutate) in MUTATIONS.items():
        entry = copy.deepcopy(master[base])
        mutate(entry)
        master[f"{base}--{name}"] = entry
    runners = yaml.safe_load(reference_now("configs/runners.yaml").read_text())
    master_file = write(folder, "amd-master.yaml", yaml.safe_dump(master, sort_keys=False))
    runner_files = {
        name: write(folder, f"runners-{name}.yaml", yaml.safe_dump(data, sort_keys=False))
        for name, data in _runners_mutations(runners).items()
    }
    return master_file, runner_files


@pytest.fixture(scope="module")
def verdicts(files):
    master, runner_files = files
    return {name: theirs(master, path, master.parent) for name, path in runner_files.items()}


@pytest.mark.parametrize("version", ["newest", "older"])
def test_each_entry_has_inferencex_verdict(files, verdicts, version):
    master, runner_files = files
    their = _needs(verdicts["as-it-is"], version)["entries"]
    refused = {key for key, why in their.items() if why}
    ours_refused, _ = ours(OUR_PROFILE[version], master, runner_files["as-it-is"])
    differ = {key: their[key] or "accepted by InferenceX" for key in refused ^ ours_refused}
    assert not differ, json.dumps(differ, indent=1)
    # The check can fail: each side refuses entries, and the mutations are what they are meant to be.
    assert {f"{FIXED}--worker-on-disagg", f"{AGENTIC}--runner-not-a-cluster"} <= refused
    accepted = {"newest": f"{FIXED}--srt-recipe-form", "older": FIXED}[version]  # each its own recipe form
    assert accepted not in refused


def test_which_validator_refuses_which(verdicts):
    """The recipe of a multinode point: the older validator takes it only as a worker's CONFIG_FILE, the
    newest only as the point's srt-recipe."""
    newest, older = (_needs(verdicts["as-it-is"], v)["entries"] for v in ("newest", "older"))
    config_file = {
        key for key, why in newest.items() if why and "Recipe selection belongs in srt-recipe" in why
    }
    assert FIXED in config_file and AGENTIC in config_file
    assert FIXED in config_file and not {key for key in config_file if "--" not in key and older[key]}
    assert newest[f"{FIXED}--srt-recipe-form"] is None
    assert "search-space.0.srt-recipe" in older[f"{FIXED}--srt-recipe-form"]


def test_newest_master_as_inferencex_reads_it(files, verdicts):
    """The issue's count: of the newest amd-master's 53 entries, the newest validator refuses the 12 whose
    recipe is still a CONFIG_FILE and our inferencex profile refuses the same 12, for the same reason."""
    master, runner_files = files
    real = yaml.safe_load(reference_now("configs/amd-master.yaml").read_text())
    their = {k: v for k, v in verdicts["as-it-is"]["newest"]["entries"].items() if k in real}
    assert (len(their), sum(v is not None for v in their.values())) == (53, 12)
    _, out, _ = run_lint("--profile", "inferencex", "--runners", runner_files["as-it-is"], master)
    reasons = {line.split(": ", 2)[2] for line in out.splitlines() if "--" not in line.split(": ")[1]}
    assert all("InferenceX's validator since 07db303e takes a point's recipe only" in r for r in reasons)


RUNNERS_MUTATIONS = [
    "as-it-is",
    "no-clusters",
    "cluster-without-label",
    "runner-in-two-clusters",
    "with-hardware",
    "runner-of-no-cluster",
]


@pytest.mark.parametrize("mutation", RUNNERS_MUTATIONS)
def test_our_profile_refuses_each_defective_runners_file(files, mutation):
    master, runner_files = files
    _, lines = ours("inferencex", master, runner_files[mutation])
    assert (mutation == "as-it-is") == (not lines), lines


@pytest.mark.parametrize("mutation", RUNNERS_MUTATIONS)
def test_runners_have_inferencex_verdict(files, verdicts, mutation):
    """Where infx.clusters is in the corpus, InferenceX's validators judge each runners file as our profile
    does (a skip says when they could not)."""
    master, runner_files = files
    their = {verdicts[mutation][v]["runners"] for v in ("newest", "older") if v in verdicts[mutation]}
    if their == {"UNJUDGED"}:
        pytest.skip(
            f"infx.clusters is not in the reference corpus ({CLUSTERS}): InferenceX's validator did not "
            "judge the runners file; test_our_profile_refuses_each_defective_runners_file stands alone"
        )
    _, lines = ours("inferencex", master, runner_files[mutation])
    assert len(their) == 1, their  # both validators agree on runners files
    assert (their.pop() is None) == (not lines), lines


def test_the_stand_in_prefix_is_inferencex_documented_label():
    """Where infx.clusters is absent the entries are judged with a stand-in of its label prefix: held here
    to InferenceX's own procedures and runners file, so a changed prefix fails this test, not the rest."""
    procedures = reference_now("docs/configuration-procedures.md").read_text()
    assert "Agentic configs require an exact `cluster:<name>` runner." in procedures
    runners = yaml.safe_load(reference_now("configs/runners.yaml").read_text())
    assert any(label.startswith("cluster:") for label in runners["labels"])
    assert 'CLUSTER_LABEL_PREFIX = "cluster:"' in _CLUSTERS_STAND_IN
