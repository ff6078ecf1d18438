"""`make lock-setup`: re-resolve every node-setup lock the runners of configs/launch.yaml need, after a pin of
a set's extra changed in pyproject.toml (review the diff, then commit)."""

from __future__ import annotations

import sys

import yaml

from recipes.nodesetup import ROOT, SETS, relock
from schemas.launch import LaunchProfiles


def _profiles() -> dict:
    """The launch profiles alone: not the configs' lint, which refuses a runner whose set has no lock yet
    (a set just added to SETS is what this writes the lock of)."""
    return LaunchProfiles.model_validate(
        yaml.safe_load((ROOT / "configs" / "launch.yaml").read_text())
    ).profiles


def main() -> int:
    targets = sorted(
        {(p.node_setup.python, p.node_setup.platform) for p in _profiles().values() if p.node_setup}
    )
    for python, platform in targets:
        for extra in SETS:
            print(f"wrote {relock(extra, python, platform).relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
