#!/usr/bin/env python3
"""`sync.py image-ready`: the node's container runtime holds the job's image, the one lock.json names, before
any container starts; nothing is pulled on a compute node (`docker run --pull never` follows). A node that
lacks it loads the runner's archive (the file `make submit` saved on the shared file system); with a
preloaded image the site puts there itself, a missing or different image fails the node at once, named,
instead of a pull of tens of GB that a node without internet cannot make. Stdlib only."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
from pathlib import Path

from failures import die, line, one_line

EXIT_IMAGE = 1  # a host preflight failure, as every other check of that step
INSPECT_TIMEOUT_S = 60


class ImageError(Exception):
    """What keeps the node from running the job's image; one line."""


def docker() -> str:
    return os.environ.get("DOCKER", "docker")


def image_id(reference: str) -> str | None:
    """The id the node's runtime holds REFERENCE as; None when it holds no such image."""
    try:
        done = subprocess.run(
            [docker(), "image", "inspect", "--format", "{{.Id}}", reference],
            capture_output=True, text=True, timeout=INSPECT_TIMEOUT_S, check=False,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as err:
        raise ImageError(f"{docker()} image inspect {reference}: {err}") from None
    if done.returncode != 0:
        return None  # docker and podman both say "no such image" with exit code 1
    return done.stdout.strip() or None


def expected_id(lock: Path) -> tuple[str | None, str | None]:
    """lock.json's image_staging: the image id make submit found, and the archive file it saved."""
    try:
        staged = json.loads(lock.read_text()).get("image_staging") or {}
    except (OSError, ValueError) as err:
        raise ImageError(f"cannot read {lock}: {err}") from None
    return staged.get("id"), staged.get("archive_file")


def load(archive: str, timeout: int) -> None:
    size = Path(archive).stat().st_size if Path(archive).is_file() else None
    if size is None:
        raise ImageError(f"the runner's archive {archive} is not a file on this node (is the shared file "
                         "system mounted here?)")  # fmt: skip
    print(f"image-ready: loading {archive} ({size / 2**30:.1f} GiB), up to {timeout} s", flush=True)
    try:
        done = subprocess.run(
            [docker(), "load", "--input", archive],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise ImageError(f"{docker()} load --input {archive} took over {timeout} s (the runner's "
                         "image-staging.load-timeout)") from None  # fmt: skip
    except OSError as err:
        raise ImageError(f"{docker()} load: {err}") from None
    if done.returncode != 0:
        raise ImageError(f"{docker()} load --input {archive} exited {done.returncode}: "
                         f"{one_line(done.stderr or done.stdout, 300)}")  # fmt: skip


def cmd_image_ready(args: argparse.Namespace) -> int:
    try:
        want, archive = expected_id(Path(args.lock))
        have = image_id(args.image)
        if have is not None and want in (None, have):
            print(f"image {args.image}: {have} on this node" + ("" if want else " (lock.json names no id)"))
            return 0
        moved = f"holds {args.image} as {have}, lock.json names {want}" if have else f"has no {args.image}"
        if args.preloaded:
            raise ImageError(
                f"this node {moved}; the runner's image-staging is preloaded: put exactly that image on "
                "every node (docker pull from the site's mirror, or docker load), or give the runner an "
                "image-staging archive"
            )
        load(archive or "", args.load_timeout)
        have = image_id(args.image)
        if have is None or (want is not None and have != want):
            raise ImageError(f"after loading {archive} this node holds {args.image} as {have}, lock.json "
                             f"names {want}: the archive changed since make submit saved it")  # fmt: skip
        print(f"image {args.image}: {have}, loaded from {archive}")
    except ImageError as err:
        die(line("image-not-ready", problems=err), EXIT_IMAGE)
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser("image-ready", help="the node's runtime holds the job's image (loaded if staged)")
    p.add_argument("--image", required=True, help="the reference the containers run")
    p.add_argument("--lock", required=True, help="the run's lock.json (the image id make submit found)")
    how = p.add_mutually_exclusive_group(required=True)
    how.add_argument("--archive", action="store_true", help="load lock.json's archive file when absent")
    how.add_argument("--preloaded", action="store_true", help="the site put it there: absent is a failure")
    p.add_argument("--load-timeout", type=int, default=1800)
    p.set_defaults(func=cmd_image_ready)
