"""InferenceX's ATOM + Mooncake entry as it is: ATOM's server per role, its Mooncake connector, atomesh in
front, the image's Mooncake on LD_LIBRARY_PATH; its lines judged by ATOM's recorded parser (the engine's own
code is on no registry reachable here); what the launch could not run refused at render."""

from __future__ import annotations

import dataclasses
import json
import subprocess

import pytest

from recipes import parity, render
from recipes.engines import recorded
from recipes.engines.__main__ import engine_builds
from recipes.engines.__main__ import main as check_engines
from recipes.engines.lines import Line
from tests.paths import reference

KEY = "dsv4-fp4-mi355x-atom-disagg"


def test_both_points_render_as_the_known_working_launch_composes_them(inferencex_rendered):
    assert sorted(inferencex_rendered) == ["fsl8k1k_p1x8_d1x8", "fsl8k1k_p2xdp8_d1xdp8"]
    dp = parity.ours(inferencex_rendered["fsl8k1k_p2xdp8_d1xdp8"].plan)
    prefill, decode = dp["engine-args"]["prefill"], dp["engine-args"]["decode"]
    assert prefill["-tp"] == "8" and prefill["--enable-dp-attention"] is True
    assert prefill["--enable-tbo"] is True
    assert prefill["--max-num-seqs"] == "256"
    assert decode["--max-num-seqs"] == "2048"  # its largest concurrency
    graphs = [v for k, v in decode.items() if k.startswith("--cudagraph-capture-sizes[")]
    assert sorted(graphs) == [1, 2, 4, *range(8, 257, 8)]
    assert not any(k.startswith("--cudagraph-capture-sizes") for k in prefill)
    assert (prefill["--kv-transfer-config.kv_role"], decode["--kv-transfer-config.kv_role"]) == (
        "kv_producer",
        "kv_consumer",
    )
    # a DP-attention worker's own environment on its line; the model's and the runner's for every engine
    assert dp["engine-env"]["decode"]["GPU_MAX_HW_QUEUES"] == "5"
    assert dp["engine-env"]["prefill"]["ATOM_MOE_GU_ITLV"] == "1"
    assert dp["engine-env"]["prefill"]["SAFETENSORS_FAST_GPU"] == "1"
    tp = parity.ours(inferencex_rendered["fsl8k1k_p1x8_d1x8"].plan)
    assert "--enable-dp-attention" not in tp["engine-args"]["decode"]
    assert "GPU_MAX_HW_QUEUES" not in tp["engine-env"]["decode"]


def test_the_kv_transfer_config_is_json_once_bash_expands_it(inferencex_rendered):
    text = inferencex_rendered["fsl8k1k_p1x8_d1x8"].files["server_atom.sh"]
    line = next(x for x in text.splitlines() if "--kv-transfer-config" in x and "kv_consumer" in x)
    word = line.split("--kv-transfer-config ", 1)[1]
    out = subprocess.run(
        ["bash", "-c", f"printf '%s' {word}"], capture_output=True, text=True, env={"NODE_ADDR": "10.0.0.7"}
    ).stdout
    assert json.loads(out) == {
        "handshake_port": 6301,
        "kv_connector": "mooncake",
        "kv_role": "kv_consumer",
        "proxy_ip": "10.0.0.7",
    }


def test_atomesh_fronts_it_and_requests_carry_the_served_path(inferencex_rendered):
    r = inferencex_rendered["fsl8k1k_p2xdp8_d1xdp8"]
    router = parity.ours(r.plan)["router"]["all"]
    assert router["program"] == "atomesh" and router["--backend"] == "atom" and router["--policy"] == "random"
    assert (
        router["--prefill"].count("http://") == 2 and "8998" not in router["--prefill"]
    )  # no bootstrap port
    assert dict(r.plan.components)["atomesh"] == "087b82d9c1f630e79149ba37e6213257ec9a76f8"
    served = "/models/deepseek-ai/DeepSeek-V4-Pro"  # ATOM has no --served-model-name: it serves its path
    smoke = ["".join(p if isinstance(p, str) else "" for p in w) for w in r.plan.smoke]
    assert smoke[smoke.index("--engine") + 1] == "atom" and smoke[smoke.index("--model") + 1] == served
    assert "--decode-metrics" not in smoke  # ATOM has no /metrics
    assert parity.ours(r.plan)["client"]["all"]["--model"] == served
    env = r.files["env.sh"]
    assert 'export LD_LIBRARY_PATH=/opt/venv/lib/python3.10/site-packages/mooncake:/opt/rocm/lib"${LD_' in env


def _refused(loaded, **profile_changes) -> str:
    profiles = loaded.launch.profiles
    changed = profiles["cluster:mi355x-amds"].model_copy(update=profile_changes)
    launch = loaded.launch.model_copy(update={"profiles": {**profiles, "cluster:mi355x-amds": changed}})
    with pytest.raises(render.RenderError) as exc:
        render.render_config(KEY, dataclasses.replace(loaded, launch=launch))
    return exc.value.findings[0].message


def test_rdma_devices_atom_would_not_find_are_refused(inferencex_loaded):
    said = _refused(inferencex_loaded, nic_devices=["ionic_0", "ionic_1"])
    assert "ATOM's Mooncake takes RDMA device rdma<GPU index>" in said and "ionic_0" in said


def _line(argv: list[str]) -> Line:
    build = next(b for b in engine_builds() if b.engine == "atom")
    return Line("x/y/prefill", build, ("python3", "-m", "atom.entrypoints.openai_server", *argv), ())


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--model", "/m", "--enable-tbo"], None),  # its optional value
        (["--model", "/m", "--no-enable_prefix_caching", "--kv_cache_dtype", "fp8"], None),
        (
            ["--model", "/m", "--kv-cache-dtype", "fp8"],
            "unrecognized arguments: --kv-cache-dtype",
        ),  # its spelling
        (["--model", "/m", "--kv_cache_dtype", "fp4"], "invalid choice: 'fp4'"),
        (["--model", "/m", "-tp", "eight"], "invalid int value: 'eight'"),
        (["--model", "/m", "--hf-overrides", "{bad"], "invalid loads value"),
        (["--model", "/m", "--enable-tbo", "decode"], "invalid choice: 'decode'"),
    ],
)
def test_the_recorded_parser_accepts_and_refuses_what_atom_s_own_does(argv, said):
    verdict = recorded.judge(_line(argv))
    assert verdict.ok is (said is None), verdict.message
    assert said is None or said in verdict.message


@pytest.mark.tools  # its client lines are judged by the real AIPerf (.venv-bench)
def test_atom_lines_are_judged_by_the_recorded_parser_and_say_so(capsys):
    code = check_engines(["--config", KEY, "--configs", str(reference("amd-master.yaml"))])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "4 command lines checked, 0 rejected" in out
    assert "clients: 11 client lines checked, 0 rejected" in out
    assert "rebuilt from its recorded description (atom is on no registry reachable here" in out
