"""Real containers on this machine (FACTS section 10): Debian's podman with runc behind a `docker` command,
images imported from a root file system made here (no registry is reachable).

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

PACKAGES = ("podman", "runc", "catatonit")  # catatonit: `docker run --init`
# crun, podman's default, fails here ("cgroups in hybrid mode not supported"), and so does raising
# RLIMIT_NOFILE to podman's default ulimits.
CONF = '[containers]\ndefault_ulimits = []\n\n[engine]\nruntime = "runc"\n'


class ContainerError(RuntimeError):
    """Containers cannot run here; the message says what is missing and how to get it."""


def obtainable() -> bool:
    return shutil.which("podman") is not None or os.geteuid() == 0


def ensure_podman() -> None:
    """apt-get install podman, runc and catatonit when podman is missing (root only, as CI is)."""
    if shutil.which("podman") and shutil.which("runc") and Path("/usr/libexec/podman/catatonit").exists():
        return
    if os.geteuid() != 0:
        raise ContainerError(f"podman is not installed and we are not root: apt-get install {' '.join(PACKAGES)}")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for argv in (
        ["apt-get", "update", "-qq"],
        ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *PACKAGES],
    ):
        done = subprocess.run(argv, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True)
        if done.returncode != 0:
            raise ContainerError(f"`{' '.join(argv)}` failed ({done.returncode}): {done.stderr.strip()[-500:]}")


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
