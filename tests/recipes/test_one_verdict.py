"""A recipe is data, and lint and render give one verdict.

- A new model on a new cluster (MiniMax-M2.5 on a 4-node MI355X site, vLLM disagg, Mooncake rdma, 1P2D,
  8k/1k, EP8) is YAML only: the model's block in configs/models.yaml, a runner, a launch profile, a master
  entry. Its rendered launch carries what InferenceX's known-working MI355X launch ran for that model.
- Every refusal of the renderer is a lint finding at the config's file and line: `make lint` refuses what
  `make render` would, never the renderer first.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from recipes.build import build_plan
from recipes.render import Loaded, render_plan
from schemas import lint

ROOT = Path(__file__).resolve().parents[2]
SITE = "cluster:mi355x-newsite"
RUNNERS = f"""
labels:
  {SITE}: [n0, n1, n2, n3]
hardware:
  {SITE}: {{ gpus-per-node: 8 }}
"""
LAUNCH = f"""
profiles:
  {SITE}:
    gpu-vendor: amd
    partition: gpu
    container-runtime: docker
    image-staging: {{ archive: /data/images }}
    model-root: /data/models
    data-plane-interface: ens1
    nic-devices: [ionic_0, ionic_1]
    mooncake-registration: dmabuf
    node-setup: {{ python: "3.12", platform: manylinux_2_28_x86_64 }}
"""
KEY = "minimaxm2.5-fp8-mi355x-vllm-disagg"
MASTER = f"""
{KEY}:
  image: vllm/vllm-openai-rocm:v0.33.0
  model: MiniMaxAI/MiniMax-M2.5
  model-prefix: minimaxm2.5
  runner: {SITE}
  precision: fp8
  framework: vllm-disagg
  router: {{ name: vllm-router, version: "0.1.17" }}
  kv-p2p-transfer: mooncake
  multinode: true
  disagg: true
  scenarios:
    fixed-seq-len:
    - isl: 8192
      osl: 1024
      search-space:
      - spec-decoding: "none"
        conc-list: [ 8, 16 ]
        prefill:
          num-worker: 1
          tp: 8
          ep: 8
          dp-attn: false
          additional-settings: [ "MC_PROTOCOL=rdma" ]
        decode:
          num-worker: 2
          tp: 8
          ep: 8
          dp-attn: false
          additional-settings: [ "MC_PROTOCOL=rdma" ]
"""


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def lint_files(tmp_path: Path, master: str, runners: str = RUNNERS, launch: str = LAUNCH):
    """(exit code, printed findings) of `make lint` over the three files, and what render would load."""
    paths = [write(tmp_path, n, t) for n, t in (("r.yaml", runners), ("l.yaml", launch), ("m.yaml", master))]
    report = lint.Report()
    found_runners = lint.lint_runners(paths[0], report)
    found_launch = lint.lint_launch(paths[1], report)
    models = lint.lint_models(ROOT / "configs" / "models.yaml", report)
    lint.lint_configs([paths[2]], found_runners, "strict", report, launch=found_launch, models=models)
    loaded = Loaded(report.entries, found_runners, found_launch, (), models)
    return report.findings, loaded


def test_a_new_model_on_a_new_cluster_is_yaml_only_and_runs_what_inferencex_ran(tmp_path):
    findings, loaded = lint_files(tmp_path, MASTER)
    assert findings == []
    (target,) = loaded.targets(KEY)
    assert target.variant == "fsl8k1k_p1x8ep8_d2x8ep8"  # the EP the engines run is in the name
    plan = build_plan(target)
    files = render_plan(plan).files
    for role in plan.roles:
        (engine,) = [s for s in role.services if s.name == "vllm"]
        line = " ".join("".join(str(p) for p in w) for w in engine.argv)
        # InferenceX models_vllm.yaml, MiniMax-M2.5 (its --max-num-batched-tokens 4K is 4,096 to vLLM)
        for words in (
            "--tensor-parallel-size 8 --enable-expert-parallel",
            "--trust-remote-code",
            "--block-size 32",
            "--all2all-backend mori_low_latency",
            "--gpu-memory-utilization 0.95",
            "--no-enable-prefix-caching",
            "--max-num-batched-tokens 4096",
        ):
            assert words in line, (role.name, words)
        assert '"device_name":"ionic_0,ionic_1"' in line  # the runner's nic-devices reach Mooncake
    env = files["env.sh"]
    for name in (
        "VLLM_ROCM_USE_AITER=1",
        "VLLM_ROCM_SHUFFLE_KV_CACHE_LAYOUT=1",
        "VLLM_ENGINE_READY_TIMEOUT_S",
    ):
        assert name in env
    assert "QUICK_REDUCE_QUANTIZATION=INT4" in env


def test_the_config_overrides_a_models_default_setting(tmp_path):
    master = MASTER.replace('[ "MC_PROTOCOL=rdma" ]', '[ "MC_PROTOCOL=rdma", "MAX_NUM_BATCHED_TOKENS=2k" ]')
    findings, loaded = lint_files(tmp_path, master)
    assert findings == []
    plan = build_plan(loaded.targets(KEY)[0])
    argv = [w for s in plan.roles[0].services if s.name == "vllm" for w in s.argv]
    assert argv[argv.index(("--max-num-batched-tokens",)) + 1] == ("2000",)


def test_model_flags_are_keyed_by_gpu_vendor(tmp_path):
    """MiniMax's MI355X flags (MoRI all-to-all, AITER) never reach an NVIDIA runner: no block, no launch."""
    launch = LAUNCH.replace("gpu-vendor: amd", "gpu-vendor: nvidia").replace(
        "mooncake-registration: dmabuf", ""
    )
    master = MASTER.replace("vllm/vllm-openai-rocm:v0.33.0", "vllm/vllm-openai:v0.33.0")  # its CUDA image
    findings, _ = lint_files(tmp_path, master=master, launch=launch)
    assert [(f.line, f.message) for f in findings] == [
        (
            4,
            "not renderable: model 'MiniMaxAI/MiniMax-M2.5' has no vllm recipe for gpu-vendor nvidia in "
            "configs/models.yaml (it has: amd): its flags for another vendor's GPUs are not guessed",
        )
    ]


# Each refusal the renderer has: (what to change, first place in MASTER or LAUNCH, the finding's line, its key
# path, words of it).
REFUSALS = [
    pytest.param(
        ("model: MiniMaxAI/MiniMax-M2.5", "model: MiniMaxAI/MiniMax-M2.6"),
        4,
        "model",
        "not in configs/models.yaml (did you mean 'MiniMaxAI/MiniMax-M2.5'?",
        id="unknown-model",
    ),
    pytest.param(
        ("mooncake-registration: dmabuf", ""),
        25,
        "scenarios.fixed-seq-len[0].search-space[0].prefill.additional-settings",
        "states no mooncake-registration",
        id="rdma-without-registration",
    ),
    pytest.param(
        ("ep: 8", "ep: 4"),
        23,
        "scenarios.fixed-seq-len[0].search-space[0].prefill.ep",
        "ep 4 with tp 8",
        id="ep-not-tp",
    ),
    pytest.param(
        ("dp-attn: false", "dp-attn: true"),
        24,
        "scenarios.fixed-seq-len[0].search-space[0].prefill.dp-attn",
        "prefill: dp-attn is not rendered for vLLM yet",
        id="dp-attn",
    ),
    pytest.param(
        ("ep: 8\n", "ep: 8\n          pp: 2\n"),
        24,
        "scenarios.fixed-seq-len[0].search-space[0].prefill.pp",
        "prefill: pp is not rendered yet",
        id="pp",
    ),
    pytest.param(
        ('spec-decoding: "none"', 'spec-decoding: "mtp"'),
        18,
        "scenarios.fixed-seq-len[0].search-space[0].spec-decoding",
        "spec-decoding mtp is not rendered for vLLM yet",
        id="spec-decoding",
    ),
    pytest.param(
        (
            "2\n          tp: 8\n          ep: 8\n          dp-attn: false\n"
            '          additional-settings: [ "MC',
            "2\n          tp: 8\n          ep: 8\n          dp-attn: false\n"
            '          additional-settings: [ "DECODE_MTP_SIZE=2", "MC',
        ),
        31,
        "scenarios.fixed-seq-len[0].search-space[0].decode.additional-settings",
        "DECODE_MTP_SIZE=2 with spec-decoding none",
        id="mtp-size-without-mtp",
    ),
    pytest.param(
        ("kv-p2p-transfer: mooncake", "kv-p2p-transfer: nixl"),
        10,
        "kv-p2p-transfer",
        "kv-p2p-transfer 'nixl' is not rendered (mooncake only)",
        id="kv-transfer",
    ),
    pytest.param(
        (
            '[ "MC_PROTOCOL=rdma" ]\n        decode',
            '[ "MC_PROTOCOL=rdma", "HF_HUB_CACHE=/hub" ]\n        decode',
        ),
        25,
        "scenarios.fixed-seq-len[0].search-space[0].prefill.additional-settings",
        "HF_HUB_CACHE=/hub would reach no process",
        id="unread-setting",
    ),
    pytest.param(
        (
            "num-worker: 1\n          tp: 8\n          ep: 8",
            "num-worker: 1\n          tp: 16\n          ep: 16",
        ),
        22,
        "scenarios.fixed-seq-len[0].search-space[0].prefill.tp",
        "prefill: a worker of 16 GPUs spans nodes, not rendered yet",
        id="multi-node-worker",
    ),
    pytest.param(
        # tiny-llama's 2 attention heads split over tp 1 or 2 only (else that is refused first)
        (
            ("model: MiniMaxAI/MiniMax-M2.5", "model: disagg-recipes/tiny-llama"),
            *2 * [("tp: 8\n          ep: 8", "tp: 2\n          ep: 2")],
        ),
        23,
        "scenarios.fixed-seq-len[0].search-space[0].prefill.ep",
        "ep 2 on model disagg-recipes/tiny-llama, which has no experts",
        id="ep-without-experts",
    ),
    pytest.param(
        ('python: "3.12"', 'python: "3.9"'),
        6,
        "runner",
        "node-setup: no lock",
        id="node-setup-without-lock",
    ),
    pytest.param(
        ("ep: 8\n", "ep: 8\n          dcp-size: 2\n"),
        24,
        "scenarios.fixed-seq-len[0].search-space[0].prefill.dcp-size",
        "prefill: dcp-size (context parallelism) is not supported",
        id="context-parallelism",
    ),
    pytest.param(
        (
            "    fixed-seq-len:\n    - isl: 8192\n      osl: 1024\n      search-space:\n",
            "    agentic-coding:\n    - search-space:\n",
        ),
        16,
        "scenarios.agentic-coding[0].search-space[0]",
        "needs a staged corpus",
        id="agentic-without-trace-set",
    ),
    pytest.param(
        ("num-worker: 2", "num-worker: 0"),
        27,
        "scenarios.fixed-seq-len[0].search-space[0].decode.num-worker",
        "decode num-worker 0",
        id="aggregated-multinode",
    ),
    pytest.param(
        ("    nic-devices: [ionic_0, ionic_1]\n", ""),
        25,
        "scenarios.fixed-seq-len[0].search-space[0].prefill.additional-settings[0]",
        "whose launch profile lists no nic-devices",
        id="rdma-without-nic-devices",
    ),
    pytest.param(
        (
            "num-worker: 2\n          tp: 8\n          ep: 8",
            "num-worker: 2\n          tp: 6\n          ep: 1",
        ),
        28,
        "scenarios.fixed-seq-len[0].search-space[0].decode.tp",
        "decode: tp 6 on model MiniMaxAI/MiniMax-M2.5: the model's 8 KV heads",
        id="tp-splits-kv-heads-unevenly",
    ),
    pytest.param(
        ("    partition: gpu\n", '    partition: gpu\n    time-limit: "01:30:00"\n'),
        18,
        "scenarios.fixed-seq-len[0].search-space[0]",
        "over runner cluster:mi355x-newsite's time-limit 01:30:00",
        id="job-outlasts-its-time-limit",
    ),
]


@pytest.mark.parametrize(("change", "line", "path", "words"), REFUSALS)
def test_every_render_refusal_is_a_lint_finding_at_its_line(tmp_path, change, line, path, words):
    master, launch = MASTER, LAUNCH
    for old, new in change if isinstance(change[0], tuple) else (change,):  # one change, or several in order
        assert old in master or old in launch
        master, launch = master.replace(old, new, 1), launch.replace(old, new, 1)
    findings, _ = lint_files(tmp_path, master, launch=launch)
    hit = [f for f in findings if words in f.message]
    assert hit, [f.format() for f in findings]
    assert hit[0].file.endswith("m.yaml")
    assert hit[0].line == line, hit[0].format()
    assert hit[0].format().split(": ", 2)[1] == f"{KEY}.{path}", hit[0].format()


def test_no_model_is_named_in_the_renderers_code():
    """A model is data: neither its id (anywhere in recipes/) nor its flags (in the builders,
    recipes/*.py) are in code, so adding one needs no code; but for the few engine flags a builder reads or
    derives whichever model sets them (declared as FLAGS_READ)."""
    from recipes import sglang
    from recipes.models import shipped

    code = {p: p.read_text().lower() for p in (ROOT / "recipes").rglob("*.py")}
    # parity.py composes InferenceX's launch from its files (their flags), not ours
    builders = {p for p in code if p.parent == ROOT / "recipes" and p.name != "parity.py"}
    for model, found in shipped().models.items():
        names = {model.lower(), model.split("/")[-1].lower()}
        flags = {
            a
            for blocks in found.engines.values()
            for r in blocks.values()
            for a in (*r.args, *r.prefill_args, *r.decode_args)
            if isinstance(a, str) and a.startswith("--") and a not in sglang.FLAGS_READ
        }
        for path, text in code.items():
            assert not [n for n in names if n in text], (model, path)
            assert path not in builders or not [f for f in flags if f in text], (model, path)


def test_lint_resolves_settings_as_render_does_the_models_defaults_included(tmp_path):
    """MiniMax's launch turns prefix caching off (its model default); with LMCache on the prefill that
    would store and never reuse: lint says so, though the config never wrote the setting."""
    master = (
        MASTER.replace(
            "    fixed-seq-len:\n    - isl: 8192\n      osl: 1024\n",
            "    agentic-coding:\n    - dram-utilization: 0.5\n",
        )
        .replace(
            '      - spec-decoding: "none"\n',
            '      - spec-decoding: "none"\n        kv-offloading: dram\n'
            '        kv-offload-backend: { name: lmcache, version: "0.5.3" }\n',
        )
        .replace('[ "MC_PROTOCOL=rdma" ]', '[ "MC_PROTOCOL=rdma", "WEKA_LOADER_OVERRIDE=traces" ]', 1)
    )
    runners = RUNNERS.replace("{ gpus-per-node: 8 }", "{ gpus-per-node: 8, available-cpu-dram-mib: 1000000 }")
    # an agentic point (3600 s) and its graded eval fit the default 04:00:00 with a shorter eval bound
    launch = LAUNCH + "    benchmark: { hf-cache: /data/hf-cache, accuracy: { seconds: 1200 } }\n"
    findings, _ = lint_files(tmp_path, master, runners=runners, launch=launch)
    assert [f.message.split(": ")[0] for f in findings] == [
        "prefix caching is off on the engine that offloads to LMCache"
    ], [f.format() for f in findings]
    fixed = master.replace(
        '"WEKA_LOADER_OVERRIDE=traces"', '"WEKA_LOADER_OVERRIDE=traces", "ENABLE_PREFIX_CACHING=true"'
    )
    assert lint_files(tmp_path, fixed, runners=runners, launch=launch)[0] == []


def test_flags_another_place_owns_are_refused_in_a_models_and_a_runners_flags(tmp_path):
    """Parallelism is the config's, a setting's flag the setting's: neither a model's flags nor a runner's
    engine-args may carry them (the config would say ep 1 while the engines ran EP)."""
    models = (ROOT / "configs" / "models.yaml").read_text()
    smuggled = models.replace(
        "          - --all2all-backend\n",
        "          - --enable-expert-parallel\n          - --all2all-backend\n",
    )
    report = lint.Report()
    assert lint.lint_models(write(tmp_path, "models.yaml", smuggled), report) is None
    assert [
        "--enable-expert-parallel comes from the config's ep, not model flags" in f.message
        for f in report.findings
    ] == [True]
    launch = LAUNCH + "    engine-args: { prefill: [--max-num-seqs=8] }\n"
    findings, _ = lint_files(tmp_path, MASTER, launch=launch)
    assert [f.message for f in findings if f.file.endswith("l.yaml")] == [
        "engine-args.prefill: --max-num-seqs=8 comes from setting MAX_NUM_SEQS (set it there), not the runner"
    ]
