"""A new MI355X site's first job, as its engineer writes it from the README checklists alone
(tests/fixtures/new-site: eight ionic RoCE NICs a node, no internet on the compute nodes, a new model, a site
copy of an SGLang + MoRI recipe). The site's files are added to a scratch copy of the repository, as the
engineer edits theirs; lint must pass and render must give a launch that pulls nothing on a node, runs as the
submitting user, mounts the host's RDMA userspace, marks Mooncake's RDMA with the site's traffic class, lets
vLLM wait as long as the job does, waits for the GPUs to drain and carries the site's sbatch options.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
SITE = ROOT / "tests" / "fixtures" / "new-site"
VLLM_KEY = "qwen3-coder-fp8-mi355x-vllm-disagg-agentic"
SGLANG_KEY = "qwen3.5-fp8-mi355x-newsite-sglang-disagg"


def _merge(into: dict, extra: dict) -> None:
    """The site's mappings added to the repository's (one level down: labels, hardware, profiles, models)."""
    for top, value in extra.items():
        into.setdefault(top, {}).update(value)


def add_site(repo: Path, site: Path = SITE, edit=None) -> None:
    """The site's files added to the repository's own, as its engineer edits them; EDIT(name, data) may change
    a site file's data first (a test's defect)."""
    for name in ("runners.yaml", "launch.yaml", "models.yaml"):
        target = repo / "configs" / name
        data = yaml.safe_load(target.read_text())
        extra = yaml.safe_load((site / name).read_text())
        if edit:
            edit(name, extra)
        _merge(data, extra)
        target.write_text(yaml.safe_dump(data, sort_keys=False, width=120))
    master = yaml.safe_load((site / "master.yaml").read_text())
    if edit:
        edit("master.yaml", master)
    (repo / "configs" / "newsite-master.yaml").write_text(yaml.safe_dump(master, sort_keys=False, width=120))


def scratch_repository(target: Path) -> Path:
    """The repository's tracked files, without its tests and docs (what render and lint read)."""
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    for name in listed.decode().split("\0"):
        if not name or name.split("/")[0] in ("tests", "docs"):
            continue
        source = ROOT / name
        if source.is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)
    return target


def run(repo: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=repo, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def site_repo(tmp_path_factory) -> Path:
    repo = scratch_repository(tmp_path_factory.mktemp("new-site"))
    add_site(repo)
    return repo


@pytest.fixture(scope="module")
def rendered(site_repo) -> dict[str, dict[str, str]]:
    """variant folder name -> its files, for both of the site's configs."""
    out = {}
    for key in (VLLM_KEY, SGLANG_KEY):
        done = run(site_repo, "-m", "recipes.render", key, "--out", "out")
        assert done.returncode == 0, done.stdout + done.stderr
        for variant in sorted((site_repo / "out" / key).iterdir()):
            out[f"{key}/{variant.name}"] = {f.name: f.read_text() for f in variant.iterdir() if f.is_file()}
    return out


def test_the_site_lints_clean(site_repo):
    done = run(site_repo, "-m", "schemas.lint")
    assert done.returncode == 0, done.stdout + done.stderr


def _vllm(rendered) -> dict[str, str]:
    return next(files for name, files in rendered.items() if name.startswith(VLLM_KEY))


def _words(text: str) -> str:
    """A rendered script with its line continuations joined: one command a line."""
    return text.replace(" \\\n  ", " ")


def test_nothing_is_pulled_on_a_node(rendered):
    """1. The image is checked (loaded from the site's archive when absent) on every host before any container
    starts, and the containers never pull."""
    for files in rendered.values():
        sbatch = _words(files["job.sbatch"])
        assert "--image-staging archive --image-load-timeout 1800" in sbatch
        assert "-- --pull never --init" in sbatch
        plan = json.loads(files["plan.json"])
        assert plan["container"]["image_archive"] == "/shared/containers"


def test_containers_run_as_the_submitting_user(rendered):
    """2. No root-owned run folder, and NFS root_squash refuses nothing."""
    for files in rendered.values():
        assert "container.sh run --as-submitter " in _words(files["job.sbatch"])
        assert "containers run as root" not in files["job.sbatch"]


def test_rdma_userspace_devices_and_traffic_class(rendered):
    """3, 4 and 6: the host's verbs library and ionic providers, the verbs devices of the site's own NICs, and
    Mooncake's RDMA marked with the site's class (DSCP 26: traffic class 104, priority 3)."""
    files = _vllm(rendered)
    sbatch = _words(files["job.sbatch"])
    for n in range(8):
        assert f"--rdma-device ionic_{n} " in sbatch
    assert "--host-file '/usr/lib/x86_64-linux-gnu/libionic*.so=/usr/lib/x86_64-linux-gnu/'" in sbatch
    assert "--host-file /etc/libibverbs.d=" in sbatch
    assert "uverbs" not in sbatch  # the devices come from the NICs named, found on the host
    env = files["env.sh"]
    assert "export MC_IB_TC=104\n" in env and "export MC_IB_SL=3\n" in env
    assert "export MOONCAKE_DISABLE_HIP_DMABUF=1\n" in env
    script = files["server_vllm.sh"]
    assert 'require_rdma_registration --host "${NODE_ADDR}" --devices ionic_0,ionic_1' in script


def test_sglang_over_mori_is_marked_with_the_site_class(rendered):
    files = next(f for name, f in rendered.items() if name.startswith(SGLANG_KEY))
    assert "export MORI_RDMA_TC=104\n" in files["env.sh"]
    assert "MC_IB_TC" not in files["env.sh"]  # MoRI moves its KV, not Mooncake


def test_vllm_waits_as_long_as_the_job_and_reports_nothing(rendered):
    """5. The job waits engine-ready (3600 s by default) for each engine: so does vLLM itself, for a model
    no models.yaml block gave the variable. Usage telemetry is off."""
    env = _vllm(rendered)["env.sh"]
    assert "export VLLM_ENGINE_READY_TIMEOUT_S=3600\n" in env
    assert "export DO_NOT_TRACK=1\n" in env and "export VLLM_NO_USAGE_STATS=1\n" in env


def test_gpus_drain_and_the_site_sbatch_options(rendered):
    """6. InferenceX's 15-minute drain wait; the site's gres, qos, reservation, constraint and account."""
    files = _vllm(rendered)
    assert "require_drained_gpus 0.1 900\n" in files["server_vllm.sh"]
    sbatch = files["job.sbatch"]
    for line in ("--account=llm-perf", "--gres=gpu:8", "--qos=perf", "--reservation=disagg-bench",
                 "--constraint=mi355x&ainic"):  # fmt: skip
        assert f"#SBATCH {line}\n" in sbatch


def test_the_root_fallback_is_declared_and_said(tmp_path):
    """A site whose runtime needs root says why: the job's output says it; each node hands its files back."""

    def as_root(name, data):
        if name == "launch.yaml":
            data["profiles"]["cluster:mi355x-newsite"]["container"].update(
                {"user": "root", "root-reason": "the site's docker daemon refuses --user"}
            )

    repo = scratch_repository(tmp_path)
    add_site(repo, edit=as_root)
    done = run(repo, "-m", "recipes.render", SGLANG_KEY, "--out", "out")
    assert done.returncode == 0, done.stdout + done.stderr
    (variant,) = (repo / "out" / SGLANG_KEY).iterdir()
    sbatch = (variant / "job.sbatch").read_text()
    assert "container.sh run \\\n  --as-root \\\n" in sbatch
    reason = """'the site'"'"'s docker daemon refuses --user'"""  # the site's words quoted for bash
    assert f'echo "containers run as root on this runner:" {reason} "(each' in sbatch


def test_root_without_a_reason_is_refused(tmp_path):
    def as_root(name, data):
        if name == "launch.yaml":
            data["profiles"]["cluster:mi355x-newsite"]["container"]["user"] = "root"

    repo = scratch_repository(tmp_path)
    add_site(repo, edit=as_root)
    done = run(repo, "-m", "schemas.lint")
    assert done.returncode == 1
    assert "container.user root needs container.root-reason" in done.stdout


def test_a_docker_runner_without_image_staging_is_refused(tmp_path):
    """The defect of 1: docker's default pull policy on every compute node."""

    def unstaged(name, data):
        if name == "launch.yaml":
            del data["profiles"]["cluster:mi355x-newsite"]["image-staging"]

    repo = scratch_repository(tmp_path)
    add_site(repo, edit=unstaged)
    done = run(repo, "-m", "schemas.lint")
    assert done.returncode == 1
    assert "container-runtime docker needs image-staging" in done.stdout


def test_a_model_block_cannot_set_what_the_launch_derives(tmp_path):
    """The defect of 5: VLLM_ENGINE_READY_TIMEOUT_S lived in some model blocks only, and a new model
    inherited nothing. Now the launch derives it from the runner's engine-ready for every model; a block
    setting it would contradict that, and lint says where it belongs."""

    def engine_wait_in_the_model(name, data):
        if name == "models.yaml":
            block = data["models"]["Qwen/Qwen3-Coder-480B-A35B-Instruct-FP8"]["engines"]["vllm"]["amd"]
            block["env"]["VLLM_ENGINE_READY_TIMEOUT_S"] = 3600

    repo = scratch_repository(tmp_path)
    add_site(repo, edit=engine_wait_in_the_model)
    done = run(repo, "-m", "schemas.lint")
    assert done.returncode == 1
    assert "env.VLLM_ENGINE_READY_TIMEOUT_S: set timeouts.engine-ready instead" in done.stdout


def _defect(file: str, change):
    def edit(name, data):
        if name == file:
            change(data)

    return edit


def _master(change):
    return _defect("master.yaml", lambda data: change(data[VLLM_KEY]))


def _point(data):
    return data["scenarios"]["agentic-coding"][0]["search-space"][0]


def _site(data):
    return data["profiles"]["cluster:mi355x-newsite"]


# Each case of what the engines or the cluster would refuse, on the site's own files: lint refuses it at its
# file and line, saying how to fix it.
SITE_DEFECTS = [
    pytest.param(
        _master(lambda e: e.update(image="vllm/vllm-openai:v0.33.0")),
        "newsite-master.yaml",
        "is built for NVIDIA GPUs (CUDA), and runner cluster:mi355x-newsite has gpu-vendor amd",
        "use vllm/vllm-openai-rocm:v0.33.0",
        id="cuda-image-on-amd",
    ),
    pytest.param(
        _master(lambda e: _point(e)["decode"].update(tp=6, ep=6)),
        "newsite-master.yaml",
        "decode: tp 6 on model Qwen/Qwen3-Coder-480B-A35B-Instruct-FP8",
        "works on a node of 8 GPUs",
        id="tp-splits-no-heads",
    ),
    pytest.param(
        _master(
            lambda e: _point(e)["prefill"].update(
                {"additional-settings": ["MC_PROTOCOL=rdma", "MAX_MODEL_LEN=1048576"]}
            )
        ),
        "newsite-master.yaml",
        "is above the 262,144 positions of model Qwen/Qwen3-Coder-480B-A35B-Instruct-FP8",
        "MAX_MODEL_LEN=262144 at most",
        id="context-above-the-model",
    ),  # fmt: skip
    pytest.param(
        _defect("launch.yaml", lambda d: _site(d).update({"time-limit": "02:00:00"})),
        "newsite-master.yaml",
        "over runner cluster:mi355x-newsite's time-limit 02:00:00 (7200 s), set in configs/launch.yaml",
        "raise configs/launch.yaml profiles.cluster:mi355x-newsite.time-limit",
        id="sweep-outlasts-the-time-limit",
    ),
    pytest.param(
        _defect("launch.yaml", lambda d: [_site(d).pop(k) for k in ("nic-devices", "nic-check")]),
        "newsite-master.yaml",
        "MC_PROTOCOL=rdma on runner cluster:mi355x-newsite, whose launch profile lists no nic-devices",
        "or set MC_PROTOCOL=tcp",
        id="rdma-without-nic-devices",
    ),
]


@pytest.mark.parametrize("edit, file, what, fix", SITE_DEFECTS)
def test_lint_refuses_what_the_site_would_refuse_at_its_file_and_line(tmp_path, edit, file, what, fix):
    repo = scratch_repository(tmp_path)
    add_site(repo, edit=edit)
    done = run(repo, "-m", "schemas.lint")
    assert done.returncode == 1, done.stdout + done.stderr
    line = next((x for x in done.stdout.splitlines() if what in x), None)
    assert line is not None, done.stdout
    assert line.startswith(f"{repo}/configs/{file}:") and line.split(":")[1].isdigit(), line
    assert fix in line, line
