"""A small real wheel for tests of the node setup: made here, installable by pip, with a console script."""

from __future__ import annotations

import base64
import hashlib
import zipfile
from pathlib import Path


def make_wheel(folder: Path, version: str = "1.0") -> Path:
    """demo-tool VERSION: one module and a console script `demotool` that prints its version."""
    info = f"demo_tool-{version}.dist-info"
    files = {
        "demo_tool.py": f"def main():\n    print('demotool {version}')\n",
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: demo-tool\nVersion: {version}\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        f"{info}/entry_points.txt": "[console_scripts]\ndemotool = demo_tool:main\n",
    }
    record = []
    for name, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(text.encode())}")
    files[f"{info}/RECORD"] = "\n".join(record) + f"\n{info}/RECORD,,\n"
    folder.mkdir(parents=True, exist_ok=True)
    wheel = folder / f"demo_tool-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)
    return wheel
