"""Real containers on this machine (docs/upstream-facts.md#containers): Debian's podman with runc behind a
`docker` command, images imported from a root file system made here (no registry is reachable).

What the local cluster's container tests run `scripts/container.sh` against: the same `docker` verbs a
site's Docker answers (run, stop, rm, ps with a label filter).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

from sim import apt

PACKAGES = ("podman", "runc", "catatonit")  # catatonit: `docker run --init`
# crun, podman's default, fails here ("cgroups in hybrid mode not supported"), and so does raising
# RLIMIT_NOFILE to podman's default ulimits.
CONF = '[containers]\ndefault_ulimits = []\n\n[engine]\nruntime = "runc"\n'


class ContainerError(RuntimeError):
    """Containers cannot run here; the message says what is missing and how to get it."""


def obtainable() -> bool:
    return shutil.which("podman") is not None or os.geteuid() == 0


def ensure_podman() -> None:
    """apt-get install podman, runc and catatonit when one is missing (root only, as CI is)."""
    have = shutil.which("podman") and shutil.which("runc") and Path("/usr/libexec/podman/catatonit").exists()
    if not have:
        _install(PACKAGES, "podman, runc or catatonit")


def _install(packages: tuple[str, ...], missing: str) -> None:
    try:
        apt.install(packages, missing)
    except apt.AptError as err:
        raise ContainerError(str(err)) from None


def docker_command(folder: Path) -> Path:
    """FOLDER/bin/docker: podman with this machine's settings. Returns the bin folder, for PATH."""
    conf = folder / "containers.conf"
    conf.parent.mkdir(parents=True, exist_ok=True)
    conf.write_text(CONF)
    bin_dir = folder / "bin"
    bin_dir.mkdir(exist_ok=True)
    docker = bin_dir / "docker"
    podman = shutil.which("podman")
    if podman is None:
        raise ContainerError("podman is not on PATH (ensure_podman installs it)")
    docker.write_text(f'#!/bin/sh\nCONTAINERS_CONF="{conf}" exec "{podman}" "$@"\n')
    docker.chmod(0o755)
    return bin_dir


# scripts/container.sh labels every container of ours with the node it was started for (its LABEL).
NODE_LABEL = "disagg-recipes.node"


def containers_of(docker_bin: Path, node: str) -> list[str]:
    """Names of this repository's containers for NODE, running or not (what container.sh sweeps)."""
    listed = subprocess.run(
        [str(docker_bin / "docker"), "ps", "--all", "--filter", f"label={NODE_LABEL}={node}"]
        + ["--format", "{{.Names}}"],
        capture_output=True,
        text=True,
        check=True,
    )
    return listed.stdout.split()


def _with_libraries(programs: tuple[str, ...]) -> list[Path]:
    """The programs and every shared library they load (ldd), as host paths."""
    files = []
    for name in programs:
        path = shutil.which(name)
        if path is None:
            raise ContainerError(f"{name} is not on this machine: cannot put it in the image")
        files.append(Path(path))
        listed = subprocess.run(["ldd", path], capture_output=True, text=True, check=False).stdout
        files += [Path(w) for line in listed.splitlines() for w in line.split() if w.startswith("/")]
    return sorted(set(files))


def rootfs_image(docker_bin: Path, programs: tuple[str, ...], work: Path) -> str:
    """An image of a root file system holding PROGRAMS (and their libraries) from this machine, imported
    once per content (its tag is the content's hash). Returns the image reference."""
    files = _with_libraries(programs)
    digest = hashlib.sha256()
    for f in files:
        digest.update(str(f).encode() + b"\0" + f.read_bytes())
    image = f"localhost/disagg-recipes-rootfs:{digest.hexdigest()[:16]}"
    docker = str(docker_bin / "docker")
    if subprocess.run([docker, "image", "exists", image], capture_output=True).returncode == 0:
        return image
    work.mkdir(parents=True, exist_ok=True)
    tar_path = work / "rootfs.tar"
    with tarfile.open(tar_path, "w") as tar:
        for f in files:
            tar.add(f.resolve(), arcname=str(f).lstrip("/"))  # programs' own paths: /bin/bash stays /bin/bash
        for folder in ("tmp", "proc", "sys", "dev", "etc"):
            info = tarfile.TarInfo(folder)
            info.type, info.mode = tarfile.DIRTYPE, 0o1777 if folder == "tmp" else 0o755
            tar.addfile(info)
    done = subprocess.run([docker, "import", "--quiet", str(tar_path), image], capture_output=True, text=True)
    if done.returncode != 0:
        raise ContainerError(f"podman import {tar_path} {image} failed: {done.stderr.strip()}")
    return image


# The node image of the local container runner: a Debian root file system with what a node script calls
# besides its tools (bash, coreutils, procps, util-linux, SLURM's client for scontrol), and the libraries
# the host's Python and its virtualenvs load; the tools are mounted from the host (configs/launch.yaml).
SUITE = "bookworm"
MIRROR = os.environ.get("DISAGG_DEBIAN_MIRROR", "http://deb.debian.org/debian")
NODE_PACKAGES = (
    "procps",
    "slurm-client",
    "libssl3",
    "libffi8",
    "libsqlite3-0",
    "libbz2-1.0",
    "liblzma5",
    "zlib1g",
    "libncursesw6",
    "libreadline8",
    "libgdbm6",
    "libuuid1",
    "libstdc++6",
    "libgcc-s1",
)
CONTENT_LABEL = "disagg-recipes.content"


def _image_label(docker: str, image: str) -> str | None:
    shown = subprocess.run(
        [docker, "image", "inspect", "--format", f'{{{{index .Labels "{CONTENT_LABEL}"}}}}', image],
        capture_output=True,
        text=True,
    )
    return shown.stdout.strip() if shown.returncode == 0 else None


def node_image(docker_bin: Path, image: str, path_first: Path, work: Path) -> bool:
    """IMAGE, made unless it holds this content already (packages, suite, PATH): debootstrap a minimal
    Debian, import it with PATH starting at PATH_FIRST (the node tools' folder, mounted). True when made."""
    docker = str(docker_bin / "docker")
    path = f"{path_first}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    content = hashlib.sha256("\n".join((SUITE, MIRROR, path, *NODE_PACKAGES)).encode()).hexdigest()[:16]
    if _image_label(docker, image) == content:
        return False
    _ensure_debootstrap()
    rootfs = work / f"rootfs-{content}"
    shutil.rmtree(rootfs, ignore_errors=True)  # a half-made one from an interrupted run
    rootfs.parent.mkdir(parents=True, exist_ok=True)
    include = f"--include={','.join(NODE_PACKAGES)}"
    argv = ["debootstrap", "--variant=minbase", include, SUITE, str(rootfs), MIRROR]
    done = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        shutil.rmtree(rootfs, ignore_errors=True)
        tail = (done.stdout + done.stderr).strip()[-800:]
        raise ContainerError(f"debootstrap of the node image failed ({done.returncode}):\n{tail}")
    try:
        tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
        assert tar.stdout is not None  # stdout=PIPE
        imported = subprocess.run(
            [docker, "import", "--quiet", "--change", f"ENV=PATH={path}"]
            + ["--change", f"LABEL={CONTENT_LABEL}={content}", "-", image],
            stdin=tar.stdout,
            capture_output=True,
            text=True,
        )
        tar.stdout.close()
        if tar.wait() != 0 or imported.returncode != 0:
            raise ContainerError(f"importing {rootfs} as {image} failed: {imported.stderr.strip()}")
    finally:
        shutil.rmtree(rootfs, ignore_errors=True)  # the image holds it now; 240 MB less on disk
    return True


def _ensure_debootstrap() -> None:
    if not shutil.which("debootstrap"):
        _install(("debootstrap",), "debootstrap")
