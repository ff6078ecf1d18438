"""The submitting side of the node setup: locks that name pyproject's pins with hashes, a wheelhouse whose
every wheel is checked against its pin, the run's lock file and the dry run's listing."""

from __future__ import annotations

import hashlib
import os
import shlex

import pytest

from recipes import nodesetup, submit
from recipes.render import render_config
from schemas.pins import pinned_version
from tests.wheels import make_wheel

MI355X = "kimik2.5-fp4-mi355x-vllm-disagg-agentic"


@pytest.mark.parametrize("lock", sorted(nodesetup.LOCKS.glob("*.txt")), ids=lambda p: p.name)
def test_every_lock_pins_the_extra_s_version_and_hashes_every_wheel(lock):
    pins = {p.name: p for p in nodesetup.read_lock(lock)}
    extra = lock.name.split("-cp", 1)[0]
    for command in nodesetup.SETS[extra]:
        assert pins[command].version == pinned_version(extra, command)
    assert all(len(p.hashes) >= 1 for p in pins.values()) and len(pins) > 10


def test_every_runner_with_a_node_setup_has_its_locks(configs):
    for label, profile in configs.launch.profiles.items():
        if profile.node_setup:
            for extra in nodesetup.SETS:
                assert nodesetup.lock_path(
                    extra, profile.node_setup.python, profile.node_setup.platform
                ).is_file(), label


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
    assert submit.main([MI355X, "--dry-run", "--out", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert shlex.split(lines[0])[3] == "sbatch"
    assert (
        lines[1] == "# node setup on rank 0 (python 3.12, manylinux_2_28_x86_64), from the run's wheelhouse:"
    )
    assert lines[2].startswith("#   bench: bench-cp312-manylinux_2_28_x86_64.txt (sha256 ")
    aiperf = [x for x in lines if x.startswith("#     aiperf==0.13.0 sha256:")]
    assert len(aiperf) == 1 and len(lines) > 100
    assert not (tmp_path / "runs").exists()


def test_the_run_holds_the_lock_and_the_lock_file_names_every_wheel(configs, tmp_path, monkeypatch):
    rendered = render_config(MI355X, configs)[0]

    def fake_wheelhouse(lock, python, platform, dest, **kw):
        dest.mkdir(parents=True)
        return [nodesetup.Wheel("aiperf-0.13.0-py3-none-any.whl", "aiperf", "0.13.0", "a" * 64)]

    monkeypatch.setattr(nodesetup, "wheelhouse", fake_wheelhouse)
    recipe = tmp_path / "recipe"
    recipe.mkdir()
    recorded = submit.node_setup(rendered, recipe)
    (s,) = rendered.plan.node_setup.sets
    assert (recipe / "setup" / "bench.txt").read_bytes() == (nodesetup.LOCKS / s.lock).read_bytes()
    assert recorded == {
        "python": "3.12",
        "platform": "manylinux_2_28_x86_64",
        "sets": {
            "bench": {
                "lock": s.lock,
                "lock_sha256": s.lock_sha256,
                "wheels": [
                    {"file": "aiperf-0.13.0-py3-none-any.whl", "version": "0.13.0", "sha256": "a" * 64}
                ],
            }
        },
    }
    assert submit.lock(rendered, recorded)["node_setup"] == recorded
