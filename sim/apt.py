"""Debian packages the local cluster needs (slurm-wlm, podman, debootstrap), apt-installed when missing:
as root only, as CI runs; anyone else is told the command."""

from __future__ import annotations

import os
import subprocess


class AptError(RuntimeError):
    """The packages are missing and cannot be installed here; the message says what to run."""


def install(packages: tuple[str, ...], missing: str) -> None:
    """apt-get update, then install PACKAGES without recommends; MISSING says what made it necessary.
    apt's own output is shown: it is the progress of a minute's work."""
    wanted = " ".join(packages)
    if os.geteuid() != 0:
        raise AptError(f"{missing} not installed and not root: run `apt-get install {wanted}` as root")
    print(f"installing {wanted} (missing: {missing})", flush=True)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for argv in (
        ["apt-get", "update", "-qq"],
        ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *packages],
    ):
        if subprocess.run(argv, env=env, stdin=subprocess.DEVNULL).returncode != 0:
            raise AptError(f"`{' '.join(argv)}` failed")
