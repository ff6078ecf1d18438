"""make parity: every MI355X launch we render against InferenceX's known-working one, every difference
explained in configs/parity/reviewed.yaml (and every review still matching a difference); and the
comparison's own rules."""

from __future__ import annotations

import pytest
import yaml

from recipes import parity
from tests.paths import INFERENCEX_REF, reference

FACTS = yaml.safe_load(parity.FACTS_FILE.read_text(encoding="utf-8"))["launches"]
COMPARED = sorted(key for launch in FACTS.values() for key in launch["configs"])


def test_every_mi355x_config_has_a_known_working_launch_to_be_held_against(configs):
    mi355x = {key for key, entry in configs.entries.items() if entry.runner == "cluster:mi355x-amds"}
    assert mi355x and mi355x == set(COMPARED)


@pytest.mark.parametrize("key", COMPARED)
def test_every_difference_from_the_known_working_launch_is_explained(configs, key):
    reference("amd_utils/models_vllm.yaml")  # skips loudly without InferenceX's files (fails under CI=true)
    for target in configs.targets(key):
        plan, found, stale = parity.compare(key, target.variant, INFERENCEX_REF)
        unexplained = [d.line() for d in found if d.explained_by is None]
        said = "\n".join(unexplained)
        assert not unexplained, f"{key} {target.variant}: unexplained (make parity CONFIG={key}):\n{said}"
        assert not stale, f"{key} {target.variant}: reviews that match nothing: {stale}"


def test_every_reviewed_difference_says_why_and_on_what_evidence():
    reviewed = yaml.safe_load(parity.REVIEWED_FILE.read_text(encoding="utf-8"))["differences"]
    for entry in reviewed:
        assert entry["category"] in parity.CATEGORIES
        assert len(entry["reason"]) > 40 and entry["evidence"].strip()
        assert all(isinstance(v, list) and len(v) == 2 for v in entry["items"].values())


def test_flags_compare_by_value_json_by_key_and_numbers_by_number():
    ours = parity._flatten(parity.flag_map(["--a", "0.9", "--b", "--c=x", "--j", '{"k":{"x":1},"l":[2]}']))
    assert ours == {"--a": "0.9", "--b": True, "--c": "x", "--j.k.x": 1, "--j.l[0]": 2}
    theirs = {"--a": "0.90", "--b": True, "--c": "y", "--j.k.x": 1}
    found = parity.differences({"engine-args": {"prefill": ours}}, {"engine-args": {"prefill": theirs}})
    assert [(d.item, d.ours, d.theirs) for d in found] == [("--c", "x", "y"), ("--j.l[0]", 2, None)]


def test_a_reviewed_difference_whose_value_changed_is_unexplained_again():
    d = parity.Difference("client", "all", "--benchmark-duration", "600", "1800")
    review = {"configs": ["k*"], "category": "client", "reason": "r", "evidence": "e"}
    item = "--benchmark-duration"
    same, stale = parity.explain([d], [{**review, "items": {item: ["600", "1800"]}}], "key")
    assert same[0].explained_by is not None and not stale
    moved, stale = parity.explain([d], [{**review, "items": {item: ["900", "1800"]}}], "key")
    assert moved[0].explained_by is None and len(stale) == 1
    other, _ = parity.explain([d], [{**review, "configs": ["other"], "items": {}}], "key")
    assert other[0].explained_by is None


def test_the_command_exits_nonzero_and_prints_what_is_unexplained(monkeypatch, capsys, tmp_path):
    reference("amd_utils/models_vllm.yaml")
    empty = tmp_path / "reviewed.yaml"
    empty.write_text("differences: []\n")
    monkeypatch.setattr(parity, "REVIEWED_FILE", empty)
    key = "kimik2.5-fp4-mi355x-vllm-disagg-agentic"
    assert parity.main([key, "--inferencex", str(INFERENCEX_REF)]) == 1
    out = capsys.readouterr().out
    assert "unexplained" in out and "--served-model-name" in out
    assert parity.main(["local-sim-vllm-disagg-agentic", "--inferencex", str(INFERENCEX_REF)]) == 2


def test_a_review_written_twice_is_refused_not_silently_replaced(tmp_path):
    twice = tmp_path / "reviewed.yaml"
    twice.write_text("differences: []\ndifferences: []\n")
    with pytest.raises(
        parity.ParityError, match=r"reviewed.yaml:2: differences repeated \(first at line 1\)"
    ):
        parity._read_yaml(twice)
