"""`make lock-setup`: re-resolve every node-setup lock the runners of configs/launch.yaml need, after a pin of
a set's extra changed in pyproject.toml (review the diff, then commit)."""

from __future__ import annotations

import sys

from recipes.nodesetup import ROOT, SETS, relock
from recipes.render import load


def main() -> int:
    targets = sorted(
        {
            (p.node_setup.python, p.node_setup.platform)
            for p in load(None).launch.profiles.values()
            if p.node_setup
        }
    )
    for python, platform in targets:
        for extra in SETS:
            print(f"wrote {relock(extra, python, platform).relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
