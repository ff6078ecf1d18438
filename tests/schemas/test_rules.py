"""Accept/reject tables for this repository's rules (schemas/rules_strict.py) and the model constraints
that matter; InferenceX's own rules have theirs in test_inferencex.py.

Each case mutates the valid agentic MI355X entry of configs/amd-master.yaml. A rejected case names the
key path (below the config key), a fragment of the message and of the hint; the named rule must say it
itself. An accepted case must lint without any finding at all.
"""

from __future__ import annotations

import pytest

from schemas import rules
from scripts import PYTHON_FLOOR

from .cases import (
    AGENTIC,
    AMDS,
    IX,
    LMC,
    LOCAL,
    SINGLE_NODE,
    Case,
    add,
    cases,
    check_accept,
    check_reject,
    d,
    s,
)
from .conftest import SS, D, P, apply, baseline, lint_entry, rel, shown

HEX40 = "dd72658e7db0c6a674f473f6f9f0f5c2ebe7e523"
DIGEST = "sha256:" + "0123456789abcdef" * 4
PS, DS = f"{P}.additional-settings", f"{D}.additional-settings"
VERSION_HINT = "a release such as 0.1.17 or a git commit hash"
PROXY_1P1D = {"name": "inferencex-mooncake-lmcache-proxy", "version": "0.1.0"}
VLLM_ROUTER = {"name": "vllm-router", "version": "0.1.17"}
SGLANG_ROUTER = {"name": "sglang-router", "version": "0.2.1"}
PD_PROXY = {"name": "pd-proxy", "version": "0.1.0"}
RECIPE = "recipes/dsr1/sglang/mi355x-fp8/8k1k/disagg-variants.yaml:override_stp_1p2d_tp8"
WORKER = {"num-worker": 1, "tp": 8, "ep": 1, "dp-attn": False}
RECS = "known-issue-workarounds"
MINICPM = {"issue": "minicpm-sala-kv-indptr", "workaround": "disable-cuda-graph"}  # configs/known-issues.yaml
BUILDS = {"builds": True}  # against configs/engine-builds.yaml too
MODELS = {"models": True}  # against configs/models.yaml too
UNSET = (s(PS, []), s(DS, []))  # no settings: the baseline's are vLLM's


SGLANG_PD = [
    s("framework", "sglang-disagg"),
    s("image", "lmsysorg/sglang:v0.5.9-rocm700-mi35x"),
    s("router", SGLANG_ROUTER),
    d(LMC),
    d(f"{SS}.kv-offloading"),
]


# fmt: off
REJECT = [
    *cases("model",
        ("unknown-key-did-you-mean", [("rename", "image", "imgae")], "imgae", "unknown key 'imgae'",
         "did you mean 'image'?"),
        ("renamed-key-is-missing", [("rename", "image", "imgae")], "image", "missing required key 'image'"),
        ("unknown-nested-key", [("rename", f"{P}.num-worker", "num-workers")], f"{P}.num-workers",
         "unknown key 'num-workers'", "did you mean 'num-worker'?"),
        ("unknown-key-lists-known-ones", [s("zzzzzz", 1)], "zzzzzz", "unknown key 'zzzzzz'",
         "one of: disagg"),
        ("missing-required-key", [d("model")], "model", "missing required key 'model'"),
        ("strict-int-not-str", [s(f"{P}.tp", "8")], f"{P}.tp", "valid integer, got '8'"),
        ("strict-bool-not-int", [s(f"{P}.dp-attn", 1)], f"{P}.dp-attn", "valid boolean, got 1"),
        ("strict-bool-not-str", [s("multinode", "true")], "multinode", "valid boolean, got 'true'"),
        ("strict-str-not-int", [s("router.version", 1)], "router.version", "valid string, got 1"),
        ("num-worker-not-negative", [s(f"{P}.num-worker", -1)], f"{P}.num-worker",
         "-1 is out of range [0, 1024]"),
        ("conc-values-positive", [s(f"{SS}.conc-list", [8, 0])], f"{SS}.conc-list[1]",
         "0 is out of range [1, 65536]"),
        ("conc-negative", [s(f"{SS}.conc-list", [-8])], f"{SS}.conc-list[0]",
         "-8 is out of range [1, 65536]"),
        ("conc-list-not-empty", [s(f"{SS}.conc-list", [])], f"{SS}.conc-list", "at least 1 item"),
        ("conc-start-positive", [d(f"{SS}.conc-list"), s(f"{SS}.conc-start", 0), s(f"{SS}.conc-end", 4)],
         f"{SS}.conc-start", "0 is out of range [1, 65536]"),
        ("dram-utilization-0", [s(f"{AGENTIC}.dram-utilization", 0)], f"{AGENTIC}.dram-utilization",
         "greater than 0"),
        ("dram-utilization-1.5", [s(f"{AGENTIC}.dram-utilization", 1.5)], f"{AGENTIC}.dram-utilization",
         "less than or equal to 1"),
        ("dram-utilization-bool", [s(f"{AGENTIC}.dram-utilization", True)], f"{AGENTIC}.dram-utilization",
         "valid number"),
        ("spec-decoding-did-you-mean", [s(f"{SS}.spec-decoding", "mpt")], f"{SS}.spec-decoding",
         "'none', 'mtp' or 'draft_model'", "did you mean 'mtp'?"),
        ("kv-offloading-choice", [s(f"{SS}.kv-offloading", "disk")], f"{SS}.kv-offloading",
         "'none' or 'dram', got 'disk'"),
        ("settings-is-a-list", [s(PS, "MC_PROTOCOL=tcp")], PS, "valid list"),
        ("settings-are-strings", [add(PS, 0, 5)], f"{PS}[0]", "valid string, got 5"),
        ("router-needs-version", [s("router", {"name": "vllm-router"})], "router.version",
         "missing required key 'version'"),
        ("empty-image", [s("image", "")], "image", "'' is not an image reference",
         "[registry/]org/name[:tag]"),
        # Not a reference at all: refused by the model under every profile (it reaches a container runtime).
        ("invalid-reference", [s("image", "Not A Valid Image")], "image",
         "'Not A Valid Image' is not an image reference", "[registry/]org/name[:tag][@sha256:<digest>]", IX),
        ("shell-in-reference", [s("image", "vllm/x:v1;rm -rf /")], "image", "is not an image reference"),
        ("empty-scenario-list", [s("scenarios.fixed-seq-len", [])], "scenarios.fixed-seq-len",
         "at least 1 item"),
        ("block-not-a-map", [s("scenarios", "agentic")], "scenarios", "valid dictionary"),
    ),
    *cases("_settings_fit_engine",
        ("vllm-setting-on-sglang", SGLANG_PD + [s(DS, ["GPU_MEMORY_UTILIZATION=0.8"])], f"{DS}[0]",
         "GPU_MEMORY_UTILIZATION is a vllm/atom setting; framework sglang-disagg runs sglang",
         "sglang settings: MAX_MODEL_LEN"),
        ("sglang-flag-on-vllm", [add(PS, 7, "DISABLE_CUDA_GRAPH=true")], f"{PS}[7]",
         "DISABLE_CUDA_GRAPH is a sglang setting; framework vllm-disagg runs vllm"),
        ("on-a-single-node-server",
         SINGLE_NODE + [s(f"{SS}.additional-settings", ["MEM_FRACTION_STATIC=0.8"])],
         f"{SS}.additional-settings[0]", "MEM_FRACTION_STATIC is a sglang setting"),
    ),
    *cases("_image_public_and_pinned",
        ("personal-namespace", [s("image", "yukiozzz/x:1")], "image",
         "image publisher 'yukiozzz' is a personal or unlisted namespace", "use one of vllm/, rocm/"),
        ("personal-even-with-digest", [s("image", f"yukiozzz/x@{DIGEST}")], "image", "personal or unlisted"),
        ("unlisted-registry", [s("image", "ghcr.io/foo/bar:v1")], "image",
         "'ghcr.io/foo' is an unlisted registry"),
        ("latest-tag", [s("image", "vllm/vllm-openai-rocm:latest")], "image", "image tag 'latest' floats",
         "pin a release tag or @sha256 digest"),
        ("no-tag", [s("image", "vllm/vllm-openai-rocm")], "image", "image has no tag (means :latest",
         "pin a release tag or digest"),
        ("floating-nightly", [s("image", "vllm/vllm-openai-rocm:nightly")], "image",
         "image tag 'nightly' floats"),
        ("tag-without-digits", [s("image", "vllm/vllm-openai-rocm:dmabuf")], "image", "tag 'dmabuf' floats"),
    ),
    *cases("_settings_known_and_typed",
        ("not-key-value", [add(PS, 0, "MC_PROTOCOL")], f"{PS}[0]", "expected 'KEY=VALUE', got 'MC_PROTOCOL'"),
        ("lowercase-key", [add(PS, 0, "mc_protocol=tcp")], f"{PS}[0]",
         "key 'mc_protocol' must be UPPER_SNAKE_CASE"),
        ("unknown-did-you-mean", [add(PS, 0, "MC_PROTOKOL=tcp")], f"{PS}[0]",
         "unknown setting 'MC_PROTOKOL' (did you mean 'MC_PROTOCOL'?)"),
        ("unknown-far-from-any", [add(DS, 2, "VLLM_PATCH_46240=1")], f"{DS}[2]",
         "unknown setting 'VLLM_PATCH_46240' (see schemas/settings.py"),
        ("bad-int", [add(PS, 7, "MAX_NUM_SEQS=8.5")], f"{PS}[7]",
         "MAX_NUM_SEQS: expected an integer of at most 18 digits, got '8.5'", "vLLM and ATOM --max-num-seqs"),
        ("int-below-range", [add(PS, 7, "MC_NUM_WORKERS=0")], f"{PS}[7]",
         "MC_NUM_WORKERS: 0 is out of range [1, 256]"),
        ("float-range", [add(PS, 7, "GPU_MEMORY_UTILIZATION=1.5")], f"{PS}[7]", "1.5 is out of range (0, 1]"),
        ("float-open-bound", [add(PS, 7, "GPU_MEMORY_UTILIZATION=0")], f"{PS}[7]",
         "0.0 is out of range (0, 1]"),
        ("float-nan", [add(PS, 7, "GPU_MEMORY_UTILIZATION=nan")], f"{PS}[7]", "expected a number, got 'nan'"),
        ("bad-bool", [add(PS, 7, "ENABLE_PREFIX_CACHING=yes")], f"{PS}[7]",
         "expected 1/0 or true/false, got 'yes'"),
        ("choice-did-you-mean", [add(PS, 0, "MC_PROTOCOL=rdmaa")], f"{PS}[0]",
         "'rdmaa' is not allowed (did you mean 'rdma'?)", "Mooncake transport"),
        ("ident-dots-only-start", [add(PS, 2, "WEKA_LOADER_OVERRIDE=.hidden")], f"{PS}[2]",
         "expected a name of ASCII letters, digits, '.', '_', '-' (at most 128), got '.hidden'"),
        ("ident-empty", [add(PS, 2, "WEKA_LOADER_OVERRIDE=")], f"{PS}[2]", "expected a name"),
        ("ident-too-long", [add(PS, 2, "WEKA_LOADER_OVERRIDE=" + "a" * 129)], f"{PS}[2]", "expected a name"),
        ("path-relative", [add(PS, 7, "HF_HUB_CACHE=models/hub")], f"{PS}[7]", "expected an absolute path"),
        ("path-dotdot", [add(PS, 7, "HF_HUB_CACHE=/models/../../etc")], f"{PS}[7]",
         "expected an absolute path of ASCII letters, digits, '._/+-' without '.' or '..' parts"),
        ("path-dotdot-at-end", [add(PS, 7, "HF_HUB_CACHE=/models/..")], f"{PS}[7]", "without '.' or '..'"),
        ("path-dot", [add(PS, 7, "HF_HUB_CACHE=/models/./hub")], f"{PS}[7]", "without '.' or '..'"),
        ("path-double-slash", [add(PS, 7, "HF_HUB_CACHE=//models")], f"{PS}[7]", "expected an absolute path"),
        # int() refuses numbers of more than 4300 digits with a ValueError of its own: never reached
        ("int-too-long", [add(PS, 7, "MAX_NUM_SEQS=" + "9" * 1000)], f"{PS}[7]",
         "MAX_NUM_SEQS: expected an integer of at most 18 digits, got '99999"),
        ("float-huge-exponent", [add(PS, 7, "GPU_MEMORY_UTILIZATION=1e99999")], f"{PS}[7]",
         "expected a number"),
        ("float-inf-by-exponent", [add(PS, 7, "GPU_MEMORY_UTILIZATION=9e999")], f"{PS}[7]",
         "inf is out of range (0, 1]"),
        ("derived-l1-size", [add(PS, 7, "LMCACHE_L1_SIZE_GB=1200")], f"{PS}[7]",
         "LMCACHE_L1_SIZE_GB: is derived from the server's DRAM budget: min(the runner's "
         "available-cpu-dram-mib, 3 TB) x the scenario's dram-utilization x the GPUs it uses / "
         "gpus-per-node, in GB, as whole GiB; remove it"),
        ("stated-prefill-nodes-not-a-count", [add(PS, 7, "PREFILL_NODES=one")], f"{PS}[7]",
         "PREFILL_NODES: is derived from prefill num-worker x the nodes one worker spans"),
        ("derived-router-type", [add(DS, 2, "ROUTER_TYPE=mc-proxy")], f"{DS}[2]",
         "ROUTER_TYPE: is derived from the entry's router.name; remove it"),
        ("lmcache-on-decode", [add(DS, 2, "LMCACHE_CHUNK_SIZE=256")], f"{DS}[2]",
         "LMCACHE_CHUNK_SIZE is not a decode setting", "LMCache runs only on prefill nodes"),
        ("decode-only-on-prefill", [add(PS, 7, "DECODE_MTP_SIZE=2")], f"{PS}[7]",
         "DECODE_MTP_SIZE is not a prefill setting", "allowed in: decode"),
        ("set-twice", [add(PS, 7, "MC_PROTOCOL=tcp")], f"{PS}[7]", "MC_PROTOCOL is set twice",
         "first at additional-settings[0]"),
    ),
    *cases("_shared_settings_agree",
        ("mc-protocol", [add(PS, 0, "MC_PROTOCOL=rdma")], SS,
         "MC_PROTOCOL differs between prefill (rdma) and decode (tcp)", "both roles must use the same value"),
        ("mc-protocol-vs-default", [d(f"{DS}[0]"), add(PS, 0, "MC_PROTOCOL=rdma")], SS,
         "MC_PROTOCOL differs between prefill (rdma) and decode (tcp)"),
        ("max-model-len", [d(f"{DS}[1]")], SS,
         "MAX_MODEL_LEN differs between prefill (262144) and decode (None)"),
    ),
    *cases("_recipe_named_once",
        ("both-forms", [s(f"{SS}.srt-recipe", RECIPE), add(PS, 7, f"CONFIG_FILE={RECIPE}")], f"{PS}[7]",
         "the point's srt-recipe is named twice: also by its srt-recipe", "name it once"),
        ("two-workers", [add(PS, 7, "EVAL_CONFIG_FILE=a.yaml"), add(DS, 2, "EVAL_CONFIG_FILE=b.yaml")],
         f"{DS}[2]",
         "the point's eval-srt-recipe is named twice", None),
    ),
    *cases("_aggregate_multinode_not_rendered",
        ("aggregate", [s("disagg", False), d(P), d(D), s(f"{SS}.worker", WORKER), s(f"{SS}.num-nodes", 1)],
         f"{SS}.worker", "an aggregated multinode point (worker on num-nodes nodes) is not rendered here",
         None),
    ),
    *cases("_framework_rendered",
        ("another-engine", [s("framework", "trt-disagg")], "framework",
         "framework 'trt-disagg' is not rendered (vllm, sglang, atom are)",
         "lint other engines' configs with PROFILE=inferencex"),
    ),
    *cases("_router_known_and_versioned",
        ("unknown-did-you-mean", [s("router", {"name": "vllm-routr", "version": "0.1.17"})], "router.name",
         "unknown router 'vllm-routr'", "did you mean 'vllm-router'?"),
        ("version-1", [s("router.version", "1"), s("router.name", "vllm-router")], "router.version",
         "router version '1' is not a release or commit", VERSION_HINT),
        ("version-latest", [s("router", {**VLLM_ROUTER, "version": "latest"})], "router.version",
         "router version 'latest' is not a release or commit"),
        ("pd-proxy-own-version", [s("router.version", "0.1.17")], "router.version",
         "pd-proxy is this repository's proxy, version 0.1.0", 'version: "0.1.0"'),
        ("search-space-router", [s(f"{SS}.router", {**VLLM_ROUTER, "version": "main"})],
         f"{SS}.router.version", "router version 'main' is not a release or commit"),
    ),
    *cases("_router_fits_topology",
        ("1p1d-proxy-2-prefills", [s("router", PROXY_1P1D), s(f"{P}.num-worker", 2)], f"{P}.num-worker",
         "router inferencex-mooncake-lmcache-proxy serves at most 1 prefill worker(s), got 2",
         "forwards to the first prefill and decode only"),
        ("1p1d-proxy-2-decodes", [s("router", PROXY_1P1D), s(f"{D}.num-worker", 2)], f"{D}.num-worker",
         "serves at most 1 decode worker(s), got 2"),
        ("framework", [s("router", SGLANG_ROUTER)], "framework",
         "router sglang-router cannot front vllm-disagg", "one of: sglang-disagg"),
        ("transfer", [s("kv-p2p-transfer", "nixl")], "kv-p2p-transfer",
         "router pd-proxy does not speak the nixl PD contract", "one of: mooncake"),
        ("transfer-per-point", [d("kv-p2p-transfer"), s(f"{SS}.kv-p2p-transfer", "nixl")],
         f"{SS}.kv-p2p-transfer", "router pd-proxy does not speak the nixl PD contract"),
    ),
    *cases("_disagg_is_complete",
        ("unknown-transfer", [s("kv-p2p-transfer", "mooncak")], "kv-p2p-transfer",
         "unknown kv-p2p-transfer 'mooncak'", "did you mean 'mooncake'?"),
        ("unknown-transfer-per-point", [d("kv-p2p-transfer"), s(f"{SS}.kv-p2p-transfer", "moonkake")],
         f"{SS}.kv-p2p-transfer", "unknown kv-p2p-transfer 'moonkake'", "did you mean 'mooncake'?"),
        ("no-router", [d("router")], "", "disagg entry without router", "router: {name: pd-proxy"),
    ),
    *cases("_prefill_workers_serve",
        ("no-prefill-worker", [s(f"{P}.num-worker", 0)], f"{P}.num-worker",
         "no prefill worker: nothing would serve the requests",
         "an aggregated run writes decode num-worker: 0"),
    ),
    *cases("_offload_backend_versioned",
        ("no-version", [d(f"{LMC}.version")], LMC, "lmcache backend without a version",
         f"version: {VERSION_HINT}"),
        ("bad-version", [s(f"{LMC}.version", "latest")], f"{LMC}.version",
         "backend version 'latest' is not a release or commit", VERSION_HINT),
    ),
    *cases("_runner_exists",
        ("runner-did-you-mean", [s("runner", "cluster:mi355x-amd")], "runner",
         "runner 'cluster:mi355x-amd' is not in runners.yaml", f"did you mean '{AMDS}'?"),
        ("worker-hardware", [s(f"{P}.hardware", "cluster:mi355x-amdz")], f"{P}.hardware",
         "runner 'cluster:mi355x-amdz' is not in runners.yaml", f"did you mean '{AMDS}'?"),
        ("no-hardware-entry", [s("runner", "cluster:new")], "runner",
         "runner 'cluster:new' has no node shape in runners.yaml",
         "add hardware.<label> (for a cluster:<id> label: its clusters.<id> record) with gpus-per-node",
         {"runner_ops": (s("labels.cluster:new", ["n0", "n1"]),)}),
    ),
    *cases("_runner_launchable",
        ("no-launch-profile", [], "runner", f"runner '{AMDS}' has no launch profile in configs/launch.yaml",
         "add profiles.<label> with gpu-vendor, partition, container-runtime and model-root",
         {"launch_ops": (d(f"profiles.{AMDS}"),)}),
        ("launch-profile-did-you-mean", [], "runner", f"runner '{AMDS}' has no launch profile",
         "did you mean 'cluster:mi355x-amdz'?",
         {"launch_ops": (("rename", f"profiles.{AMDS}", "cluster:mi355x-amdz"),)}),
    ),
    *cases("_node_tools_run_on_the_runners_python",
        ("image-python-below-the-floor", [], "runner",
         f"the image Python 3.7 of runner '{AMDS}' (configs/launch.yaml node-setup python) is older than the "
         f"node tools support ({PYTHON_FLOOR})", f"an image with Python {PYTHON_FLOOR} or newer",
         {"launch_ops": (s(f"profiles.{AMDS}.node-setup.python", "3.7"),)}),
    ),
    *cases("_topology_fits_runner",
        ("stated-nodes-disagree", [add(PS, 7, "PREFILL_NODES=2")], f"{P}.additional-settings",
         "PREFILL_NODES=2, but 1 worker(s) of 8 GPUs take 1 8-GPU node(s)",
         "PREFILL_NODES=1, or leave it out (it is derived)"),
        ("stated-nodes-of-a-small-worker", [s(f"{P}.tp", 4), s(f"{P}.ep", 4), add(PS, 7, "PREFILL_NODES=2")],
         f"{P}.additional-settings", "PREFILL_NODES=2, but 1 worker(s) of 4 GPUs take 1 8-GPU node(s)"),
        ("pp-multiplies-partial", [s(f"{D}.tp", 4), s(f"{D}.pp", 3)], D,
         "decode: a worker of 12 GPUs does not fill whole 8-GPU nodes",
         "a worker spans whole nodes (tp x pp x pcp-size a multiple of gpus-per-node) or fits in one"),
        ("ep-above-worker-gpus", [s(f"{P}.ep", 16)], f"{P}.ep",
         "ep 16 exceeds the 8 GPUs of one prefill worker", "ep <= tp x pp x pcp-size = 8"),
        ("pcp-multiplies-partial", [s(f"{D}.tp", 4), s(f"{D}.pcp-size", 3)], D,
         "decode: a worker of 12 GPUs does not fill whole 8-GPU nodes"),
        ("single-node-footprint", SINGLE_NODE + [s(f"{SS}.pp", 2)], f"{SS}.tp",
         "a single-node server of 16 GPUs (tp x pp x pcp-size) exceeds the 8 GPUs of a node"),
        ("more-nodes-than-runner", [s(f"{P}.num-worker", 10)], P,
         "prefill needs 10 nodes, the runner lists 9", "fewer workers or a larger runner"),
        ("pp-multiplies-nodes", [s(f"{D}.pp", 2), s(f"{D}.num-worker", 5)], D,
         "decode needs 10 nodes, the runner lists 9"),
    ),
    *cases("_dram_budget_tiles_node",
        # 4 x tp6 fill 3 nodes, but a 6-GPU engine's share of an 8-GPU node's DRAM is undefined
        ("tp6-prefill", [s(f"{P}.tp", 6), s(f"{P}.ep", 6), s(f"{P}.num-worker", 4)], P,
         "6 GPUs per engine neither divide nor fill a 8-GPU node", "tp x pp x pcp-size dividing 8"),
        ("runner-states-no-dram", [], P, f"runner '{AMDS}' states no available-cpu-dram-mib",
         f"add hardware.{AMDS}.available-cpu-dram-mib to runners.yaml",
         {"runner_ops": (d(f"hardware.{AMDS}.available-cpu-dram-mib"),)}),
    ),
    *cases("_lmcache_l1_fits",
        # The seed: min(3,095,781 MiB, the 3 TB cap) x 0.80 x 8/8 GPUs = 2399 GB = 2234 GiB.
        ("below-init-size", [add(PS, 7, "LMCACHE_L1_INIT_SIZE_GB=2500")], P,
         "LMCache L1 of 2234 GiB (the server's DRAM budget of 2399 GB) is below its init size 2500 GiB",
         "raise dram-utilization or set LMCACHE_L1_INIT_SIZE_GB lower"),
        # 4 of 8 GPUs: half the budget, 1199 GB (InferenceX: 1.5 TB a server at full utilization)
        ("half-node-halves-it", [s(f"{P}.tp", 4), s(f"{P}.num-worker", 2), s(f"{P}.ep", 4),
                                 add(PS, 7, "LMCACHE_L1_INIT_SIZE_GB=1117")], P,
         "LMCache L1 of 1116 GiB (the server's DRAM budget of 1199 GB) is below its init size 1117 GiB"),
        ("small-share-vs-default-init", [s(f"{AGENTIC}.dram-utilization", 0.005)], P,
         "LMCache L1 of 13 GiB (the server's DRAM budget of 14 GB) is below its init size 20 GiB"),
        ("small-runner", [s("runner", LOCAL)], P,
         "LMCache L1 of 2 GiB (the server's DRAM budget of 3 GB) is below"),
    ),
    *cases("_context_fits_model",
        # Kimi-K2.5's max-positions is 262,144 (configs/models.yaml)
        ("above-max-positions", [s(f"{PS}[1]", "MAX_MODEL_LEN=300000")], f"{PS}[1]",
         "MAX_MODEL_LEN=300000 (300,000 tokens) is above the 262,144 positions of model amd/Kimi-K2.5-MXFP4 "
         "(configs/models.yaml max-positions)", "MAX_MODEL_LEN=262144 at most", MODELS),
        ("k-suffix-counts", [s(f"{DS}[1]", "MAX_MODEL_LEN=257K")], f"{DS}[1]", "(263,168 tokens) is above",
         None, MODELS),
        ("on-a-single-node-server",
         SINGLE_NODE + [s(f"{SS}.additional-settings", ["MAX_MODEL_LEN=1000000"])],
         f"{SS}.additional-settings[0]", "is above the 262,144 positions", None, MODELS),
    ),
    *cases("_offload_keeps_prefix_caching",
        ("prefix-caching-off", [add(PS, 7, "ENABLE_PREFIX_CACHING=false")], PS,
         "prefix caching is off on the engine that offloads to LMCache",
         "add ENABLE_PREFIX_CACHING=true to its additional-settings"),
    ),
    *cases("_image_fits_gpu_vendor",
        # The runner's other image of the same engine build (configs/engine-builds.yaml) is the fix.
        ("cuda-image-on-amd", [s("image", "vllm/vllm-openai:v0.33.0")], "image",
         "image vllm/vllm-openai:v0.33.0 is built for NVIDIA GPUs (CUDA), and runner cluster:mi355x-amds has "
         "gpu-vendor amd", "use vllm/vllm-openai-rocm:v0.33.0; images for AMD GPUs (ROCm): "
         "vllm/vllm-openai-rocm, lmsysorg/sglang-rocm, lmsysorg/sglang:*-rocm*, rocm/*", BUILDS),
        # Without the build, vLLM's naming says the same (it publishes both under one tag).
        ("cuda-image-on-amd-by-name", [s("image", "vllm/vllm-openai:v0.40.0")], "image",
         "is built for NVIDIA GPUs (CUDA)", "use vllm/vllm-openai-rocm:v0.40.0"),
        ("rocm-image-on-nvidia", [s("runner", "cluster:h200-dgxc")], "image",
         "image vllm/vllm-openai-rocm:v0.33.0 is built for AMD GPUs (ROCm), and runner cluster:h200-dgxc "
         "has gpu-vendor nvidia", "use vllm/vllm-openai:v0.33.0", BUILDS),
        ("alias-named", [s("runner", "mi355x"), s("image", "vllm/vllm-openai:v0.33.0")], "image",
         "runner mi355x (cluster:mi355x-amds) has gpu-vendor amd"),
        ("sglang-cuda-on-amd", SGLANG_PD + [s("image", "lmsysorg/sglang:v0.5.23")], "image",
         "lmsysorg/sglang:v0.5.23 is built for NVIDIA GPUs (CUDA)",
         "use one of the images for AMD GPUs (ROCm): vllm/vllm-openai-rocm, lmsysorg/sglang-rocm"),
        ("cpu-build-on-amd", [s("image", "vllm/vllm-openai-cpu:v0.32.0")], "image",
         "is built for CPUs, and runner cluster:mi355x-amds has gpu-vendor amd"),
    ),
    *cases("_mooncake_needs_vllm_016",
        ("vllm-0.15.1", [s("image", "vllm/vllm-openai-rocm:v0.15.1")], "image",
         "vLLM 0.15.1 speaks the old Mooncake PD contract", "use vLLM >= 0.16"),
        ("vllm-0.9-rocm-suffix", [s("image", "vllm/vllm-openai-rocm:0.9.2-rocm")], "image",
         "vLLM 0.9.2 speaks the old Mooncake PD contract"),
    ),
    *cases("_image_has_engine_build",
        ("no-build", [s("image", "vllm/vllm-openai-rocm:v0.32.0")], "image",
         "image vllm/vllm-openai-rocm:v0.32.0 carries no engine build listed in configs/engine-builds.yaml",
         "did you mean 'vllm/vllm-openai-rocm:v0.33.0'?", BUILDS),
        ("build-of-another-engine", [s("image", "lmsysorg/sglang:v0.5.23")], "image",
         "carries sglang-0.5.23, a sglang build; the framework runs vllm", None, BUILDS),
    ),
    # The SGLang MiniCPM-SALA cases, on their own fixture entry, are in test_known_issues.py.
    *cases("_known_issues_handled",
        # Known issue vllm-multiconnector-prom-metrics: vLLM 0.32 dies after the first PD request with the
        # LMCache prefill's MultiConnector.
        ("vllm-0.32-multiconnector", [s("image", "vllm/vllm-openai-rocm:v0.32.0")], "image",
         "known issue vllm-multiconnector-prom-metrics", "use an image of vllm-0.33.0"),
        ("workaround-for-another-engine", [s(RECS, [MINICPM])], f"{RECS}[0]",
         "recorded workaround disable-cuda-graph is for an issue this config does not trigger",
         "framework vllm-disagg does not run sglang"),
        ("unknown-issue-did-you-mean", [s(RECS, [dict(MINICPM, issue="minicpm-sala-kv-indtpr")])],
         f"{RECS}[0].issue", "unknown known issue 'minicpm-sala-kv-indtpr'",
         "did you mean 'minicpm-sala-kv-indptr'?"),
    ),
]

ACCEPT = [
    *cases("model",
        ("dram-utilization-1.0", [s(f"{AGENTIC}.dram-utilization", 1.0)]),
        ("dram-utilization-int-1", [s(f"{AGENTIC}.dram-utilization", 1)]),
        ("optional-keys-absent", [d(f"{SS}.spec-decoding"), d(f"{SS}.kv-offloading"), d(LMC)]),
        ("aggregated-decode-count-0", [s(f"{D}.num-worker", 0)]),
        ("spec-decoding-mtp", [s(f"{SS}.spec-decoding", "mtp")]),
    ),
    *cases("_topology_fits_runner",
        # InferenceX runs a TP4 prefill alone on an 8-GPU node (its other GPUs idle), and states node counts
        ("tp4-worker-owns-a-node", [s(f"{P}.tp", 4), s(f"{P}.ep", 4), add(PS, 7, "PREFILL_NODES=1")]),
        ("stated-nodes-agree", [add(PS, 7, "PREFILL_NODES=1"), add(DS, 2, "DECODE_NODES=1")]),
    ),
    *cases("_settings_fit_engine",
        ("sglang-settings-on-sglang", SGLANG_PD + [s(PS, ["MEM_FRACTION_STATIC=0.8", "MAX_MODEL_LEN=4096"]),
                                                   s(DS, ["MEM_FRACTION_STATIC=0.8", "MAX_MODEL_LEN=4096"])]),
        ("single-node-server", SINGLE_NODE + [s(f"{SS}.additional-settings", ["MAX_MODEL_LEN=4096"])]),
        ("tp4-server-on-an-8-gpu-node", SINGLE_NODE + [s(f"{SS}.tp", 4)]),
        ("unknown-engine-unchecked", [s("framework", "atom-disagg")], IX),
    ),
    *cases("_image_public_and_pinned",
        ("digest", [s("image", f"vllm/vllm-openai-rocm@{DIGEST}")]),
        ("nightly-with-commit", [s("image", f"vllm/vllm-openai-rocm:nightly-{HEX40}")]),
        ("explicit-docker-io", [s("image", "docker.io/vllm/vllm-openai-rocm:v0.33.0")]),
        ("rocm-org-dated", [s("image", "rocm/vllm-dev:nightly_main_20260801")]),
        ("personal-under-inferencex", [s("image", "yukiozzz/x:dmabuf")], IX),
    ),
    *cases("_settings_known_and_typed",
        ("typed-values", [add(PS, 7, "GPU_MEMORY_UTILIZATION=0.9"), add(PS, 8, "ENABLE_PREFIX_CACHING=true"),
                          add(PS, 9, "MC_NUM_WORKERS=10"), add(PS, 10, "HF_HUB_CACHE=/models/.cache/hub"),
                          add(PS, 11, "LMCACHE_EVICTION_POLICY=LRU"), add(DS, 2, "DECODE_MTP_SIZE=2"),
                          add(DS, 3, "MAX_NUM_BATCHED_TOKENS=8192")]),
        ("float-forms", [add(PS, 7, "GPU_MEMORY_UTILIZATION=1"), add(DS, 2, "GPU_MEMORY_UTILIZATION=.85")]),
        ("unknown-under-inferencex", [add(PS, 7, "VLLM_PATCH_46240=1")], IX),
        ("no-settings", [d(PS), d(DS)]),
    ),
    *cases("_shared_settings_agree",
        ("both-rdma", [add(PS, 0, "MC_PROTOCOL=rdma"), add(DS, 0, "MC_PROTOCOL=rdma")]),
        ("explicit-equals-default", [d(f"{DS}[0]")]),
    ),
    *cases("_recipe_named_once",
        ("eval-recipe-once", [s(f"{SS}.eval-srt-recipe", "e.yaml")], IX),
    ),
    *cases("_aggregate_multinode_not_rendered",
        ("aggregate-under-inferencex", [s("disagg", False), d(P), d(D), d(LMC),
                                        s(f"{SS}.kv-offloading", "none"), s(f"{SS}.worker", WORKER),
                                        s(f"{SS}.num-nodes", 1)], IX),
    ),
    *cases("_framework_rendered",
        ("vllm", []),
        ("atom-under-inferencex", [s("framework", "atom-disagg")], IX),
    ),
    *cases("_router_known_and_versioned",
        ("release", [s("router", VLLM_ROUTER)]),
        ("commit", [s("router", {**VLLM_ROUTER, "version": HEX40})]),
        ("short-commit", [s("router", {**VLLM_ROUTER, "version": HEX40[:7]})]),
        ("anything-under-inferencex", [s("router", {"name": "x", "version": "1"})], IX),
    ),
    *cases("_router_fits_topology",
        ("1p1d-proxy-1p1d", [s("router", PROXY_1P1D)]),
        ("vllm-router-nixl", [s("router", VLLM_ROUTER), s("kv-p2p-transfer", "nixl")]),
        ("pd-proxy-xpyd", [s(f"{P}.num-worker", 2), s(f"{D}.num-worker", 3)]),
    ),
    *cases("_prefill_workers_serve",
        ("aggregated-run", [s(f"{D}.num-worker", 0)]),
    ),
    *cases("_dram_budget_tiles_node",
        ("prefill-spans-two-nodes", [s(f"{P}.pp", 2)]),
        ("two-tp4-per-node", [s(f"{P}.tp", 4), s(f"{P}.num-worker", 2), s(f"{P}.ep", 4)]),
    ),
    *cases("_disagg_is_complete",
        ("router-per-search-space", [d("router"), s(f"{SS}.router", PD_PROXY)]),
        ("transfer-per-point", [d("kv-p2p-transfer"), s(f"{SS}.kv-p2p-transfer", "mooncake")]),
        ("sglang-mori", SGLANG_PD + [s("kv-p2p-transfer", "mori"), s(PS, []), s(DS, [])]),
    ),
    *cases("_offload_backend_versioned",
        ("release", [s(f"{LMC}.version", "0.5.6")]),
        ("post-release", [s(LMC, {"name": "mooncake", "version": "0.3.11.post1"})]),
        ("commit", [s(f"{LMC}.version", HEX40)]),
    ),
    *cases("_runner_exists",
        ("worker-hardware-known", [s(f"{P}.hardware", AMDS), s(f"{D}.hardware", AMDS)]),
        ("unchecked-under-inferencex", [s("runner", "cluster:nowhere")], IX),
    ),
    *cases("_runner_launchable",
        ("optional-facts-absent", [], {"launch_ops": (d(f"profiles.{AMDS}.nic-devices"),
                                                      d(f"profiles.{AMDS}.time-limit"))}),
        ("unchecked-under-inferencex", [], IX | {"launch_ops": (d(f"profiles.{AMDS}"),)}),
    ),
    *cases("_node_tools_run_on_the_runners_python",
        ("the-floor-itself", [], {"launch_ops": (s(f"profiles.{AMDS}.node-setup.python", PYTHON_FLOOR),)}),
        ("a-two-digit-minor", [], {"launch_ops": (s(f"profiles.{AMDS}.node-setup.python", "3.10"),)}),
    ),
    *cases("_topology_fits_runner",
        ("2x-tp4-fill-a-node", [s(f"{P}.tp", 4), s(f"{P}.num-worker", 2), s(f"{P}.ep", 4)]),
        ("pp-multiplies-whole", [s(f"{P}.tp", 4), s(f"{P}.pp", 2)]),
        ("worker-spans-2-nodes", [s(f"{D}.pp", 2)]),
        ("ep-equals-worker-gpus", [s(f"{P}.ep", 8)]),
        ("9-nodes-in-all", [s(f"{P}.num-worker", 5), s(f"{D}.num-worker", 4)]),
    ),
    *cases("_lmcache_l1_fits",
        ("equals-init-size", [add(PS, 7, "LMCACHE_L1_INIT_SIZE_GB=2234")]),
        ("half-node-equals-init-size", [s(f"{P}.tp", 4), s(f"{P}.num-worker", 2), s(f"{P}.ep", 4),
                                        add(PS, 7, "LMCACHE_L1_INIT_SIZE_GB=1116")]),
        ("small-share-above-init", [s(f"{AGENTIC}.dram-utilization", 0.01)]),
        ("small-runner-small-init", [s("runner", LOCAL), add(PS, 7, "LMCACHE_L1_INIT_SIZE_GB=2")]),
    ),
    *cases("_offload_keeps_prefix_caching",
        ("prefix-caching-on", [add(PS, 7, "ENABLE_PREFIX_CACHING=true")]),
        ("off-without-lmcache", [add(PS, 7, "ENABLE_PREFIX_CACHING=false"), d(LMC),
                                 d(f"{SS}.kv-offloading")]),
    ),
    *cases("_image_fits_gpu_vendor",
        ("rocm-image-on-amd", [], BUILDS),
        ("cuda-image-on-nvidia", [s("runner", "cluster:h200-dgxc"), s("image", "vllm/vllm-openai:v0.33.0")],
         BUILDS),
        # A simulator runner runs no image's engines: the image is only recorded.
        ("cuda-image-on-a-simulator", [s("runner", LOCAL), add(PS, 7, "LMCACHE_L1_INIT_SIZE_GB=2"),
                                       s("image", "vllm/vllm-openai:v0.33.0")]),
        # A name that does not say its vendor is not refused by a guess.
        ("vendor-not-told", SGLANG_PD + [*UNSET, s("image", "lmsysorg/sglang:v0.5.9-minicpm-sala")]),
        ("unlisted-tag-form", SGLANG_PD + [*UNSET, s("image", "lmsysorg/sglang:v0.5.23-npu")]),
    ),
    *cases("_context_fits_model",
        ("at-max-positions", [], MODELS),
        ("below", [s(f"{PS}[1]", "MAX_MODEL_LEN=32K"), s(f"{DS}[1]", "MAX_MODEL_LEN=32K")], MODELS),
        ("256K-is-max-positions", [s(f"{PS}[1]", "MAX_MODEL_LEN=256K"), s(f"{DS}[1]", "MAX_MODEL_LEN=256K")],
         MODELS),
        ("unset", [d(f"{PS}[1]"), d(f"{DS}[1]")], MODELS),
    ),
    *cases("_mooncake_needs_vllm_016",
        # Without LMCache: with it, 0.16 also carries known issue vllm-multiconnector-prom-metrics.
        ("vllm-0.16", [s("image", "vllm/vllm-openai-rocm:v0.16.0"), d(LMC), d(f"{SS}.kv-offloading")]),
        ("vllm-0.15.1-nixl", [s("image", "vllm/vllm-openai-rocm:v0.15.1"), s("router", VLLM_ROUTER),
                              s("kv-p2p-transfer", "nixl")]),
    ),
    *cases("_image_has_engine_build",
        ("listed-build", [], BUILDS),
        ("registry-spelled-out", [s("image", "docker.io/vllm/vllm-openai-rocm:v0.33.0")], BUILDS),
    ),
    *cases("_known_issues_handled",
        ("no-workaround-recorded", [s(RECS, [])]),
        ("vllm-0.32-without-lmcache", [s("image", "vllm/vllm-openai-rocm:v0.32.0"), d(LMC),
                                       d(f"{SS}.kv-offloading")]),
    ),
]
# fmt: on


def test_baseline_is_valid_in_both_profiles():
    for profile in ("strict", "inferencex"):
        assert lint_entry(baseline(), profile=profile) == [], profile


@pytest.mark.parametrize("case", REJECT)
def test_reject(case: Case):
    check_reject(case)


@pytest.mark.parametrize("case", ACCEPT)
def test_accept(case: Case):
    check_accept(case)


@pytest.mark.parametrize("table", [REJECT, ACCEPT], ids=["reject", "accept"])
def test_every_strict_rule_has_cases(table):
    named = {rule.__name__ for rule in rules.STRICT}
    covered = {param.values[0].rule for param in table}
    assert covered == named | {"model"}


def test_profiles_are_inferencex_and_strict():
    """inferencex: InferenceX's rules as its newest validator has them and the refusal of the extension keys;
    inferencex-legacy: as its older validator had them; strict: InferenceX's rules and this repository's
    (the extension keys accepted: the one deliberate difference)."""
    strict = rules.PROFILES["strict"]
    assert rules.PROFILES["inferencex"] == rules.INFERENCEX + rules.NEWER + rules.EXTENSIONS
    assert rules.PROFILES["inferencex-legacy"] == rules.INFERENCEX + rules.OLDER_ONLY + rules.EXTENSIONS
    assert strict[: len(rules.INFERENCEX)] == rules.INFERENCEX and set(rules.STRICT) <= set(strict)
    assert not set(rules.EXTENSIONS) & set(strict)


def test_problem_repeated_across_points_is_reported_once():
    entry = baseline()
    space = entry["scenarios"]["agentic-coding"][0]["search-space"]
    space.append(dict(space[0], **{"conc-list": [64]}))
    entry["framework"] = "sglang-disagg"
    findings = [f for f in lint_entry(entry) if rel(f) == "framework"]
    assert len(findings) == 1, shown(findings)


def test_a_model_error_hides_rule_findings_of_its_entry_only():
    """Rules need a valid entry: a type error stops them for its entry (test_cli: other entries go on)."""
    broken = apply(baseline(), [s("image", "yukiozzz/x:1"), s(f"{P}.tp", "8")])
    assert [rel(f) for f in lint_entry(broken)] == [f"{P}.tp"]
