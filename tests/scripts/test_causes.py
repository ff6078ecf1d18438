"""scripts/causes.json and scripts/causes.py: every recorded line classifies as its cause, the registry is
read strictly, and every cause id the runtime writes or the catalog expects is the registry's."""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys

import pytest
from conftest import SCRIPTS

from scripts import causes
from scripts.failures import CLASSES

REGISTRY = json.loads((SCRIPTS / "causes.json").read_text())
LOADED = causes.load()
IDS = {c.id for c in LOADED}


@pytest.mark.parametrize(
    "cause, example",
    [(c, e) for c in LOADED for e in c.examples],
    ids=lambda v: v.id if isinstance(v, causes.Cause) else v["source"][:40],
)
def test_each_recorded_line_classifies_as_its_cause(cause, example):
    got = causes.classify(
        LOADED,
        text=example["text"],
        code=example["code"],
        step=example.get("step", ""),
        service=example.get("service", ""),
    )
    assert got.id == cause.id, (example, got)
    assert got.detail and got.detail.isprintable() and len(got.detail) <= causes.DETAIL_LIMIT


def test_every_cause_but_unknown_has_a_signature_and_a_blame_the_ledger_knows():
    assert all(c.signatures for c in LOADED[:-1])
    assert {c.blame for c in LOADED} <= set(causes.BLAMES)
    # the node's fault: what `make submit` may exclude a node for
    assert {c.id for c in LOADED if c.blame == "node"} == {
        "gpu-not-drained",
        "gpu-unavailable",
        "disk-full",
        "container-leftover",
        "nic-not-ready",
        "leftover-process",
        "rdma-retry-exceeded",  # one NIC's fault: every transfer through it fails (sglang#29127)
        "image-not-staged",  # its runtime lacks the job's image (preloaded), or holds another build
        "rdma-userspace-missing",  # a host RDMA library or verbs device the runner names is not there
    }


def test_the_failure_catalog_expects_causes_of_the_registry():
    """Every class `make bench-failfast` injects and recipe pages document names the cause it is given."""
    for fc in CLASSES:
        assert fc.cause in IDS, f"{fc.name}: cause {fc.cause!r} is not in scripts/causes.json"


def test_cause_ids_written_by_bash_are_the_registry_s():
    """container.sh runs without Python on the host: it writes its ids literally."""
    text = (SCRIPTS / "container.sh").read_text()
    written = set(re.findall(r"write_outcome \S+ ([a-z][a-z-]+) ", text))
    assert written == {"container-leftover", "container-failed", "nic-not-ready", "rdma-userspace-missing"}
    assert written <= IDS


def test_details_are_one_bounded_line_whatever_the_log_holds():
    hostile = "OSError: [Errno 98] Address already in use \x1b[2J\x07" + "x" * 5000
    got = causes.classify(LOADED, text=hostile, code="1", service="vllm")
    assert got.id == "port-in-use"
    assert "\x1b" not in got.detail and len(got.detail) == causes.DETAIL_LIMIT


def test_the_first_matching_cause_wins_specific_before_codes():
    """A SIGKILLed AIPerf is the benchmark client's failure, not merely "killed"; an engine that logged an
    out-of-memory error and then died of SIGKILL is out of memory."""
    aiperf = "FAILED benchmark conc4 on sim1: command 'aiperf profile -m x' exited (code 137) at line 9"
    assert causes.classify(LOADED, text=aiperf, code="137", step="benchmark conc4").id == (
        "benchmark-client-failed"
    )
    oom = "torch.OutOfMemoryError: HIP out of memory. Tried to allocate 2 GiB"
    assert causes.classify(LOADED, text=oom, code="137", service="vllm").id == "gpu-out-of-memory"
    assert causes.classify(LOADED, text="", code="137", service="lmcache").detail.startswith(
        "killed by SIGKILL"
    )


def test_unknown_says_the_first_line_of_what_was_said():
    got = causes.classify(LOADED, text="\nFAILED x on sim1: something new\nmore", code="3", step="x")
    assert (got.id, got.detail) == ("unknown", "FAILED x on sim1: something new")


def _broken(tmp_path, mutate) -> str:
    doc = copy.deepcopy(REGISTRY)
    mutate(doc)
    path = tmp_path / "causes.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(causes.CausesError) as err:
        causes.load(str(path))
    return str(err.value)


@pytest.mark.parametrize(
    "mutate, says",
    [
        (lambda d: d["causes"][1]["signatures"][0].update(txt="x"), "unknown key(s) txt"),
        (lambda d: d["causes"][1]["signatures"][0].update(text="(unclosed"), "text is not a regex"),
        (lambda d: d["causes"][1]["signatures"][0].update(detail="{3}"), "detail placeholder {3} is unknown"),
        (lambda d: d["causes"][1]["signatures"][0].update(detail="{nodename}"), "placeholder {nodename}"),
        (lambda d: d["causes"][1].update(blame="cosmic-rays"), "blame 'cosmic-rays' is not one of"),
        (lambda d: d["causes"][1].update(id="Port In Use"), "id must be kebab-case"),
        (lambda d: d["causes"][2].update(id=d["causes"][1]["id"]), "cause ids appear twice"),
        (lambda d: d["causes"][1].update(examples=[]), "needs at least one recorded example"),
        (lambda d: d["causes"][1]["signatures"].append({"detail": "x"}), "matches everything"),
        (lambda d: d["causes"].pop(), 'the last cause must be "unknown"'),
        (lambda d: d["causes"][1]["examples"][0].pop("source"), "missing source"),
        (lambda d: d.update(extra=1), 'must be an object with "about" and a "causes" list'),
    ],
)
def test_a_broken_registry_is_refused_naming_the_entry(tmp_path, mutate, says):
    message = _broken(tmp_path, mutate)
    assert says in message
    assert "causes.json" in message


def test_the_command_line_classifies_a_said_file_and_a_service_log(tmp_path):
    said, log = tmp_path / "said", tmp_path / "vllm.log"
    said.write_text("FAILED start on sim2: vllm exited (code 1)\n")
    log.write_text("INFO loading\nRuntimeError: No HIP GPUs are available\n")
    done = subprocess.run(
        [sys.executable, str(SCRIPTS / "causes.py"), "classify", "--code", "1", "--service", "vllm"]
        + ["--text-file", str(said), "--log", str(log)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "gpu-unavailable\tnode\tRuntimeError: No HIP GPUs are available\n"
    check = subprocess.run(
        [sys.executable, str(SCRIPTS / "causes.py"), "check"], capture_output=True, text=True, timeout=30
    )
    assert check.returncode == 0, check.stderr


def test_cause_ids_hostcheck_writes_are_the_registry_s():
    text = (SCRIPTS / "hostcheck.sh").read_text()
    written = set(re.findall(r"^\s*check ([a-z][a-z-]+) ", text, re.M))
    written |= set(re.findall(r"^\s*fail [0-9]+ ([a-z][a-z-]+) ", text, re.M))
    assert (
        written == {"leftover-process", "nic-not-ready", "container-leftover", "image-not-staged"}
        and written <= IDS
    )
