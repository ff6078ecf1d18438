"""Engine lines out of plan.json, without an engine: runtime references resolved to representative values,
the model path swapped for a stub folder made from the model's architecture, declared flags set aside."""

from __future__ import annotations

import json

import pytest

from recipes.engines import lines as ln
from recipes.engines.stubs import hf_config, stub_folder
from recipes.models import facts, shipped

KIMI = ("kimik2.5-fp4-mi355x-vllm-disagg-agentic", "agentic_p1x8_d1x8_conc8")
LOCAL_SGLANG = ("local-sim-sglang-disagg", "fsl1k64_p2x8_d1x8")


def kv_config(line: ln.Line) -> dict:
    return json.loads(line.argv[line.argv.index("--kv-transfer-config") + 1])


def test_one_line_per_role_with_every_reference_resolved(plans, builds, tmp_path):
    prefill, decode = ln.engine_lines(plans[KIMI], builds, tmp_path)
    assert (prefill.name, decode.name) == (f"{KIMI[0]}/{KIMI[1]}/prefill", f"{KIMI[0]}/{KIMI[1]}/decode")
    assert prefill.argv[:2] == ("vllm", "serve") and not any("${" in w for w in prefill.argv)
    # A real runner's nodes get documentation addresses; LMCache listens on the node's loopback.
    assert prefill.argv[prefill.argv.index("--host") + 1] == "192.0.2.10"
    assert decode.argv[decode.argv.index("--host") + 1] == "192.0.2.11"
    lmcache = kv_config(prefill)["kv_connector_extra_config"]["connectors"][1]["kv_connector_extra_config"]
    assert lmcache == {
        "lmcache.mp.host": "tcp://127.0.0.1",
        "lmcache.mp.mq_timeout": 1200,
        "lmcache.mp.port": 5555,
    }
    env = dict(prefill.env)
    assert env["VLLM_HOST_IP"] == "192.0.2.10" and env["VLLM_MOONCAKE_BOOTSTRAP_PORT"] == "8998"
    assert prefill.build.id == "vllm-0.33.0" and prefill.unchecked == ()


def test_the_model_path_becomes_a_stub_folder_of_the_real_architecture(plans, builds, tmp_path):
    prefill, _ = ln.engine_lines(plans[KIMI], builds, tmp_path)
    assert prefill.model_path == "/models/amd/Kimi-K2.5-MXFP4" and prefill.model_path not in prefill.argv
    assert prefill.argv[2] == prefill.stub
    config = json.loads((tmp_path / prefill.stub.rsplit("/", 1)[-1] / "config.json").read_text())
    text = config["text_config"]
    assert config["model_type"] == "kimi_k25" and text["model_type"] == "deepseek_v3"
    assert (text["num_attention_heads"], text["n_routed_experts"], text["max_position_embeddings"]) == (
        64,
        384,
        262144,
    )


def test_local_nodes_get_their_cluster_addresses_and_fork_flags_are_set_aside(plans, builds, tmp_path):
    prefill, decode = ln.engine_lines(plans[LOCAL_SGLANG], builds, tmp_path)
    assert prefill.argv[prefill.argv.index("--host") + 1] == "127.0.0.11"
    assert decode.argv[decode.argv.index("--host") + 1] == "127.0.0.13"  # rank 2: after two prefills
    assert prefill.build.id == "sglang-minicpm-sala-fork" and prefill.depth == "parse"
    assert prefill.unchecked == ("--dense-as-sparse",) and "--dense-as-sparse" not in prefill.argv


def test_every_shipped_variant_gives_lines(plans, builds, tmp_path):
    for plan in plans.values():
        lines = ln.engine_lines(plan, builds, tmp_path)
        assert [line.name.rsplit("/", 1)[1] for line in lines] == [r["name"] for r in plan["roles"]]


@pytest.mark.parametrize(
    "argv, kept, unchecked",
    [
        (["a", "--dense-as-sparse", "b"], ["a", "b"], ("--dense-as-sparse",)),
        (["--cuda-graph-max-bs", "8", "--x"], ["--x"], ("--cuda-graph-max-bs",)),
        (["--cuda-graph-max-bs=8", "--x"], ["--x"], ("--cuda-graph-max-bs",)),
        (["--cuda-graph-bs", "1", "2", "4", "--x", "1"], ["--x", "1"], ("--cuda-graph-bs",)),
        (["--cuda-graph-bs-decode", "1"], ["--cuda-graph-bs-decode", "1"], ()),  # not a declared flag
    ],
)
def test_declared_flags_are_set_aside_with_their_values(builds, argv, kept, unchecked):
    fork = next(b for b in builds if b.id == "sglang-minicpm-sala-fork")
    assert ln.set_aside(fork, argv) == (kept, unchecked)


def test_a_reference_without_a_representative_value_is_refused():
    with pytest.raises(ln.PlanError, match=r"no representative value for \$\{RUN_DIR\}"):
        ln.resolve("${RUN_DIR}/x", {})
    assert ln.resolve("a$$b${X}", {"X": "1"}) == "a$b1"


def test_an_image_without_a_build_is_refused(plans, builds, tmp_path):
    plan = json.loads(json.dumps(plans[KIMI]))
    plan["image"] = "vllm/vllm-openai-rocm:v0.32.0"
    with pytest.raises(ln.PlanError, match="has no \\(single\\) engine build"):
        ln.engine_lines(plan, builds, tmp_path)


def test_every_models_stub_config_is_consistent():
    for found in shipped().models.values():
        config = hf_config(found.architecture)
        text = config.get("text_config", config)
        assert text["num_attention_heads"] % text["num_key_value_heads"] == 0


def test_stub_folders_are_shared_and_rewritten_only_when_the_facts_change(tmp_path):
    arch = facts("openbmb/MiniCPM-SALA").architecture
    first = stub_folder(arch, tmp_path)
    assert stub_folder(arch, tmp_path) == first
    assert json.loads((first / "config.json").read_text())["mixer_types"].count("minicpm4") == 8
