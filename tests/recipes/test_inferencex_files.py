"""InferenceX's master files as they are: `make render CONFIGS=<file>` renders their SGLang + MoRI entries
(its runner labels are aliases of our launch profiles, its stated node counts checked, its workers smaller
than a node run alone on one), and lint reads the shapes InferenceX's validator accepts (pyxis image
references, bracketed settings)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from recipes import parity, render
from recipes.engines.__main__ import engine_builds
from recipes.engines.__main__ import main as check_engines
from schemas import lint, yamlio
from schemas.images import parse_image, spelled_for
from schemas.launch import LaunchProfiles
from tests.engines.conftest import need_tools
from tests.paths import reference
from tests.recipes.conftest import inferencex_entry

MORI_TP = ("qwen3.5-fp8-mi355x-sglang-disagg", "qwen3.5-fp4-mi355x-sglang-disagg")


@pytest.fixture(scope="module")
def rendered() -> dict:
    master = reference("amd-master.yaml")
    out = {}
    for key in MORI_TP:
        loaded = render.load(key, [master])
        for r in render.render_config(key, loaded):
            out[key] = r
    return out


def test_the_sglang_mori_tp_entries_render_from_inferencex_s_own_file(rendered):
    plan = rendered[MORI_TP[0]].plan
    assert plan.variant == "fsl8k1k_p1x4_d1x8"
    assert plan.runner == "cluster:mi355x-amds"  # InferenceX's mi355x-disagg, an alias of the profile
    assert plan.slurm.nodes == 2  # the TP4 prefill alone on its node, as PREFILL_NODES=1 states
    side = parity.ours(plan)  # flags and environment per role, as make parity reads them
    prefill, decode = (side["engine-args"][role] for role in ("prefill", "decode"))
    assert (prefill["--tp-size"], decode["--tp-size"]) == ("4", "8")
    for role, tokens, budget in (("prefill", "8192", "0.8"), ("decode", "512", "0.85")):
        flags, env = side["engine-args"][role], side["engine-env"][role]
        assert flags["--disaggregation-transfer-backend"] == "mori"
        assert env["SGLANG_MORI_NUM_MAX_DISPATCH_TOKENS_PER_RANK"] == tokens  # per role, on its line
        assert flags["--mem-fraction-static"] == budget  # the model's per-role default
        assert env["MORI_SHMEM_MODE"] == "ISOLATION" and env["NCCL_IB_HCA"].startswith("rdma0,")
    assert prefill["--disable-radix-cache"] is True and decode["--prefill-round-robin-balance"] is True
    router = json.loads(rendered[MORI_TP[0]].files["plan.json"])["router"]["argv"]
    policies = parity.flag_map(["".join(part for part in word if isinstance(part, str)) for word in router])
    assert [policies[f"--{p}policy"] for p in ("", "prefill-", "decode-")] == ["random"] * 3


@pytest.mark.tools
def test_their_lines_pass_the_parser_that_judges_their_sglang_build(rendered, capsys):
    need_tools(engine_builds())
    code = check_engines(["--config", MORI_TP[0], "--configs", str(reference("amd-master.yaml"))])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "2 command lines checked, 0 rejected" in out
    assert "sglang-0.5.16-rocm: parsed by sglang 0.5.23's parser only" in out  # said, never pretended


def test_an_entry_that_does_not_render_says_why_at_its_line(tmp_path):
    text = reference("amd-master.yaml").read_text()
    entry = text.index("\ndsv4-fp4-mi355x-sglang-disagg-mtp:")
    model = text.index("  model: deepseek-ai/DeepSeek-V4-Pro", entry)
    line = text.count("\n", 0, model) + 1
    master = tmp_path / "amd-master.yaml"  # the same file, its model one this repository has no recipe for
    master.write_text(text[:model] + "  model: deepseek-ai/DeepSeek-V5-Pro" + text[model + 36 :])
    with pytest.raises(render.RenderError) as exc:
        render.load("dsv4-fp4-mi355x-sglang-disagg-mtp", [master])
    lines = [f.format() for f in exc.value.findings]
    # said at the entry's model line, with the closest model the repository has
    assert any(
        f"amd-master.yaml:{line}:" in x and "not in configs/models.yaml" in x and "DeepSeek-V4-Pro" in x
        for x in lines
    ), lines


def test_a_missing_master_file_is_said():
    with pytest.raises(render.RenderError) as exc:
        render.load("x", [render.ROOT_DIR / "no-such-master.yaml"])
    assert "no such master file" in exc.value.findings[0].format()


def test_runner_aliases_name_one_profile():
    data = yamlio.load_file(render.ROOT_DIR / "configs" / "launch.yaml").data
    profiles = LaunchProfiles.model_validate(data)
    assert profiles.label_of("mi355x-disagg") == profiles.label_of("mi355x") == "cluster:mi355x-amds"
    assert profiles.label_of("cluster:local-sim") == "cluster:local-sim"
    data["profiles"]["cluster:h200-dgxc"]["aliases"] = ["mi355x"]
    with pytest.raises(ValueError, match="alias 'mi355x' is claimed by 'cluster:mi355x-amds' and"):
        LaunchProfiles.model_validate(data)


@pytest.mark.parametrize(
    ("ref", "pyxis", "docker"),
    [
        (
            "nvcr.io#nvidia/ai-dynamo/x:1.3.0",
            "nvcr.io#nvidia/ai-dynamo/x:1.3.0",
            "nvcr.io/nvidia/ai-dynamo/x:1.3.0",
        ),
        ("nvcr.io/nvidia/x:1", "nvcr.io#nvidia/x:1", "nvcr.io/nvidia/x:1"),
        ("vllm/vllm-openai:v0.33.0", "vllm/vllm-openai:v0.33.0", "vllm/vllm-openai:v0.33.0"),
        ("localhost/node:bookworm", "localhost#node:bookworm", "localhost/node:bookworm"),
    ],
)
def test_pyxis_references_parse_and_each_runtime_gets_its_spelling(ref, pyxis, docker):
    assert parse_image(ref) is not None
    assert (spelled_for(ref, "pyxis"), spelled_for(ref, "docker")) == (pyxis, docker)
    assert parse_image(ref.replace("#", "/")).publisher == parse_image(ref).publisher


ENTRY = """\
x-h200-trt:
  image: nvcr.io#nvidia/ai-dynamo/tensorrtllm-runtime:1.3.0-dev.1-cuda13
  model: nvidia/DeepSeek-R1-FP4
  model-prefix: dsr1
  runner: h200
  precision: fp4
  framework: dynamo-trt
  kv-p2p-transfer: nixl
  multinode: true
  disagg: true
  scenarios:
    fixed-seq-len:
    - isl: 1024
      osl: 1024
      search-space:
      - conc-list: [4]
        prefill: {num-worker: 1, tp: 8, ep: 1, dp-attn: false,
                  additional-settings: ["CONFIG_FILE=recipes/x.yaml:override[0]"]}
        decode: {num-worker: 1, tp: 8, ep: 1, dp-attn: false}
"""


def test_inferencex_profile_accepts_what_its_validator_accepts(tmp_path):
    path = tmp_path / "nvidia-master.yaml"
    path.write_text(ENTRY)
    runners = reference("runners.yaml")
    args = lint.parser().parse_args(["--profile", "inferencex-legacy", "--runners", str(runners), str(path)])
    report = lint.run(args)
    assert [f.format() for f in report.findings if f.file == str(path)] == []
    # its newest validator wants the recipe as the point's srt-recipe
    newest = lint.run(lint.parser().parse_args(["--profile", "inferencex", str(path)]))
    assert [f.message.split(":")[0] for f in newest.findings if f.file == str(path)] == [
        "CONFIG_FILE in additional-settings"
    ]
    strict = lint.run(lint.parser().parse_args(["--runners", str(runners), str(path)]))
    assert any("framework 'dynamo-trt' is not rendered" in f.message for f in strict.findings)  # ours: strict


DEP_MTP = "dsr1-fp8-mi355x-sglang-disagg-mtp"
DSV4_MTP = "dsv4-fp4-mi355x-sglang-disagg-mtp"


@pytest.fixture(scope="module")
def dep_mtp() -> dict:
    return inferencex_entry(DEP_MTP)[1]


def test_dep8_with_mtp_renders_as_the_known_working_launch_derives_it(dep_mtp):
    """2 prefill and 1 decode DEP8 workers, MTP 1, concurrencies 1024 and 2048: both roles admit the largest
    concurrency at once, decode's MoRI dispatch budget is it spread over 8 DP ranks times the 2 tokens an MTP
    step verifies, and its switch threshold twice the budget before MTP; env.sh says how."""
    r = dep_mtp["fsl8k1k_p2xdep8_d1xdep8_mtp"]
    assert r.plan.slurm.nodes == 3
    side = parity.ours(r.plan)
    for role in ("prefill", "decode"):
        flags = side["engine-args"][role]
        assert (flags["--tp-size"], flags["--ep-size"], flags["--dp-size"]) == ("8", "8", "8")
        assert flags["--enable-dp-attention"] is True and flags["--moe-a2a-backend"] == "mori"
        assert flags["--max-running-requests"] == "2048"
        assert (flags["--speculative-num-steps"], flags["--speculative-num-draft-tokens"]) == ("1", "2")
        assert flags["--speculative-algorithm"] == "NEXTN"  # the model's MTP, on both roles
    env = side["engine-env"]
    assert env["prefill"]["SGLANG_MORI_NUM_MAX_DISPATCH_TOKENS_PER_RANK"] == "8192"
    assert env["decode"]["SGLANG_MORI_NUM_MAX_DISPATCH_TOKENS_PER_RANK"] == "512"  # 2048 / 8 x (1 + 1)
    assert env["decode"]["SGLANG_MORI_DISPATCH_INTER_KERNEL_SWITCH_THRESHOLD"] == "512"  # 2 x 256
    assert side["engine-args"]["prefill"]["--chunked-prefill-size"] == "65536"  # the DP block's
    text = r.files["env.sh"]
    assert "MORI_DISPATCH_TOKENS_DECODE = 2048 / 8 DP ranks x (MTP 1 + 1) = 512" in text
    assert "\nMAX_RUNNING_REQUESTS=2048\n" in text


def test_tp_workers_keep_the_models_tp_tuning_and_moris_defaults(dep_mtp):
    r = dep_mtp["fsl8k1k_p1x8_d2x8_mtp"]
    side = parity.ours(r.plan)
    prefill, decode = side["engine-args"]["prefill"], side["engine-args"]["decode"]
    assert "--dp-size" not in prefill and "--ep-size" not in decode and "--moe-a2a-backend" not in decode
    assert prefill["--max-running-requests"] == decode["--max-running-requests"] == "128"
    assert decode["--speculative-num-steps"] == "2"  # DECODE_MTP_SIZE=2, on prefill too
    assert prefill["--speculative-num-draft-tokens"] == "3"
    assert side["engine-env"]["decode"]["SGLANG_MORI_NUM_MAX_DISPATCH_TOKENS_PER_RANK"] == "1536"  # 512 x 3
    assert "MAX_RUNNING_REQUESTS" not in r.files["env.sh"]


def test_every_active_deepseek_r1_entry_renders_every_variant():
    master = reference("amd-master.yaml")
    keys = [k for k in yamlio.load_file(master).data if k.startswith("dsr1-") and "-sglang-disagg" in k]
    assert len(keys) == 5
    for key in keys:
        variants = [r.plan.variant for r in render.render_config(key, render.load(key, [master]))]
        assert variants and len(set(variants)) == len(variants), key


@pytest.mark.tools
@pytest.mark.parametrize("key", [DEP_MTP, DSV4_MTP])
def test_deepseek_dep_and_mtp_lines_pass_the_parser_of_their_build(key, capsys):
    need_tools(engine_builds())
    code = check_engines(["--config", key, "--configs", str(reference("amd-master.yaml"))])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "6 command lines checked, 0 rejected" in out


@pytest.fixture(scope="module")
def dsv4_mtp() -> dict:
    return inferencex_entry(DSV4_MTP)[1]


def test_a_model_s_pinned_mori_knobs_replace_the_derived_ones(dsv4_mtp):
    """DeepSeek-V4-Pro pins MoRI's dispatch budgets per rank, leaves the MoE input budget to SGLang and
    combines in its chosen dtype; its switch threshold is pinned on a TP decode and derived on a DEP one."""
    tp, dep = (
        parity.ours(dsv4_mtp[v].plan) for v in ("fsl8k1k_p1x8_d1x8_mtp", "fsl8k1k_p1xdep8_d1xdep8_mtp")
    )
    for side in (tp, dep):
        env = side["engine-env"]
        assert env["prefill"]["SGLANG_MORI_NUM_MAX_DISPATCH_TOKENS_PER_RANK"] == "16384"
        assert env["decode"]["SGLANG_MORI_NUM_MAX_DISPATCH_TOKENS_PER_RANK"] == "128"  # not x (MTP + 1)
        assert "SGLANG_MORI_MOE_MAX_INPUT_TOKENS" not in env["prefill"] | env["decode"]
        assert {env[r]["SGLANG_MORI_COMBINE_DTYPE"] for r in ("prefill", "decode")} == {"auto"}
        assert side["engine-args"]["decode"]["--speculative-algorithm"] == "EAGLE"  # V4's MTP path
    assert tp["engine-env"]["decode"]["SGLANG_MORI_DISPATCH_INTER_KERNEL_SWITCH_THRESHOLD"] == "4096"
    dep_env = dsv4_mtp["fsl8k1k_p1xdep8_d1xdep8_mtp"].files["env.sh"]
    dep_conc = int(dep_env.split("\nMAX_RUNNING_REQUESTS=")[1].split("\n")[0])  # its largest concurrency
    threshold = dep["engine-env"]["decode"]["SGLANG_MORI_DISPATCH_INTER_KERNEL_SWITCH_THRESHOLD"]
    assert threshold == str(2 * dep_conc // 8)
    text = dsv4_mtp["fsl8k1k_p1x8_d1x8_mtp"].files["env.sh"]
    assert "MORI_DISPATCH_TOKENS_DECODE = 128 (pinned by the model)" in text
    assert "SWITCH_THRESHOLD (exported above) = 4096 (pinned by the model)" in text


def test_mori_on_a_runner_without_its_rdma_traffic_class_is_refused(rendered):
    env = parity.ours(rendered[MORI_TP[0]].plan)["engine-env"]["decode"]
    # the runner's class (configs/launch.yaml): IP traffic class 4 x DSCP 26, service level its priority
    assert [env[n] for n in ("MORI_RDMA_TC", "MORI_IO_TC", "MORI_RDMA_SL", "MORI_IO_SL")] == [
        "104",
        "104",
        "3",
        "3",
    ]
    said = _refusal_without("rdma_traffic_class")
    assert "runner cluster:mi355x-amds's launch profile states no rdma-traffic-class" in said
    assert "travel at priority 0, which PFC does not protect" in said


def test_mori_on_a_runner_without_its_data_plane_interface_is_refused():
    said = _refusal_without("data_plane_interface")
    assert "runner cluster:mi355x-amds's launch profile states no data-plane-interface" in said


def _refusal_without(field: str) -> str:
    """What render says of a MoRI entry whose runner's launch profile leaves `field` out."""
    loaded = render.load(MORI_TP[0], [reference("amd-master.yaml")])
    profiles = loaded.launch.profiles
    bare = profiles["cluster:mi355x-amds"].model_copy(update={field: None})
    launch = loaded.launch.model_copy(update={"profiles": {**profiles, "cluster:mi355x-amds": bare}})
    with pytest.raises(render.RenderError) as exc:
        render.render_config(MORI_TP[0], dataclasses.replace(loaded, launch=launch))
    return exc.value.findings[0].message


def _entry_file(tmp_path, key: str, change) -> list:
    """InferenceX's entry KEY alone in a master file, its first search-space point changed by `change`."""
    import yaml

    entry = yamlio.load_file(reference("amd-master.yaml")).data[key]
    change(entry["scenarios"]["fixed-seq-len"][0]["search-space"][0])
    path = tmp_path / "amd-master.yaml"
    path.write_text(yaml.safe_dump({key: entry}, sort_keys=False))
    return [path]


@pytest.mark.parametrize(
    ("key", "change", "said"),
    [
        (
            MORI_TP[0],
            lambda p: p["prefill"].update({"dp-attn": True, "ep": 4}),
            "prefill: dp-attn on model Qwen/Qwen3.5-397B-A17B-FP8, whose sglang recipe in "
            "configs/models.yaml has no dp-attention block",
        ),
        (
            DEP_MTP,
            lambda p: p["decode"]["additional-settings"].remove("DECODE_MTP_SIZE=1"),
            "spec-decoding mtp needs its draft steps: DECODE_MTP_SIZE=N",
        ),
        (
            MORI_TP[0],
            lambda p: p.update({"spec-decoding": "mtp"}),
            "has no mtp-args",
        ),
    ],
    ids=["dp-attn-without-the-models-dp-block", "mtp-without-steps", "mtp-without-the-models-mtp"],
)
def test_a_shape_the_model_has_no_known_working_flags_for_is_refused(tmp_path, key, change, said):
    with pytest.raises(render.RenderError) as exc:
        render.load(key, _entry_file(tmp_path, key, change))
    assert any(said in f.message for f in exc.value.findings), [f.format() for f in exc.value.findings]


def test_a_flag_range_is_its_words_and_a_bad_one_is_refused_by_its_own_rule():
    from schemas.models import EngineRecipe, role_args

    recipe = EngineRecipe.model_validate({"decode-args": ["--cuda-graph-bs", {"seq": [1, 4]}, "--x", 2]})
    assert role_args(recipe, "decode") == ["--cuda-graph-bs", 1, 2, 3, 4, "--x", 2]
    with pytest.raises(ValueError, match=r"seq \[4, 1\]: first <= last"):
        EngineRecipe.model_validate({"args": [{"seq": [4, 1]}]})
    with pytest.raises(ValueError, match="--speculative-num-steps comes from the config's spec-decoding"):
        EngineRecipe.model_validate({"mtp-args": ["--speculative-num-steps", 2]})
