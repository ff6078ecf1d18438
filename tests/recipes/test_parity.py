"""make parity: every MI355X launch we render against what InferenceX's own scripts launch for the same entry
(its chain run under recorders from its checkout), every difference explained in configs/parity/reviewed.yaml
(and every review still matching a difference); and the comparison's own rules."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
import yaml

from recipes import parity
from schemas.findings import Finding
from tests.paths import INFERENCEX_REF, reference

LAUNCHES = yaml.safe_load(parity.LAUNCHES_FILE.read_text(encoding="utf-8"))["launches"]
# ours: configs of ours; theirs: InferenceX's own entries, rendered from its master file as they are
OURS = sorted(
    k for launch in LAUNCHES.values() if not launch.get("ours-from-entry") for k in launch["configs"]
)
THEIRS = sorted(k for launch in LAUNCHES.values() if launch.get("ours-from-entry") for k in launch["configs"])
# Variants whose shape (or shape and concurrencies) InferenceX's matrix never runs: nothing to hold them
# against. A variant that newly lands here (a shape changed on either side) fails the test until listed.
NO_ROW = {
    "kimik2.5-fp4-mi355x-vllm-disagg": {"fsl8k1k_p2x8_d2x8", "fsl8k1k_p1x8_d2x8"},
}
CHECKOUT_FILE = "checkout-843c6254/benchmarks/multi_node/amd_utils/job.slurm"


def test_every_mi355x_config_has_a_known_working_launch_to_be_held_against(configs):
    mi355x = {key for key, entry in configs.entries.items() if entry.runner == "cluster:mi355x-amds"}
    assert mi355x and mi355x == set(OURS)


def _all_explained(key: str, compared: list) -> None:
    assert compared
    never = {c.plan.variant for c in compared if c.uncompared}
    assert never == NO_ROW.get(key, set()), f"{key}: variants with no InferenceX row: {sorted(never)}"
    for c in compared:
        unexplained = [d.line() for d in c.found if d.explained_by is None]
        said = "\n".join(unexplained)
        assert not unexplained, f"{key} {c.plan.variant}: unexplained (make parity CONFIG={key}):\n{said}"
        assert not c.stale, f"{key} {c.plan.variant}: reviews that match nothing: {c.stale}"


@pytest.fixture(scope="module")
def compared() -> dict:
    """Every MI355X config held against InferenceX's chain, configs side by side (each chain run mostly waits
    on its shell's processes): key -> its comparisons, or the ParityError it raised."""
    reference(CHECKOUT_FILE)  # skips loudly without InferenceX's checkouts (fails under CI=true)

    def one(key: str):
        try:
            return parity.compare(key, None, INFERENCEX_REF)
        except parity.ParityError as exc:
            return exc

    with ThreadPoolExecutor(max_workers=3) as pool:
        return dict(zip(OURS + THEIRS, pool.map(one, OURS + THEIRS), strict=True))


def _of(compared: dict, key: str) -> list:
    found = compared[key]
    if isinstance(found, Exception):
        raise found
    return found


@pytest.mark.parametrize("key", OURS)
def test_every_difference_from_the_known_working_launch_is_explained(configs, compared, key):
    found = _of(compared, key)
    assert [c.plan.variant for c in found] == [t.variant for t in configs.targets(key)]  # every variant
    _all_explained(key, found)


@pytest.mark.parametrize("key", THEIRS)
def test_every_difference_from_inferencex_s_own_entries_is_explained(compared, key):
    _all_explained(key, _of(compared, key))


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


def test_a_review_for_some_variants_explains_only_theirs_and_is_stale_nowhere_else():
    d = parity.Difference("client", "all", "--random-input-len", None, "8192")
    review = {"configs": ["*"], "variants": ["fsl8k1k_*"], "category": "client", "reason": "r"}
    reviewed = [{**review, "items": {"--random-input-len": [None, "8192"]}}]
    hit, stale = parity.explain([d], reviewed, "key", "fsl8k1k_p1x8_d1x8")
    assert hit[0].explained_by is not None and not stale
    elsewhere, stale = parity.explain([], reviewed, "key", "fsl1k1k_p1x8_d1x8")
    assert not elsewhere and not stale  # a 1k/1k variant neither uses nor leaves it stale


def test_the_command_exits_nonzero_and_prints_what_is_unexplained(monkeypatch, capsys, tmp_path):
    reference(CHECKOUT_FILE)
    empty = tmp_path / "reviewed.yaml"
    empty.write_text("differences: []\n")
    monkeypatch.setattr(parity, "REVIEWED_FILE", empty)
    key = "kimik2.5-fp4-mi355x-vllm-disagg-agentic"
    assert (
        parity.main([key, "--variant", "agentic_p1x8_d1x8_conc8", "--inferencex", str(INFERENCEX_REF)]) == 1
    )
    out = capsys.readouterr().out
    assert "unexplained" in out and "--served-model-name" in out
    # a config InferenceX never ran (a local runner's): nothing to compare with, its own exit code
    no_counterpart = parity.main(["local-sim-vllm-disagg-agentic", "--inferencex", str(INFERENCEX_REF)])
    assert no_counterpart == parity.EXIT_NO_COUNTERPART


def test_a_review_written_twice_is_refused_not_silently_replaced(tmp_path):
    twice = tmp_path / "reviewed.yaml"
    twice.write_text("differences: []\ndifferences: []\n")
    with pytest.raises(
        parity.ParityError, match=r"reviewed.yaml:2: differences repeated \(first at line 1\)"
    ):
        parity._read_yaml(twice)


QWEN = "qwen3.5-fp8-mi355x-sglang-disagg"


def test_a_qwen_entry_against_what_inferencex_s_scripts_ran_end_to_end(capsys):
    reference(CHECKOUT_FILE)
    [c] = parity.compare(QWEN, None, INFERENCEX_REF)  # ours rendered from InferenceX's own entry
    assert c.plan.variant == "fsl8k1k_p1x4_d1x8"
    engine = {d.item for d in c.found if d.category == "engine-args"}
    # the flags its server_sglang.sh composed agree with ours but for placement, naming and metrics
    assert engine == {
        "--host", "--model-path", "--served-model-name", "--disaggregation-bootstrap-port",
        "--enable-metrics", "--trust-remote-code",
    }  # fmt: skip
    assert all(d.explained_by for d in c.found)
    theirs = {d.item: d.theirs for d in c.found}
    # read from what the scripts ran, not from a default: the runner script's MoRI class reached the engine
    assert "MORI_RDMA_TC" not in theirs and "--policy" not in theirs
    assert theirs["MORI_MAX_DISPATCH_TOKENS_DECODE"] == "512"  # a script's variable, reviewed as unread
    assert parity.main([QWEN, "--inferencex", str(INFERENCEX_REF)]) == 0
    out = capsys.readouterr().out
    assert f"parity {QWEN} fsl8k1k_p1x4_d1x8 against what InferenceX's own scripts launch" in out


def test_an_entry_that_does_not_render_yet_says_so_and_exits_2(monkeypatch, capsys):
    reference("amd-master.yaml")

    def refuse(key, configs=None):
        raise parity.RenderError([Finding("amd-master.yaml", 552, (key, "model"), "not in models.yaml")])

    monkeypatch.setattr(parity, "load", refuse)
    assert parity.main(["dsr1-fp8-mi355x-sglang-disagg", "--inferencex", str(INFERENCEX_REF)]) == 2
    err = capsys.readouterr().err
    assert "dsr1-fp8-mi355x-sglang-disagg does not render yet: amd-master.yaml:552" in err
    assert "not in models.yaml" in err
