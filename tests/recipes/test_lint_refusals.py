"""Defects a launch would meet only on the cluster, refused by `make lint` at the config's file and line with
the fix: an image for another vendor's GPUs, a tp that splits the model's heads unevenly, a context longer
than the model's positions, a sweep longer than the runner's time limit, Mooncake rdma without the runner's
RDMA devices. Each is a finding where lint and render give one verdict (render lints first; the renderer's
own refusals are lint findings, tests/recipes/test_one_verdict.py)."""

from __future__ import annotations

import pytest

from recipes.build import build_plan
from schemas.findings import format_path

from .test_one_verdict import KEY, LAUNCH, MASTER, SITE, lint_files

PREFILL = "scenarios.fixed-seq-len[0].search-space[0].prefill"
DECODE = "scenarios.fixed-seq-len[0].search-space[0].decode"
DECODE_2X8 = "num-worker: 2\n          tp: 8\n          ep: 8"


def findings_of(tmp_path, master: str = MASTER, launch: str = LAUNCH) -> list:
    """(line, key path below the config key, message, hint) of every finding of lint over MASTER's site."""
    findings, _ = lint_files(tmp_path, master, launch=launch)
    assert all(f.file.endswith("m.yaml") for f in findings), [f.format() for f in findings]
    return [(f.line, format_path(f.path[1:]), f.message, f.hint) for f in findings]


def test_the_site_lints_clean(tmp_path):
    assert findings_of(tmp_path) == []


# ---------------------------------------------------------------- 1. the image's GPU vendor


def test_a_cuda_image_on_an_amd_runner_is_refused_naming_its_rocm_image(tmp_path):
    master = MASTER.replace("vllm/vllm-openai-rocm:v0.33.0", "vllm/vllm-openai:v0.33.0")
    ((line, path, message, hint),) = findings_of(tmp_path, master)
    assert (line, path) == (3, "image")
    assert message == (
        f"image vllm/vllm-openai:v0.33.0 is built for NVIDIA GPUs (CUDA), and runner {SITE} has gpu-vendor "
        "amd (configs/launch.yaml): its engines would find no GPU they can use"
    )
    assert hint.startswith("use vllm/vllm-openai-rocm:v0.33.0; images for AMD GPUs (ROCm): ")


def test_the_same_image_on_an_nvidia_runner_passes_the_vendor_check(tmp_path):
    """On NVIDIA the CUDA image is right; what remains is the model's (it has flags for AMD only)."""
    master = MASTER.replace("vllm/vllm-openai-rocm:v0.33.0", "vllm/vllm-openai:v0.33.0")
    launch = LAUNCH.replace("gpu-vendor: amd", "gpu-vendor: nvidia").replace(
        "mooncake-registration: dmabuf", ""
    )
    found = findings_of(tmp_path, master, launch)
    assert [m for _, _, m, _ in found if "is built for" in m] == []
    assert [p for _, p, _, _ in found] == ["model"]  # no vllm recipe for gpu-vendor nvidia


# ---------------------------------------------------------------- 2. tp against the model's heads


def test_a_tp_that_does_not_split_the_kv_heads_is_refused_naming_the_tps_that_do(tmp_path):
    """MiniMax-M2.5: 48 attention heads, 8 KV heads (configs/models.yaml). tp 6 divides 48 but neither
    divides 8 nor is divided by it."""
    master = MASTER.replace(DECODE_2X8, "num-worker: 2\n          tp: 6\n          ep: 1")
    ((line, path, message, _),) = findings_of(tmp_path, master)
    assert (line, path) == (28, f"{DECODE}.tp")
    assert message == (
        "not renderable: decode: tp 6 on model MiniMaxAI/MiniMax-M2.5: the model's 8 KV heads (configs/"
        "models.yaml kv-heads) are not divisible by it, nor is it by them, and vLLM splits heads over tp "
        "evenly (heads divisible by tp; KV heads divisible by tp, or tp by KV heads when it is larger). "
        "tp 1, 2, 4 or 8 works on a node of 8 GPUs"
    )


def test_a_tp_that_does_not_split_the_attention_heads_is_refused(tmp_path):
    master = MASTER.replace(DECODE_2X8, "num-worker: 2\n          tp: 5\n          ep: 1")
    ((line, path, message, _),) = findings_of(tmp_path, master)
    assert (line, path) == (28, f"{DECODE}.tp")
    assert "the model's 48 attention heads (configs/models.yaml heads) are not divisible by it" in message
    assert message.endswith("tp 1, 2, 4 or 8 works on a node of 8 GPUs")


def test_a_tp_that_splits_both_passes(tmp_path):
    master = MASTER.replace(DECODE_2X8, "num-worker: 2\n          tp: 4\n          ep: 1")
    assert findings_of(tmp_path, master) == []


@pytest.mark.parametrize(
    ("heads", "kv_heads", "mla", "tp", "fits"),
    [
        (48, 8, False, 8, True),
        (48, 8, False, 16, True),  # KV heads replicated: 16 is a multiple of 8
        (48, 8, False, 6, False),
        (48, 8, False, 12, False),  # 12 neither divides 8 nor is a multiple of it
        (32, 2, False, 8, True),  # tp a multiple of the KV heads
        (32, 2, False, 3, False),
        (64, 64, True, 8, True),
        (128, 1, False, 8, True),
        (96, 96, True, 64, False),  # MLA: the attention heads still split
        (64, 12, True, 8, True),  # MLA keeps one latent KV per token: its KV heads are not split
    ],
)
def test_vllms_heads_rule(heads, kv_heads, mla, tp, fits):
    from types import SimpleNamespace

    from recipes.vllm import _tp_splits_heads

    arch = SimpleNamespace(heads=heads, kv_heads=kv_heads, mla=object() if mla else None)
    assert _tp_splits_heads(arch, tp) is fits


# ---------------------------------------------------------------- 3. MAX_MODEL_LEN against max-positions


def test_a_context_longer_than_the_models_positions_is_refused_at_each_setting(tmp_path):
    """MiniMax-M2.5's max-positions is 196,608 (192K)."""
    master = MASTER.replace('[ "MC_PROTOCOL=rdma" ]', '[ "MC_PROTOCOL=rdma", "MAX_MODEL_LEN=256K" ]')
    found = findings_of(tmp_path, master)
    assert [(line, path) for line, path, _, _ in found] == [
        (25, f"{PREFILL}.additional-settings[1]"),
        (31, f"{DECODE}.additional-settings[1]"),
    ]
    _, _, message, hint = found[0]
    assert message == (
        "MAX_MODEL_LEN=256K (262,144 tokens) is above the 196,608 positions of model MiniMaxAI/MiniMax-M2.5 "
        "(configs/models.yaml max-positions)"
    )
    assert hint == "MAX_MODEL_LEN=196608 at most, or leave it out"


def test_a_context_of_exactly_the_models_positions_passes(tmp_path):
    master = MASTER.replace('[ "MC_PROTOCOL=rdma" ]', '[ "MC_PROTOCOL=rdma", "MAX_MODEL_LEN=192K" ]')
    assert findings_of(tmp_path, master) == []


# ---------------------------------------------------------------- 4. the sweep against the time limit


def test_a_sweep_longer_than_the_time_limit_names_the_limit_where_it_is_set_and_both_fixes(tmp_path):
    launch = LAUNCH.replace("    partition: gpu\n", '    partition: gpu\n    time-limit: "01:30:00"\n')
    ((line, path, message, _),) = findings_of(tmp_path, launch=launch)
    assert (line, path) == (18, "scenarios.fixed-seq-len[0].search-space[0]")
    profile = f"configs/launch.yaml profiles.{SITE}"
    for words in (
        f"over runner {SITE}'s time-limit 01:30:00 (5400 s), set in {profile}.time-limit",
        "Ask for fewer concurrencies (each is measured in this allocation)",
        f"a shorter measured duration ({profile}.benchmark.seconds)",
        f"if the site allows longer jobs, raise {profile}.time-limit",
    ):
        assert words in message, (words, message)
    # the same sweep fits the default limit (04:00:00): the check refuses only what does not fit
    assert findings_of(tmp_path) == []


# ---------------------------------------------------------------- 5. Mooncake rdma without RDMA devices

NO_NICS = LAUNCH.replace("    nic-devices: [ionic_0, ionic_1]\n", "")


def test_rdma_on_a_runner_without_nic_devices_is_refused_at_the_setting(tmp_path):
    ((line, path, message, _),) = findings_of(tmp_path, launch=NO_NICS)
    assert (line, path) == (25, f"{PREFILL}.additional-settings[0]")
    assert message == (
        f"not renderable: MC_PROTOCOL=rdma on runner {SITE}, whose launch profile lists no nic-devices: "
        "Mooncake would be given no RDMA device to move KV over. List the runner's RDMA devices (as "
        f"`ibv_devices` or `rdma link` shows them) in configs/launch.yaml profiles.{SITE}.nic-devices, "
        "or set MC_PROTOCOL=tcp"
    )


def test_tcp_on_a_runner_without_nic_devices_passes_and_rdma_with_them_reaches_mooncake(tmp_path):
    tcp = MASTER.replace("MC_PROTOCOL=rdma", "MC_PROTOCOL=tcp")
    assert findings_of(tmp_path, tcp, NO_NICS) == []
    findings, loaded = lint_files(tmp_path, MASTER, launch=LAUNCH)
    assert findings == []
    plan = build_plan(loaded.targets(KEY)[0])
    (engine,) = [s for s in plan.roles[0].services if s.name == "vllm"]
    assert '"device_name":"ionic_0,ionic_1"' in " ".join("".join(str(p) for p in w) for w in engine.argv)
