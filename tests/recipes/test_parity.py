"""make parity: every MI355X launch we render against InferenceX's known-working one, every difference
explained in configs/parity/reviewed.yaml (and every review still matching a difference); and the
comparison's own rules."""

from __future__ import annotations

import pytest
import yaml

from recipes import parity
from schemas.findings import Finding
from tests.paths import INFERENCEX_REF, reference

FACTS = yaml.safe_load(parity.FACTS_FILE.read_text(encoding="utf-8"))["launches"]
# ours: configs of ours; theirs: InferenceX's own entries, rendered from its master file as they are
OURS = sorted(k for launch in FACTS.values() if not launch.get("ours-from-entry") for k in launch["configs"])
THEIRS = sorted(k for launch in FACTS.values() if launch.get("ours-from-entry") for k in launch["configs"])
# Differences make parity found that are bugs of our render, not reviewed: strict, a fix must drop the mark.
OUR_BUGS: dict = {}


def test_every_mi355x_config_has_a_known_working_launch_to_be_held_against(configs):
    mi355x = {key for key, entry in configs.entries.items() if entry.runner == "cluster:mi355x-amds"}
    assert mi355x and mi355x == set(OURS)


def _all_explained(key: str, compared: list) -> None:
    assert compared
    for c in compared:
        unexplained = [d.line() for d in c.found if d.explained_by is None]
        said = "\n".join(unexplained)
        assert not unexplained, f"{key} {c.plan.variant}: unexplained (make parity CONFIG={key}):\n{said}"
        assert not c.stale, f"{key} {c.plan.variant}: reviews that match nothing: {c.stale}"


@pytest.mark.parametrize("key", OURS)
def test_every_difference_from_the_known_working_launch_is_explained(configs, key):
    reference("amd_utils/models_vllm.yaml")  # skips loudly without InferenceX's files (fails under CI=true)
    compared = parity.compare(key, None, INFERENCEX_REF)
    assert [c.plan.variant for c in compared] == [t.variant for t in configs.targets(key)]  # every variant
    _all_explained(key, compared)


@pytest.mark.parametrize(
    "key",
    [
        pytest.param(k, marks=pytest.mark.xfail(strict=True, reason=OUR_BUGS[k])) if k in OUR_BUGS else k
        for k in THEIRS
    ],
)
def test_every_difference_from_inferencex_s_own_sglang_entries_is_explained(key):
    reference("amd_utils/models.yaml")
    try:
        compared = parity.compare(key, None, INFERENCEX_REF)
    except parity.NotRendered as exc:
        pytest.skip(str(exc))  # an entry we cannot render yet is said, with the render's finding
    _all_explained(key, compared)


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
    reference("amd_utils/models_vllm.yaml")
    empty = tmp_path / "reviewed.yaml"
    empty.write_text("differences: []\n")
    monkeypatch.setattr(parity, "REVIEWED_FILE", empty)
    key = "kimik2.5-fp4-mi355x-vllm-disagg-agentic"
    assert parity.main([key, "--inferencex", str(INFERENCEX_REF)]) == 1
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


# ---- InferenceX's SGLang launch composed from its models file's block, as its server_sglang.sh does --------

BLOCK = {  # a small hand-written models.yaml block, in InferenceX's format
    "base_flags": "--log-level warning --disaggregation-transfer-backend nixl",
    "mtp_flags": "--speculative-algorithm NEXTN",
    "dp_flags": "--enable-dp-attention",
    "ep_flags": "--moe-a2a-backend mori",
    "prefill": {
        "mem_fraction_static": 0.8,
        "dp": {
            "chunked_prefill_size": "MORI_MAX_DISPATCH_TOKENS_PREFILL * PREFILL_TP_SIZE",
            "cuda_graph_bs": "1 2",
        },
        "no_dp": {"max_running_requests": 64, "chunked_prefill_size": 4096, "cuda_graph_bs_range": "1-3"},
    },
    "decode": {
        "dp": {"max_running_requests": 4096, "cuda_graph_bs_range": "1-4"},
        "no_dp": {"max_running_requests": 32, "cuda_graph_bs_range": "2-4", "context_length": 9000},
    },
}
NAMES = {"MORI_MAX_DISPATCH_TOKENS_PREFILL": "8192", "PREFILL_TP_SIZE": "8", "DECODE_TP_SIZE": "8"}


def test_sglang_tp_workers_take_the_no_dp_arms_and_the_entry_s_transfer_backend():
    run = parity.Run(parity.Worker(4), parity.Worker(8), max_conc=64, kv_transfer="mori")
    prefill = parity.flag_map(parity.sglang_flags(BLOCK, "prefill", run, NAMES))
    decode = parity.flag_map(parity.sglang_flags(BLOCK, "decode", run, NAMES))
    assert prefill == {
        "--tp-size": "4",
        "--log-level": "warning",
        "--disaggregation-transfer-backend": "mori",  # KV_P2P_TRANSFER replaces the models file's
        "--mem-fraction-static": "0.8",
        "--max-running-requests": "64",
        "--chunked-prefill-size": "4096",
        "--cuda-graph-bs": "1 2 3",  # "1-3" expanded as seq does
        "--disable-radix-cache": True,  # its default
    }
    assert decode["--cuda-graph-bs"] == "2 3 4" and decode["--max-running-requests"] == "32"
    assert decode["--context-length"] == "9000" and decode["--prefill-round-robin-balance"] is True
    assert "--ep-size" not in decode and "--enable-dp-attention" not in decode


def test_sglang_dep_workers_take_the_dp_arms_with_the_dp_ep_overrides():
    dep = parity.Worker(8, ep=True, dp=True)
    run = parity.Run(dep, dep, max_conc=1024)
    prefill = parity.flag_map(parity.sglang_flags(BLOCK, "prefill", run, NAMES))
    decode = parity.flag_map(parity.sglang_flags(BLOCK, "decode", run, NAMES))
    for flags in (prefill, decode):
        assert (flags["--tp-size"], flags["--ep-size"], flags["--dp-size"]) == ("8", "8", "8")
        assert flags["--moe-a2a-backend"] == "mori" and flags["--enable-dp-attention"] is True
        assert flags["--max-running-requests"] == "1024"  # the largest concurrency, DP and EP both on
    assert prefill["--chunked-prefill-size"] == "65536"  # MORI_MAX_DISPATCH_TOKENS_PREFILL * PREFILL_TP_SIZE
    assert prefill["--cuda-graph-bs"] == "1 2" and decode["--cuda-graph-bs"] == "1 2 3 4"
    env = parity.sglang_variables({"MORI_MAX_DISPATCH_TOKENS_DECODE": "512"}, run)
    assert env == {
        "MORI_MAX_DISPATCH_TOKENS_DECODE": "128",  # 1024 / decode TP
        "SGLANG_MORI_DISPATCH_INTER_KERNEL_SWITCH_THRESHOLD": "256",  # twice that
    }
    dp_only = parity.Run(dep, parity.Worker(8, dp=True), max_conc=1024)
    decode = parity.flag_map(parity.sglang_flags(BLOCK, "decode", dp_only, NAMES))
    assert decode["--max-running-requests"] == "32"  # DP without EP: the graph range's end × TP (4 × 8)
    assert parity.sglang_variables({"MORI_MAX_DISPATCH_TOKENS_DECODE": "512"}, dp_only) == {
        "MORI_MAX_DISPATCH_TOKENS_DECODE": "512"
    }


def test_sglang_mtp_flags_go_to_both_roles_and_grow_the_decode_dispatch_budget():
    dep = parity.Worker(8, ep=True, dp=True)
    run = parity.Run(dep, dep, max_conc=256, mtp=2)
    for role in parity.ROLES:
        flags = parity.flag_map(parity.sglang_flags(BLOCK, role, run, NAMES))
        assert flags["--speculative-algorithm"] == "NEXTN"
        assert (flags["--speculative-num-steps"], flags["--speculative-num-draft-tokens"]) == ("2", "3")
    env = parity.sglang_variables({"MORI_MAX_DISPATCH_TOKENS_DECODE": "512"}, run)
    assert env["MORI_MAX_DISPATCH_TOKENS_DECODE"] == "96"  # 256 / 8, × (MTP + 1)
    assert env["SGLANG_MORI_DISPATCH_INTER_KERNEL_SWITCH_THRESHOLD"] == "64"  # before the MTP growth
    none = parity.Run(dep, dep, max_conc=256)
    assert "--speculative-num-steps" not in parity.flag_map(parity.sglang_flags(BLOCK, "decode", none, NAMES))


def test_a_flag_keeps_every_value_so_a_difference_in_a_list_shows():
    words = [
        "--cuda-graph-bs",
        "1",
        "2",
        "3",
        "--prefill",
        "http://a:8000",
        "8998",
        "--prefill",
        "http://b:8000",
    ]
    flags = parity.flag_map([*words, "--x", "--j", '{"k":1}'])
    assert flags == {
        "--cuda-graph-bs": "1 2 3",
        "--prefill": "http://a:8000 8998 http://b:8000",
        "--x": True,
        "--j": {"k": 1},
    }
    mine, theirs = (
        parity.flag_map(["--cuda-graph-bs", "1", "2"]),
        parity.flag_map(["--cuda-graph-bs", "1", "3"]),
    )
    found = parity.differences({"engine-args": {"decode": mine}}, {"engine-args": {"decode": theirs}})
    assert [(d.item, d.ours, d.theirs) for d in found] == [("--cuda-graph-bs", "1 2", "1 3")]


def test_a_models_file_size_is_names_and_integers_joined_by_star_and_nothing_else():
    assert parity.product("MORI_MAX_DISPATCH_TOKENS_PREFILL * PREFILL_TP_SIZE", NAMES) == 65536
    assert parity.product(262144, NAMES) == 262144 and parity.product("2*3 * 4", {}) == 24
    for hostile in (
        "__import__('os').system('true')",
        "8192 + 1",
        "2 ** 64",
        "PREFILL_TP_SIZE // 2",
        "(8)",
        "",
        "8 *",
        "٣",  # a digit, but not an ASCII one
        True,
        None,
        "*".join(["2"] * 9),
    ):
        with pytest.raises(parity.ParityError):
            parity.product(hostile, NAMES)
    with pytest.raises(parity.ParityError, match="UNKNOWN is not an integer setting"):
        parity.product("UNKNOWN * 2", NAMES)
    with pytest.raises(parity.ParityError, match="is not an integer setting"):
        parity.product("NAME", {"NAME": "abc"})


def test_a_missing_key_of_their_files_is_named_not_a_traceback(tmp_path):
    master = tmp_path / "master.yaml"
    master.write_text("k:\n  model: a/B\n  scenarios:\n    fixed-seq-len:\n    - search-space:\n      - {}\n")
    path = ("k", "scenarios", "fixed-seq-len", 0, "search-space", 0)
    with pytest.raises(parity.ParityError, match=r"master.yaml: k: no 'prefill'"):
        parity._their_run(master, "k", path)
    with pytest.raises(parity.ParityError, match=r"has no scenarios.fixed-seq-len.3"):
        parity._their_run(master, "k", path[:3] + (3,) + path[4:])
    with pytest.raises(parity.ParityError, match="no entry 'other'"):
        parity._their_run(master, "other", path)


QWEN = "qwen3.5-fp8-mi355x-sglang-disagg"


def test_a_qwen_entry_against_inferencex_s_own_files_end_to_end(capsys):
    master = reference("amd-master.yaml")
    [c] = parity.compare(QWEN, None, INFERENCEX_REF, master)  # both sides from InferenceX's master file
    assert c.plan.variant == "fsl8k1k_p1x4_d1x8"
    engine = {(d.role, d.item) for d in c.found if d.category == "engine-args"}
    # the composed flags agree with ours: only placement, metrics and the served name differ
    assert {item for _, item in engine} == {
        "--host",
        "--model-path",
        "--disaggregation-ib-device",
        "--enable-metrics",
        "--served-model-name",
        "--disaggregation-bootstrap-port",
        "--trust-remote-code",
    }
    side = parity.theirs(
        parity._read_yaml(parity.FACTS_FILE)["launches"]["amd-utils-sglang-mori"],
        INFERENCEX_REF,
        master,
        QWEN,
        ("qwen3.5-fp8-mi355x-sglang-disagg", "scenarios", "fixed-seq-len", 0, "search-space", 0),
    )
    prefill, decode = side["engine-env"]["prefill"], side["engine-env"]["decode"]
    assert prefill["SGLANG_MORI_NUM_MAX_DISPATCH_TOKENS_PER_RANK"] == "8192"  # env.sh's, on the role's line
    assert decode["SGLANG_MORI_NUM_MAX_DISPATCH_TOKENS_PER_RANK"] == "512"
    assert decode["SGLANG_MORI_MOE_MAX_INPUT_TOKENS"] == "2703" and prefill["SGLANG_MORI_COMBINE_DTYPE"] == ""
    assert side["engine-args"]["prefill"]["--cuda-graph-bs"] == " ".join(map(str, range(1, 129)))
    assert side["router"]["all"]["--policy"] == "random" and "--dp-aware" not in side["router"]["all"]
    assert parity.main([QWEN, "--inferencex", str(INFERENCEX_REF), "--configs", str(master)]) in (0, 1)
    out = capsys.readouterr().out
    assert f"parity {QWEN} fsl8k1k_p1x4_d1x8" in out and "engine-args" in out


def test_an_entry_that_does_not_render_yet_says_so_and_exits_2(monkeypatch, capsys):
    reference("amd-master.yaml")

    def refuse(key, configs=None):
        raise parity.RenderError([Finding("amd-master.yaml", 552, (key, "model"), "not in models.yaml")])

    monkeypatch.setattr(parity, "load", refuse)
    assert parity.main(["dsr1-fp8-mi355x-sglang-disagg", "--inferencex", str(INFERENCEX_REF)]) == 2
    err = capsys.readouterr().err
    assert "dsr1-fp8-mi355x-sglang-disagg does not render yet: amd-master.yaml:552" in err
    assert "not in models.yaml" in err


def test_a_fact_given_once_per_worker_is_its_flag_repeated_as_many_times():
    url = "http://<prefill worker>:8000"
    facts = [{"flag": "--prefill", "value": url, "per": "prefill-workers", "at": "x"}]
    two = parity._facts(facts, {"prefill-workers": 2}, {})
    assert two == {"--prefill": f"{url} {url}"}


def test_variables_only_inferencex_s_bash_reads_are_not_compared_as_engine_environment():
    reference("amd_utils/models.yaml")
    [compared] = parity.compare(
        "qwen3.5-fp8-mi355x-sglang-disagg", None, INFERENCEX_REF, reference("amd-master.yaml")
    )
    theirs = {d.item for d in compared.found if d.category == "engine-env"}
    assert "MORI_MAX_DISPATCH_TOKENS_DECODE" not in theirs and "IBDEVICES" not in theirs
    # what it composes from them is: the per-role budget on the engine's line matches ours
    assert "SGLANG_MORI_NUM_MAX_DISPATCH_TOKENS_PER_RANK" not in theirs
