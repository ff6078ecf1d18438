"""InferenceX's own rules (schemas/rules_inferencex.py): an accept/reject table per rule, with our own cases
of what InferenceX's validator (utils/matrix_logic/validation.py @ 843c6254) refuses and accepts, its
model facts (num-worker 0, versions that are image references, '*' in a config key, an empty runner label
list), this repository's two extension keys, and our shipped configs read the way InferenceX reads them.

Reject cases run under the inferencex profile; test_strict_rejects_what_inferencex_rejects runs them under
strict too (strict = every InferenceX rule + ours).
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from schemas import rules
from schemas.yamlio import load_file

from .cases import (
    AGENTIC,
    AMDS,
    FIXED_SEQ_LEN,
    FSS,
    IX,
    LMC,
    SINGLE_NODE,
    Case,
    cases,
    check_accept,
    check_reject,
    d,
    s,
)
from .conftest import ROOT, RUNNERS, SS, D, P, baseline, dump, lint_entry, rel, rows, run_lint, shown, write

PD_PROXY = {"name": "pd-proxy", "version": "0.1.0"}
MINICPM = {"issue": "minicpm-sala-kv-indptr", "workaround": "disable-cuda-graph"}  # configs/known-issues.yaml
IMAGE_REF = "not the image it comes in; InferenceX refuses an image reference here"
EXTENSION = "is this repository's extension; InferenceX's validator refuses the key"


def _second_point(**changes) -> dict:
    """The baseline's point again (changed), as a second search-space item."""
    point = copy.deepcopy(baseline()["scenarios"]["agentic-coding"][0]["search-space"][0])
    point.update(changes)
    return point


SECOND = f"{AGENTIC}.search-space[1]"
WORKER = {"num-worker": 1, "tp": 8, "ep": 1, "dp-attn": False}
# The baseline as InferenceX's aggregated multinode point (disagg: false): one worker on num-nodes nodes.
AGGREGATE = [
    s("disagg", False),
    d(P),
    d(D),
    d(LMC),
    s(f"{SS}.kv-offloading", "none"),
    s(f"{SS}.worker", WORKER),
    s(f"{SS}.num-nodes", 1),
]
NEWEST = "InferenceX's validator since 07db303e"
OLDER = "InferenceX's validator before 07db303e (ba3e5976) refuses the key"
RECIPE = "recipes/dsr1/sglang/mi355x-fp8/8k1k/disagg-variants.yaml:override_stp_1p2d_tp8"
LEGACY = {"profile": "inferencex-legacy"}
POWER = s("scenarios.fixed-seq-len[0].require-power", True)

# fmt: off
REJECT = [
    *cases("model",  # InferenceX's model facts, said with its reason
        ("router-version-image-ref", [s("router.version", "image:vllm/vllm-openai-rocm:v0.33.0")],
         "router.version", IMAGE_REF, "the component's own version", IX),
        ("backend-version-image-ref", [s(f"{LMC}.version", "image:rocm/lmcache")], f"{LMC}.version",
         IMAGE_REF, None, IX),
        ("num-worker-negative", [s(f"{D}.num-worker", -1)], f"{D}.num-worker", "-1 is out of range [0, 1024]",
         None, IX),
    ),
    *cases("_has_a_scenario",
        ("no-scenario", [s("scenarios", {})], "scenarios", "no scenario to run",
         "add fixed-seq-len or agentic-coding", IX),
    ),
    *cases("_conc_list_xor_range",
        ("list-and-range", [s(f"{SS}.conc-start", 1), s(f"{SS}.conc-end", 4)], SS,
         "both conc-list and conc-start/conc-end given", "use one of the two forms", IX),
        ("no-concurrency", [d(f"{SS}.conc-list")], SS, "no concurrency given",
         "set conc-list, or both conc-start and conc-end", IX),
        ("start-without-end", [d(f"{SS}.conc-list"), s(f"{SS}.conc-start", 4)], SS, "no concurrency given",
         None, IX),
        ("start-above-end", [d(f"{SS}.conc-list"), s(f"{SS}.conc-start", 8), s(f"{SS}.conc-end", 4)],
         f"{SS}.conc-start", "conc-start 8 exceeds conc-end 4", "conc-start <= conc-end", IX),
    ),
    *cases("_topology_matches_multinode",
        ("multinode-without-decode", [d(D)], SS, "multinode entry without decode",
         "give prefill and decode blocks", IX),
        ("multinode-without-both", [d(P), d(D)], SS, "multinode entry without prefill and decode", None, IX),
        ("single-node-without-tp", SINGLE_NODE + [d(f"{SS}.tp")], SS, "single-node entry without tp",
         "set tp (GPUs per engine)", IX),
        ("single-node-with-worker", SINGLE_NODE + [s(f"{SS}.worker", WORKER)], f"{SS}.worker",
         "worker on a single-node point", "a single-node point is tp", IX),
        ("worker-on-disagg", [s(f"{SS}.worker", WORKER), s(f"{SS}.num-nodes", 2)], f"{SS}.worker",
         "worker on a disaggregated point (disagg: true)", "worker and num-nodes are an aggregated point's",
         IX),
        ("aggregate-with-prefill", [s("disagg", False)], f"{SS}.prefill",
         "prefill on an aggregated multinode point (disagg: false)", "one worker block and num-nodes", IX),
        ("aggregate-without-worker", [*AGGREGATE, d(f"{SS}.worker")], SS,
         "aggregated multinode point (disagg: false) without worker", None, IX),
        ("aggregate-without-num-nodes", [*AGGREGATE, d(f"{SS}.num-nodes")], SS,
         "aggregated multinode point (disagg: false) without num-nodes", None, IX),
        ("tp-beside-worker", [*AGGREGATE, s(f"{SS}.tp", 8)], f"{SS}.tp", "a point is one server (tp)", None,
         IX),
        ("server-and-workers", [s(f"{SS}.tp", 8)], f"{SS}.tp",
         "a point is one server (tp) or prefill and decode workers, not both", None, IX),
        ("settings-on-a-multinode-point", [s(f"{SS}.additional-settings", ["MAX_MODEL_LEN=4096"])],
         f"{SS}.additional-settings", "a multinode point has no server of its own",
         "put them under prefill or decode", IX),
    ),
    *cases("_recipe_chosen_by_its_key",
        ("config-file-setting", [s(f"{P}.additional-settings", [f"CONFIG_FILE={RECIPE}"])],
         f"{P}.additional-settings[0]",
         f"CONFIG_FILE in additional-settings: {NEWEST} takes a point's recipe only from its srt-recipe",
         f"srt-recipe: {RECIPE} on the point", IX),
        ("eval-config-file-on-worker",
         [*AGGREGATE, s(f"{SS}.worker.additional-settings", ["EVAL_CONFIG_FILE=e.yaml"])],
         f"{SS}.worker.additional-settings[0]", "EVAL_CONFIG_FILE in additional-settings",
         "eval-srt-recipe: e.yaml", IX),
    ),
    *cases("_keys_the_older_validator_lacks",
        ("eval-srt-recipe", [s(f"{SS}.eval-srt-recipe", "e.yaml")], f"{SS}.eval-srt-recipe",
         f"eval-srt-recipe: {OLDER}", "lint under inferencex", LEGACY),
        ("srt-recipe-on-multinode-fixed", [*FIXED_SEQ_LEN, s(f"{FSS}.srt-recipe", RECIPE)],
         f"{FSS}.srt-recipe", f"srt-recipe on a multinode fixed-seq-len point: {OLDER}",
         f"CONFIG_FILE={RECIPE}", LEGACY),
        ("require-power-single-node", [*SINGLE_NODE, FIXED_SEQ_LEN[0], *FIXED_SEQ_LEN[2:], POWER],
         "scenarios.fixed-seq-len[0].require-power", f"require-power on a single-node entry: {OLDER}", None,
         LEGACY),
    ),
    *cases("_point_keys_fit_its_kind",
        ("pp-on-a-multinode-agentic-point", [s(f"{SS}.pp", 2)], f"{SS}.pp",
         "pp is not a key of a multinode agentic-coding point", "set it per worker", IX),
        ("dcp-on-a-multinode-agentic-point", [s(f"{SS}.dcp-size", 2)], f"{SS}.dcp-size",
         "dcp-size is not a key of a multinode agentic-coding point", None, IX),
        ("pcp-on-a-multinode-agentic-point", [s(f"{SS}.pcp-size", 1)], f"{SS}.pcp-size",
         "pcp-size is not a key of a multinode agentic-coding point", None, IX),
        ("ep-on-a-multinode-fixed-point", FIXED_SEQ_LEN + [s(f"{FSS}.ep", 1)], f"{FSS}.ep",
         "ep is not a key of a multinode fixed-seq-len point", "set it per worker", IX),
        ("offloading-on-a-fixed-point", FIXED_SEQ_LEN + [s(f"{FSS}.kv-offloading", "none")],
         f"{FSS}.kv-offloading", "kv-offloading is not a key of a multinode fixed-seq-len point",
         "kv offloading is an agentic-coding setting", IX),
        ("offloading-on-a-single-node-fixed-point",
         SINGLE_NODE + [("rename", "scenarios.agentic-coding", "fixed-seq-len"),
                        d("scenarios.fixed-seq-len[0].dram-utilization"),
                        s("scenarios.fixed-seq-len[0].isl", 1024), s("scenarios.fixed-seq-len[0].osl", 1024)],
         f"{FSS}.kv-offloading", "kv-offloading is not a key of a single-node fixed-seq-len point", None, IX),
    ),
    *cases("_workers_declare_ep_and_dp_attn",
        ("no-ep", [d(f"{P}.ep")], P,
         "prefill worker without ep; InferenceX requires ep and dp-attn on every worker",
         "ep: 1 and dp-attn: false", IX),
        ("neither", [d(f"{D}.ep"), d(f"{D}.dp-attn")], D, "decode worker without ep and dp-attn", None, IX),
    ),
    *cases("_dcp_divides_tp",
        ("worker", [s(f"{D}.dcp-size", 3)], f"{D}.dcp-size", "dcp-size 3 does not divide tp 8",
         "a divisor of tp", IX),
        ("single-node-server", SINGLE_NODE + [s(f"{SS}.dcp-size", 3)], f"{SS}.dcp-size",
         "dcp-size 3 does not divide tp 8", None, IX),
    ),
    *cases("_hardware_on_both_roles_or_neither",
        ("prefill-only", [s(f"{P}.hardware", AMDS)], f"{P}.hardware", "hardware given for prefill only",
         "set hardware on both prefill and decode, or on neither", IX),
        ("decode-only", [s(f"{D}.hardware", AMDS)], f"{D}.hardware", "hardware given for decode only", None,
         IX),
    ),
    *cases("_kv_offloading_consistent",
        ("dram-without-backend", [d(LMC)], SS, "kv-offloading: dram without kv-offload-backend",
         "kv-offload-backend: {name: lmcache", IX),
        ("backend-with-none", [s(f"{SS}.kv-offloading", "none")], LMC,
         "kv-offload-backend given but kv-offloading is not dram", "kv-offloading: dram, or drop the backend",
         IX),
        ("backend-without-offloading", [d(f"{SS}.kv-offloading")], LMC, "kv-offloading is not dram", None,
         IX),
        ("dram-without-utilization", [d(f"{AGENTIC}.dram-utilization")], AGENTIC,
         "kv-offloading: dram needs dram-utilization to size the DRAM tier", "dram-utilization: 0.8", IX),
    ),
    *cases("_single_node_agentic_declares_offloading",
        ("no-kv-offloading", SINGLE_NODE + [d(f"{SS}.kv-offloading")], SS,
         "single-node agentic point without kv-offloading", "kv-offloading: none or dram", IX),
    ),
    *cases("_disagg_needs_a_transfer",
        ("none-at-all", [d("kv-p2p-transfer")], "", "disagg entry without kv-p2p-transfer",
         "kv-p2p-transfer: mooncake at the top, or in every search-space point", IX),
        ("one-point-without", [d("kv-p2p-transfer"), s(f"{SS}.kv-p2p-transfer", "mooncake"),
                               s(SECOND, _second_point())], "", "disagg entry without kv-p2p-transfer", None,
         IX),
    ),
    *cases("_disagg_only_multinode",
        ("single-node-disagg", SINGLE_NODE + [s("disagg", True)], "disagg",
         "disagg: true on a single-node entry", "multinode: true, or disagg: false", IX),
    ),
    *cases("_transfer_only_multinode",
        ("at-the-top", SINGLE_NODE + [s("kv-p2p-transfer", "mooncake")], "kv-p2p-transfer",
         "kv-p2p-transfer on a single-node entry", None, IX),
        ("in-a-point", SINGLE_NODE + [s(f"{SS}.kv-p2p-transfer", "mooncake")], f"{SS}.kv-p2p-transfer",
         "kv-p2p-transfer on a single-node entry", None, IX),
    ),
    *cases("_components_declared_once",
        ("router-twice", [s(f"{SS}.router", PD_PROXY)], "router",
         "router declared at the top and in search-space points",
         "declare it once: at the top for every point, or in each point", IX),
        ("transfer-twice", [s(f"{SS}.kv-p2p-transfer", "mooncake")], "kv-p2p-transfer",
         "kv-p2p-transfer declared at the top and in search-space points", None, IX),
    ),
    *cases("_agentic_runner_is_cluster",
        ("sku-label", [s("runner", "mi355x")], "runner",
         "agentic entry on runner 'mi355x': agentic points run on one exact fleet, a 'cluster:<name>' runner",
         "runner: cluster:mi355x", IX),
    ),
    *cases("_extension_keys_absent",
        ("known-issue-workarounds", [s("known-issue-workarounds", [MINICPM])], "known-issue-workarounds",
         f"known-issue-workarounds {EXTENSION}", "lint it under strict", IX),
        ("single-node-settings", SINGLE_NODE + [s(f"{SS}.additional-settings", ["MAX_MODEL_LEN=4096"])],
         f"{SS}.additional-settings", f"additional-settings on a single-node point {EXTENSION}", None, IX),
    ),
]

ACCEPT = [
    *cases("model",
        # InferenceX's aggregated run in a multinode entry: the prefill workers serve both
        # InferenceX's model takes a decode count of 0 (its WorkerConfig has no bound)
        ("decode-count-0", [s(f"{D}.num-worker", 0)], IX),
    ),
    *cases("_has_a_scenario",
        ("fixed-seq-len-only", FIXED_SEQ_LEN),
    ),
    *cases("_recipe_chosen_by_its_key",
        ("srt-recipe-on-the-point", [s(f"{SS}.srt-recipe", RECIPE)], IX),
        ("config-file-under-legacy", [s(f"{P}.additional-settings", [f"CONFIG_FILE={RECIPE}"])], LEGACY),
    ),
    *cases("_keys_the_older_validator_lacks",
        ("srt-recipe-on-multinode-agentic", [s(f"{SS}.srt-recipe", RECIPE)], LEGACY),
        ("require-power-multinode", [*FIXED_SEQ_LEN, POWER], LEGACY),
        ("eval-srt-recipe-newest", [s(f"{SS}.eval-srt-recipe", "e.yaml")], IX),
    ),
    *cases("_conc_list_xor_range",
        ("range", [d(f"{SS}.conc-list"), s(f"{SS}.conc-start", 4), s(f"{SS}.conc-end", 32)]),
        ("end-not-a-doubling", [d(f"{SS}.conc-list"), s(f"{SS}.conc-start", 4), s(f"{SS}.conc-end", 48)]),
        ("start-equals-end", [d(f"{SS}.conc-list"), s(f"{SS}.conc-start", 8), s(f"{SS}.conc-end", 8)]),
    ),
    *cases("_topology_matches_multinode",
        ("single-node-with-tp", SINGLE_NODE),
    ),
    *cases("_point_keys_fit_its_kind",
        # InferenceX takes pp, dcp-size and pcp-size on single-node (agentic and fixed-seq-len) points ...
        ("pp-dcp-pcp-single-node-agentic", SINGLE_NODE + [s(f"{SS}.tp", 4), s(f"{SS}.pp", 2),
                                                          s(f"{SS}.dcp-size", 2), s(f"{SS}.pcp-size", 1)]),
        ("pp-dcp-pcp-single-node-fixed",
         SINGLE_NODE + [d(f"{SS}.kv-offloading"), ("rename", "scenarios.agentic-coding", "fixed-seq-len"),
                        d("scenarios.fixed-seq-len[0].dram-utilization"),
                        s("scenarios.fixed-seq-len[0].isl", 1024), s("scenarios.fixed-seq-len[0].osl", 1024),
                        s(f"{FSS}.tp", 4), s(f"{FSS}.pp", 2), s(f"{FSS}.dcp-size", 4)]),
        # ... ep and dp-attn on a multinode agentic point, and per-worker pp, dcp-size, pcp-size
        ("ep-dp-attn-on-a-multinode-agentic-point", [s(f"{SS}.ep", 1), s(f"{SS}.dp-attn", False)]),
        ("per-worker-context-parallelism", [s(f"{D}.dcp-size", 2), s(f"{D}.pcp-size", 1), s(f"{P}.pp", 1)]),
    ),
    *cases("_workers_declare_ep_and_dp_attn",
        ("dp-attn-true", [s(f"{P}.dp-attn", True)]),
    ),
    *cases("_dcp_divides_tp",
        ("divisor", [s(f"{D}.dcp-size", 4)]),
        ("equal", [s(f"{D}.dcp-size", 8)]),
    ),
    *cases("_hardware_on_both_roles_or_neither",
        ("both", [s(f"{P}.hardware", AMDS), s(f"{D}.hardware", AMDS)]),
    ),
    *cases("_kv_offloading_consistent",
        ("no-offloading", [s(f"{SS}.kv-offloading", "none"), d(LMC)]),
        ("offloading-absent", [d(f"{SS}.kv-offloading"), d(LMC)]),
    ),
    *cases("_single_node_agentic_declares_offloading",
        ("none", SINGLE_NODE),
    ),
    *cases("_disagg_needs_a_transfer",
        # per point, as InferenceX's CONFIGS.md allows: every point names its own
        ("in-every-point", [d("kv-p2p-transfer"), s(f"{SS}.kv-p2p-transfer", "mooncake"),
                            s(SECOND, _second_point(**{"kv-p2p-transfer": "mooncake", "conc-list": [64]}))]),
    ),
    *cases("_disagg_only_multinode",
        ("multinode-not-disagg", AGGREGATE, IX),
    ),
    *cases("_transfer_only_multinode",
        ("multinode-per-point", [d("kv-p2p-transfer"), s(f"{SS}.kv-p2p-transfer", "mooncake")]),
    ),
    *cases("_components_declared_once",
        ("router-per-point-only", [d("router"), s(f"{SS}.router", PD_PROXY)]),
    ),
    *cases("_agentic_runner_is_cluster",
        ("fixed-seq-len-on-a-sku-label", FIXED_SEQ_LEN + [s("runner", "mi355x")], IX),
    ),
    *cases("_extension_keys_absent",
        ("worker-settings", [], IX),  # prefill/decode additional-settings are InferenceX's own
    ),
]
# fmt: on


@pytest.mark.parametrize("case", REJECT)
def test_reject(case: Case):
    check_reject(case)


# Strict takes both recipe forms and the keys the older validator lacks: its own rules judge a recipe.
NOT_STRICT = {"_extension_keys_absent", "_recipe_chosen_by_its_key", "_keys_the_older_validator_lacks"}


@pytest.mark.parametrize("case", [p for p in REJECT if p.values[0].rule not in NOT_STRICT])
def test_strict_rejects_what_inferencex_rejects(case: Case):
    """Strict = every InferenceX rule + ours: each InferenceX refusal is one under strict too."""
    check_reject(Case(**{**case.__dict__, "profile": "strict"}))


@pytest.mark.parametrize("case", ACCEPT)
def test_accept(case: Case):
    check_accept(case)


@pytest.mark.parametrize("table", [REJECT, ACCEPT], ids=["reject", "accept"])
def test_every_inferencex_rule_has_cases(table):
    named = {rule.__name__ for rule in rules.INFERENCEX + rules.NEWER + rules.OLDER_ONLY + rules.EXTENSIONS}
    covered = {param.values[0].rule for param in table}
    assert covered == named | {"model"}


def test_star_in_a_config_key_names_inferencex_reason():
    findings = lint_entry(baseline(), key="kimik2.5-*-agentic", profile="inferencex")
    assert [(rel(f), f.message) for f in findings] == [
        (
            "",
            "'kimik2.5-*-agentic': '*' is reserved for changelog config-key wildcards; InferenceX refuses it "
            "in a config key",
        )
    ], shown(findings)


def test_empty_runner_label_list_names_inferencex_reason(tmp_path):
    runners = write(tmp_path, "runners.yaml", "labels:\n  cluster:x: []\n")
    code, out, _ = run_lint("--profile", "inferencex", "--runners", runners)
    assert code == 1
    assert rows(out, runners) == [
        (
            2,
            "labels.cluster:x",
            "a runner label lists no nodes; InferenceX refuses an empty label list",
            "list its node names",
        )
    ]


def test_runners_without_hardware_are_inferencex_shaped(tmp_path):
    """InferenceX's older runners.yaml may leave hardware out; strict lint asks for the shape of the runners
    a config uses (_runner_exists). Its newest validator wants the shape in `clusters:`."""
    runners = write(tmp_path, "runners.yaml", "labels:\n  h100: [h100-cw_00]\n")
    assert run_lint("--profile", "inferencex-legacy", "--runners", runners)[:2] == (0, "")
    code, out, _ = run_lint("--profile", "inferencex", "--runners", runners)
    assert code == 1 and [r[2] for r in rows(out, runners)] == [
        "InferenceX's validator since 07db303e needs `clusters:` beside labels"
    ]


# The newest form of a runners file: labels and the cluster records they name.
NEWER_RUNNERS = """\
labels:
  cluster:mi355x-amds: [mi355x-amds_00]
clusters:
  mi355x-amds: {gpus-per-node: 8, arch: x86_64, scheduler: slurm, slurm: {partition: gpu, exclusive: true}}
"""


def test_our_runners_file_is_the_older_inferencex_form():
    """Our runners.yaml is InferenceX's older form (labels and hardware): its newest validator refuses it
    for that alone. The newer form cannot hold it as it is: InferenceX puts each runner in one cluster, and
    the wide local cluster shares its first nodes with the 3-node one."""
    code, out, _ = run_lint("--profile", "inferencex", "--runners", RUNNERS)
    assert code == 1
    assert [r[2] for r in rows(out, RUNNERS)] == [
        "InferenceX's validator since 07db303e needs `clusters:` beside labels",
        "InferenceX's validator since 07db303e refuses `hardware:`",
    ]


# ---------------------------------------------------------------- our own configs, as InferenceX reads them


def _strip_extensions(entry: dict) -> dict:
    """The entry without this repository's two extension keys: what InferenceX's tools read."""
    entry = copy.deepcopy(entry)
    entry.pop("known-issue-workarounds", None)
    if not entry.get("multinode"):
        for groups in entry["scenarios"].values():
            for group in groups:
                for point in group["search-space"]:
                    point.pop("additional-settings", None)
    return entry


MASTERS = sorted((ROOT / "configs").glob("*-master.yaml"))


def _runners_for(profile: str, folder) -> Path:
    """Runners each profile takes: ours (the older form) under legacy, the newer form under inferencex."""
    return RUNNERS if profile == "inferencex-legacy" else write(folder, "runners.yaml", NEWER_RUNNERS)


PROFILES = ("inferencex", "inferencex-legacy")


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("master", MASTERS, ids=[m.name for m in MASTERS])
def test_shipped_configs_without_extensions_pass_inferencex(tmp_path, master, profile):
    """Every master config we ship, stripped of the two extension keys (the one deliberate difference),
    passes InferenceX's rules, its newest and its older."""
    stripped = {key: _strip_extensions(entry) for key, entry in load_file(master).data.items()}
    file = write(tmp_path, master.name, dump(stripped))
    assert run_lint("--profile", profile, "--runners", _runners_for(profile, tmp_path), file)[:2] == (0, "")


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("master", MASTERS, ids=[m.name for m in MASTERS])
def test_shipped_configs_differ_from_inferencex_only_by_the_extension_keys(tmp_path, master, profile):
    code, out, _ = run_lint("--profile", profile, "--runners", _runners_for(profile, tmp_path), master)
    assert all(EXTENSION in message for _, _, message, _ in rows(out, master)), out


def test_our_runners_file_is_inferencex_shaped():
    """InferenceX's older validator reads runners.yaml as labels (non-empty lists of node names) and hardware
    (available-cpu-dram-mib, gpus-per-node): nothing else, so launch facts live in configs/launch.yaml."""
    data = load_file(RUNNERS).data
    assert set(data) == {"labels", "hardware"}
    assert all(isinstance(nodes, list) and nodes for nodes in data["labels"].values())
    assert all(set(hw) == {"available-cpu-dram-mib", "gpus-per-node"} for hw in data["hardware"].values())
    assert run_lint("--profile", "inferencex-legacy", "--runners", RUNNERS) == (
        0,
        "",
        "lint: ok, 1 file (inferencex-legacy)\n",
    )
