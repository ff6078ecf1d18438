"""The submitting side of the node setup: locks that name pyproject's pins with hashes, a wheelhouse whose
every wheel is checked against its pin, the run's lock file and the dry run's listing."""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.metadata
import os
import shlex
import subprocess

import pytest
from pydantic import ValidationError

from recipes import nodesetup, submit
from recipes.build import Unsupported, build_plan
from recipes.render import render_config, render_plan
from schemas.launch import SiteWheel
from schemas.pins import requirements
from tests.recipes.test_render import SHELLCHECK
from tests.wheels import make_wheel

MI355X = "kimik2.5-fp4-mi355x-vllm-disagg-agentic"


@pytest.mark.parametrize("lock", sorted(nodesetup.LOCKS.glob("*.txt")), ids=lambda p: p.name)
def test_every_lock_pins_the_extra_s_versions_and_hashes_every_wheel(lock):
    """The proxy's lock is what runs in a job; its extra is what tests/proxy runs against: the same pins."""
    pins = {p.name: p for p in nodesetup.read_lock(lock)}
    extra = lock.name.split("-cp", 1)[0]
    assert extra in nodesetup.SETS
    for requirement in requirements(extra):
        name, version = requirement.split("==")
        name = name.split("[", 1)[0]  # lm-eval[api]: the extra's package, its own extra aside
        assert pins[name].version == version, requirement
    assert all(len(p.hashes) >= 1 for p in pins.values()) and len(pins) > len(requirements(extra))


def test_the_tests_run_the_proxy_on_the_pins_a_job_runs_it_on():
    for requirement in requirements("proxy"):
        name, version = requirement.split("==")
        assert importlib.metadata.version(name) == version, requirement


def test_every_runner_with_a_node_setup_has_its_locks(configs):
    for label, profile in configs.launch.profiles.items():
        if profile.node_setup:
            for extra in nodesetup.SETS:
                assert nodesetup.lock_path(
                    extra, profile.node_setup.python, profile.node_setup.platform
                ).is_file(), label


def test_our_proxy_runs_on_the_proxy_set_where_the_runner_has_a_node_setup(configs):
    """The proxy's server stack (its uvicorn subclass) is the pinned one the tests run, not the image's;
    vllm-router's recipe installs no proxy set; a runner without a node setup keeps its python3."""
    proxy = build_plan(configs.targets(MI355X)[0])
    assert [s.name for s in proxy.node_setup.sets] == ["bench", "proxy"]
    assert proxy.router.argv[2:5] == (("proxy-python3",), ("-m",), ("proxy",))
    assert ("proxy-python3",) in proxy.leader_commands  # preflight: on PATH after the node setup
    router = build_plan(configs.targets("kimik2.5-fp4-mi355x-vllm-disagg")[0])
    assert [s.name for s in router.node_setup.sets] == ["bench", "eval"]  # a fixed-seq point: its graded eval
    local = build_plan(configs.targets("local-sim-vllm-disagg-agentic")[0])
    assert local.node_setup is None and local.router.argv[2:5] == (("python3",), ("-m",), ("proxy",))


def test_platform_tags_are_every_older_manylinux_too():
    tags = nodesetup.platform_tags("manylinux_2_28_x86_64")
    assert (
        tags[0] == "manylinux_2_28_x86_64"
        and "manylinux_2_17_x86_64" in tags
        and "manylinux2014_x86_64" in tags
    )
    assert not any("2_29" in t for t in tags)
    with pytest.raises(nodesetup.SetupError, match="is not manylinux_2_<N>_<arch>"):
        nodesetup.platform_tags("linux_x86_64")


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A wheel cache holding demo-tool 1.0, and pip download left out (the container test runs it)."""
    monkeypatch.setattr(nodesetup, "download", lambda *a, **k: None)
    return tmp_path / "cache"


def test_the_wheelhouse_holds_each_pinned_wheel_checked_against_its_hash(tmp_path, cache):
    wheel = make_wheel(cache)
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    lock = tmp_path / "bench.txt"
    lock.write_text(f"demo-tool==1.0 \\\n    --hash=sha256:{'1' * 64} \\\n    --hash=sha256:{digest}\n")
    out = nodesetup.wheelhouse(lock, "3.12", "manylinux_2_28_x86_64", tmp_path / "wh", cache=cache, say=print)
    assert out == [nodesetup.Wheel(wheel.name, "demo-tool", "1.0", digest)]
    assert os.path.samefile(tmp_path / "wh" / wheel.name, wheel)  # a hard link, not a second copy


@pytest.mark.parametrize(
    ("wheel", "fits"),
    [
        ("a-1-py3-none-any.whl", True),
        ("a-1-cp312-cp312-manylinux_2_17_x86_64.manylinux2014_x86_64.whl", True),
        ("a-1-cp311-cp311-manylinux_2_28_x86_64.whl", False),  # another Python
        ("a-1-cp310-abi3-manylinux_2_28_x86_64.whl", True),  # the stable ABI of an older one
        ("a-1-cp312-cp312-manylinux_2_34_x86_64.whl", False),  # a newer glibc
        ("a-1-cp312-cp312-manylinux_2_28_aarch64.whl", False),
        ("a-1-cp312-cp312-musllinux_1_2_x86_64.whl", False),
    ],
)
def test_a_wheelhouse_takes_only_the_builds_its_node_installs(wheel, fits):
    assert nodesetup.fits(wheel, "3.12", "manylinux_2_28_x86_64") is fits


def test_the_wheelhouse_takes_its_python_s_build_from_a_cache_holding_every_runner_s(tmp_path, cache):
    built = make_wheel(cache)
    builds = {
        py: cache / built.name.replace("py3-none-any", f"{py}-{py}-manylinux_2_28_x86_64")
        for py in ("cp311", "cp312")
    }
    for py, path in builds.items():
        path.write_bytes(built.read_bytes() + py.encode())  # another file, another hash
    built.unlink()
    hashes = " ".join(f"--hash=sha256:{hashlib.sha256(p.read_bytes()).hexdigest()}" for p in builds.values())
    lock = tmp_path / "proxy.txt"
    lock.write_text(f"demo-tool==1.0 {hashes}\n")
    (got,) = nodesetup.wheelhouse(
        lock, "3.12", "manylinux_2_28_x86_64", tmp_path / "wh", cache=cache, say=print
    )
    assert got.file == builds["cp312"].name


def test_a_cached_wheel_with_another_hash_is_refused(tmp_path, cache):
    make_wheel(cache)
    lock = tmp_path / "bench.txt"
    lock.write_text(f"demo-tool==1.0 --hash=sha256:{'0' * 64}\n")
    with pytest.raises(nodesetup.SetupError, match=r"no wheel of demo-tool==1.0 with a pinned hash"):
        nodesetup.wheelhouse(lock, "3.12", "manylinux_2_28_x86_64", tmp_path / "wh", cache=cache, say=print)


def test_a_lock_line_without_a_hash_is_refused(tmp_path):
    lock = tmp_path / "bench.txt"
    lock.write_text("demo-tool==1.0\n")
    with pytest.raises(nodesetup.SetupError, match="demo-tool==1.0 has no --hash=sha256"):
        nodesetup.read_lock(lock)


def test_the_dry_run_lists_every_wheel_with_its_hashes(capsys, tmp_path):
    assert submit.main([MI355X, "--variant", SEED_POINT, "--dry-run", "--out", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert shlex.split(lines[0])[3] == "sbatch"
    assert lines[1] == "# node setup (python 3.12, manylinux_2_28_x86_64), from the run's wheelhouse:"
    assert lines[2].startswith("#   bench: bench-cp312-manylinux_2_28_x86_64.txt (sha256 ")
    assert lines[2].endswith(" wheels (rank 0), puts on PATH: aiperf")
    aiperf = [x for x in lines if x.startswith("#     aiperf==0.13.0 sha256:")]
    assert len(aiperf) == 1 and len(lines) > 100
    assert not (tmp_path / "runs").exists()


def test_the_run_holds_the_lock_and_the_lock_file_names_every_wheel(configs, tmp_path, monkeypatch):
    rendered = render_config(MI355X, configs)[0]
    made = {"bench": ("aiperf-0.13.0-py3-none-any.whl", "aiperf", "0.13.0"),
            "proxy": ("uvicorn-0.54.0-py3-none-any.whl", "uvicorn", "0.54.0")}  # fmt: skip

    def fake_wheelhouse(lock, python, platform, dest, **kw):
        dest.mkdir(parents=True, exist_ok=True)
        return [nodesetup.Wheel(*made[lock.name.split("-cp")[0]], "a" * 64)]

    monkeypatch.setattr(nodesetup, "wheelhouse", fake_wheelhouse)
    recipe = tmp_path / "recipe"
    recipe.mkdir()
    recorded = submit.node_setup(rendered, recipe)
    sets = rendered.plan.node_setup.sets
    assert [s.name for s in sets] == ["bench", "proxy"]  # the MI355X recipe's router is our proxy
    for s in sets:
        assert (recipe / "setup" / f"{s.name}.txt").read_bytes() == (nodesetup.LOCKS / s.lock).read_bytes()
    assert recorded == {
        "python": "3.12",
        "platform": "manylinux_2_28_x86_64",
        "sets": {
            s.name: {
                "lock": s.lock,
                "requirements_sha256": s.requirements_sha256,
                "installed_on": "leader",
                "wheels": [{"file": made[s.name][0], "version": made[s.name][2], "sha256": "a" * 64}],
            }
            for s in sets
        },
    }
    assert submit.lock(rendered, recorded)["node_setup"] == recorded


# ---------------------------------------------------------------- a site's wheel (LMCache for ROCm)

SITE = "/shared/wheels/lmcache-0.5.3-cp312-cp312-linux_x86_64.whl"
SEED_POINT = "agentic_p1x8_d1x8_conc8"


def with_site_wheel(configs, source: str = SITE):
    target = configs.targets(MI355X)[0]
    setup = target.launch.node_setup.model_copy(
        update={"site_wheels": {"lmcache": SiteWheel(source=source, sha256="ab" * 32)}}
    )
    return dataclasses.replace(target, launch=target.launch.model_copy(update={"node_setup": setup}))


def test_a_site_lmcache_wheel_goes_onto_the_prefill_nodes_python_path(configs, tmp_path):
    plan = build_plan(with_site_wheel(configs))
    bench, proxy, lmcache = plan.node_setup.sets
    assert (bench.where, bench.layer, bench.commands) == ("leader", False, ("aiperf",))
    assert (proxy.where, proxy.layer, proxy.commands) == ("leader", False, ("proxy-python3=python3",))
    assert (lmcache.where, lmcache.layer, lmcache.version, lmcache.source) == (
        "prefill",
        True,
        "0.5.3",
        SITE,
    )
    script = render_plan(plan).files["server_vllm.sh"]
    assert (
        'if [[ $RANK == 0 || $ROLE == prefill ]]; then\n  step "node setup"\n  if [[ $RANK == 0 ]]' in script
    )
    assert 'install_set lmcache 3.12 "$RUN_DIR/setup-env" layer lmcache\n' in script
    path = tmp_path / "server_vllm.sh"
    path.write_text(script)
    done = subprocess.run([SHELLCHECK, "-x", "--severity=style", str(path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout
    assert "site wheel " + SITE in "\n".join(submit.dry_run_setup(render_plan(plan)))


def test_a_site_wheel_of_another_version_than_the_config_s_is_refused(configs):
    other = SITE.replace("0.5.3", "0.5.6")
    with pytest.raises(Unsupported, match=r"is lmcache 0\.5\.6 .*; the config pins lmcache 0\.5\.3"):
        build_plan(with_site_wheel(configs, other))


def test_without_a_site_wheel_the_dry_run_says_where_the_images_lmcache_comes_from(capsys, tmp_path):
    """Never "from the image" on faith: the build's record in configs/engine-builds.yaml, with its source."""
    assert submit.main([MI355X, "--variant", SEED_POINT, "--dry-run", "--out", str(tmp_path)]) == 0
    said = [x for x in capsys.readouterr().out.splitlines() if x.startswith("# lmcache ")]
    source = (
        "in the image: the release pipeline builds the ROCm images with INSTALL_LMCACHE=true: LMCache "
        "v0.5.3 from source (commit 140819c9d57a975dbc5678a6459a218e544cb58b) with HIP for gfx942 and "
        "gfx950, checked with `import lmcache, lmcache.c_ops` "
        "(https://github.com/vllm-project/vllm/blob/v0.33.0/.buildkite/release-pipeline.yaml)"
    )
    # both sides of it: the server's command, and the engine's Python, which loads the connector module
    assert said == [
        f"# lmcache 0.5.3 behind `lmcache` on prefill nodes: {source} (preflight checks the version)",
        f"# lmcache 0.5.3 behind `vllm` on prefill nodes: {source} (preflight checks the version, and that "
        "it imports lmcache.integration.vllm.lmcache_mp_connector)",
    ]


def with_lmcache(configs, version: str, image: str | None = None):
    """The seed's first point pinning another LMCache, on another image."""
    target = configs.targets(MI355X)[0]
    space = target.point.space.model_copy(
        update={
            "kv_offload_backend": target.point.space.kv_offload_backend.model_copy(
                update={"version": version}
            )
        }
    )
    entry = target.entry.model_copy(update={"image": image}) if image else target.entry
    return dataclasses.replace(target, entry=entry, point=dataclasses.replace(target.point, space=space))


def test_an_lmcache_the_image_does_not_carry_is_refused_naming_the_fix(configs):
    """The seed once pinned an LMCache from an image that carries another one: every prefill would have failed
    preflight after the allocation started. Render (so lint) refuses it, and an image with none."""
    refused = (
        r"lmcache 0\.5\.5\.dev104\+rocm7\.2: image vllm/vllm-openai-rocm:v0\.33\.0 carries lmcache 0\.5\.3 "
        r".* pin kv-offload-backend.version 0\.5\.3, or give runner cluster:mi355x-amds an LMCache wheel "
        r"built for this image"
    )
    with pytest.raises(Unsupported, match=refused):
        build_plan(with_lmcache(configs, "0.5.5.dev104+rocm7.2"))
    with pytest.raises(Unsupported, match="image lmsysorg/sglang:v0.5.23 carries no LMCache"):
        build_plan(with_lmcache(configs, "0.5.3", image="lmsysorg/sglang:v0.5.23"))


def test_a_site_wheel_is_taken_only_with_its_hash(tmp_path):
    wheel = make_wheel(tmp_path / "site")
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    got = nodesetup.site_wheel(str(wheel), digest, tmp_path / "wh", say=print)
    assert got == nodesetup.Wheel(wheel.name, "demo-tool", "1.0", digest)
    assert (tmp_path / "wh" / wheel.name).read_bytes() == wheel.read_bytes()
    with pytest.raises(nodesetup.SetupError, match=f"has SHA-256 {digest}; the runner's node-setup pins 0+$"):
        nodesetup.site_wheel(str(wheel), "0" * 64, tmp_path / "wh2", say=print)
    with pytest.raises(nodesetup.SetupError, match="no such file on this host"):
        nodesetup.site_wheel(str(tmp_path / "x-1.0-py3-none-any.whl"), digest, tmp_path / "wh3", say=print)


@pytest.mark.parametrize(
    "source",
    [
        "/shared/../etc/lmcache-1-py3-none-any.whl",  # no part starting with '.'
        "http://h/lmcache-1-py3-none-any.whl",  # https only
        "https://user:pw@h/lmcache-1-py3-none-any.whl",  # no credentials in a rendered file
        "https://h/lmcache-1-py3-none-any.whl?token=x",
        "/shared/lmcache.tar.gz",
        "/shared/lmcache-1-py3-none-any.whl\n",
    ],
)
def test_a_site_wheel_source_is_a_plain_path_or_https_url(source):
    with pytest.raises(ValidationError, match="is not a wheel's path or URL"):
        SiteWheel(source=source, sha256="ab" * 32)
