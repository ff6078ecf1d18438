"""configs/launch.yaml: the launch profile of each runner. Accept/reject table of its model (each value a
shape no newline, quote or `$` passes), and the shipped file."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from schemas.launch import LaunchProfile, LaunchProfiles
from schemas.yamlio import load_file

from .conftest import LAUNCH, run_lint

REAL = {
    "gpu-vendor": "amd",
    "partition": "compute",
    "container-runtime": "docker",
    "image-staging": {"archive": "/models/images"},
    "model-root": "/models",
    "data-plane-interface": "ens51np0",
    "node-setup": {"python": "3.12", "platform": "manylinux_2_28_x86_64"},
}
LOCAL = {
    **REAL,
    "gpu-vendor": "none",
    "engine-build": "simulator",
    "container-runtime": "none",
    "image-staging": None,
    "node-address": "slurm-nodeaddr",
    "data-plane-interface": None,
    "loopback": True,
    "ship": {"traces": "sim/traces"},
    "benchmark": {"tokenizer": "traces/tokenizer", "hf-cache": "/tmp/hf", "corpus": "made-up"},
    "node-setup": None,
}


def profile(base: dict, **changes) -> dict:
    out = {**base, **{k.replace("_", "-"): v for k, v in changes.items()}}
    return {k: v for k, v in out.items() if v is not None}


# fmt: off
REJECT = [
    pytest.param(profile(REAL, partition="sim\n#SBATCH --x"), "partition", id="newline-in-partition"),
    pytest.param(profile(REAL, account="a b"), "account", id="space-in-account"),
    pytest.param(profile(REAL, time_limit="4h"), "time-limit", id="time-limit-shape"),
    pytest.param(profile(REAL, model_root="/models/../etc"), "model-root", id="model-root-dotdot"),
    pytest.param(profile(REAL, model_root="models"), "model-root", id="model-root-relative"),
    pytest.param(profile(REAL, model_root="/m$(id)"), "model-root", id="model-root-substitution"),
    pytest.param(profile(REAL, data_plane_interface=None), "needs data-plane-interface", id="no-interface"),
    pytest.param(profile(REAL, partition=None), "partition", id="partition-missing"),
    pytest.param(profile(REAL, image_staging=None), "container-runtime docker needs image-staging",
                 id="docker-pulls-on-every-node"),
    pytest.param(profile(REAL, image_staging={"archive": "/i", "preloaded": True}), "one of them",
                 id="staging-two-ways"),
    pytest.param(profile(REAL, image_staging={"archive": "i"}), "archive", id="staging-relative-archive"),
    pytest.param(profile(REAL, container={"user": "root"}), "needs container.root-reason", id="root-unsaid"),
    pytest.param(profile(REAL, container={"root-reason": "because we always did"}),
                 "is for container.user root", id="reason-without-root"),
    pytest.param(profile(REAL, container={"rdma-userspace": [{"host": "/usr/lib/$(id)"}]}), "host",
                 id="host-file-substitution"),
    pytest.param(profile(REAL, container={"rdma-userspace": [{"host": "lib/x.so"}]}), "host",
                 id="host-file-relative"),
    pytest.param(profile(REAL, sbatch={"constraint": "a b"}), "constraint", id="constraint-space"),
    pytest.param(profile(REAL, sbatch={"gres": "gpu:8\n#SBATCH --x"}), "gres", id="gres-newline"),
    pytest.param(profile(REAL, engine_env={"vllm": {"VLLM_ENGINE_READY_TIMEOUT_S": 600}}),
                 "set timeouts.engine-ready instead", id="engine-ready-twice"),
    pytest.param(profile(REAL, engine_env={"vllm": {"MC_IB_TC": 96}}), "state rdma-traffic-class instead",
                 id="traffic-class-behind-the-runners-back"),
    pytest.param(profile(REAL, gpu_drain={"wait": 7200}), "wait", id="drain-wait-over-an-hour"),
    pytest.param(profile(REAL, gpu_vendor="intel"), "gpu-vendor", id="unknown-vendor"),
    pytest.param(profile(REAL, timeouts={"engine-ready": 0}), "engine-ready", id="zero-timeout"),
    pytest.param(profile(REAL, timeouts={"engine_ready": 5}), "engine_ready", id="snake-case-key"),
    pytest.param(profile(REAL, teardown={"grace": 2, "fail-grace": 5}), "fail-grace 5 is above grace 2",
                 id="fail-grace-above-grace"),
    pytest.param(profile(REAL, teardown={"fail-grace": 2, "container-stop": 2}), "container-stop 2 leaves",
                 id="container-stop-no-time"),
    pytest.param(profile(REAL, ports={"router": 8000}), "ports: engine and router are both 8000",
                 id="ports-shared"),
    pytest.param(profile(REAL, ports={"barrier": 8998}), "barrier and mooncake-bootstrap are both 8998",
                 id="port-shared-with-bootstrap"),
    pytest.param(profile(LOCAL, ship={"traces": "../outside"}), "ship", id="ship-outside"),
    pytest.param(profile(LOCAL, ship={}), "not under a shipped folder", id="tokenizer-not-shipped"),
    pytest.param(profile(REAL, benchmark={"corpus": "made-up"}), "local runner's stand-in",
                 id="made-up-corpus-real"),
    pytest.param(profile(REAL, benchmark={"agentic-replay": {"idle-gap-cap-seconds": 300}}), "idle-gap-cap",
                 id="idle-gap-cap-forbidden-by-the-lock"),
    pytest.param(profile(REAL, engine_env={"vllm": {"bad-name": "1"}}), "engine-env", id="env-name"),
    pytest.param(profile(REAL, engine_env={"vllm": {"X": "a\nb"}}), "engine-env", id="env-newline"),
    pytest.param(profile(REAL, engine_env={"trtllm": {"X": "1"}}), "engine-env", id="env-unknown-engine"),
    pytest.param(profile(REAL, nic_devices=["rdma0;id"]), "nic-devices", id="nic-device-shape"),
    # nothing a shell would read as more than text, whatever the renderer does with it
    *[pytest.param(profile(REAL, engine_env={"vllm": {"X": value}}), "is not an environment value", id=id)
      for id, value in [("env-quote", 'a"b'), ("env-apostrophe", "a'b"), ("env-dollar", "$(id)"),
                        ("env-backtick", "`id`"), ("env-backslash", "a\\b"), ("env-tab", "a\tb"),
                        ("env-unicode", "\u00fc")]],
    pytest.param(profile(REAL, partition="comp\u0443te"), "is not a name", id="partition-cyrillic"),
    pytest.param(profile(REAL, model_root="/models\n"), "is not an absolute path", id="model-root-newline"),
    pytest.param(profile(REAL, data_plane_interface="eth0\x1b"), "is not a name", id="interface-escape"),
    pytest.param(profile(LOCAL, ship={"Traces": "sim/traces"}), "is not a folder name", id="ship-name-upper"),
    pytest.param(profile(REAL, engine_env_from_settings={"vllm": {"X": "lmcache_chunk_size"}}),
                 "is not a setting name", id="from-setting-lowercase"),
    pytest.param(profile(REAL, time_limit="4:00:00\n"), "is not a time limit", id="time-limit-newline"),
    pytest.param(profile(REAL, node_setup=None), "engine-build image needs node-setup", id="image-no-setup"),
    pytest.param(profile(REAL, node_setup={"python": "3.12\n", "platform": "manylinux_2_28_x86_64"}),
                 "is not a Python version", id="setup-python-newline"),
    pytest.param(profile(REAL, node_setup={"python": "3.12", "platform": "linux_x86_64"}),
                 "is not a wheel platform", id="setup-platform"),
    pytest.param(profile(REAL, node_setup={"python": "3.12", "platform": "manylinux_2_28_x86_64",
                                           "root": "setup"}), "is not an absolute path", id="setup-root"),
    pytest.param(profile(REAL, gpu_drain={"max-vram-used": 1.0}), "gpu-drain", id="drain-whole-gpu"),
    pytest.param(profile(REAL, gpu_drain={"max-vram-used": 0}), "gpu-drain", id="drain-zero"),
    pytest.param(profile(REAL, rdma_traffic_class={"dscp": 64, "priority": 3}), "dscp", id="dscp-6-bits"),
    pytest.param(profile(REAL, rdma_traffic_class={"dscp": 24, "priority": 8}), "priority", id="prio-8"),
    pytest.param(profile(REAL, rdma_traffic_class={"dscp": 24}), "priority", id="traffic-class-half"),
    pytest.param(profile(REAL, nic_check={"nicctl": ["nicctl"], "no-drop-priorities": [3]},
                         rdma_traffic_class={"dscp": 26, "priority": 4}),
                 "rdma-traffic-class.priority 4 is not one of nic-check", id="lossy-class"),
]
ACCEPT = [
    pytest.param(REAL, id="real-defaults"),
    pytest.param(LOCAL, id="local"),
    pytest.param(profile(REAL, account="proj-42", time_limit="12:00:00"), id="account-time"),
    pytest.param(profile(REAL, engine_env={"vllm": {"X": 30, "Y": "a b"}}), id="env-int-and-text"),
    pytest.param(profile(REAL, rdma_traffic_class={"dscp": 24, "priority": 3}), id="traffic-class"),
]
# fmt: on


@pytest.mark.parametrize(("data", "fragment"), REJECT)
def test_reject(data, fragment):
    with pytest.raises(ValidationError) as error:
        LaunchProfile.model_validate(data)
    assert fragment in str(error.value)


@pytest.mark.parametrize("data", ACCEPT)
def test_accept(data):
    LaunchProfile.model_validate(data)


def test_defaults_are_a_real_clusters():
    p = LaunchProfile.model_validate(REAL)
    assert (p.engine_build, p.node_address, p.private_bind, p.loopback) == (
        "image",
        "interface",
        "loopback",
        False,
    )
    assert (p.time_limit, p.timeouts.engine_ready, p.benchmark.seconds) == ("04:00:00", 3600, 600)
    assert p.benchmark.tokenizer is None and p.ship == {} and p.engine_env == {}


def test_shipped_launch_file_lints_clean_and_covers_every_runner_a_config_uses():
    profiles = LaunchProfiles.model_validate(load_file(LAUNCH).data).profiles
    assert {"cluster:mi355x-amds", "cluster:h200-dgxc", "cluster:local-sim"} <= set(profiles)
    assert run_lint("--launch", LAUNCH) == (0, "", "lint: ok, 1 file (strict)\n")


def test_a_broken_launch_file_is_reported_on_its_line(tmp_path):
    bad = tmp_path / "launch.yaml"
    bad.write_text("profiles:\n  x:\n    gpu-vendor: amd\n    partition: 'a b'\n")
    code, out, _ = run_lint("--launch", bad)
    assert code == 1 and f"{bad}:4: profiles.x.partition:" in out
