"""`make golden`: rewrite tests/golden/ from the shipped configs. Review `git diff tests/golden` after."""

from __future__ import annotations

import shutil
from pathlib import Path

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
GOLDEN_CONFIGS = (
    "kimik2.5-fp4-mi355x-vllm-disagg-agentic",
    "local-sim-vllm-disagg-agentic",
    "local-sim-sglang-disagg",
    "local-sim-sglang-mori-disagg",
    "local-cpu-vllm-disagg-agentic",
    "local-container-vllm-disagg-agentic",
    "minicpm-sala-bf16-h200-sglang",
    "minicpm-sala-bf16-h200-sglang-upstream",
)


def main() -> None:
    from recipes.render import load, render_config, write

    loaded = load(None)
    for key in GOLDEN_CONFIGS:
        shutil.rmtree(GOLDEN / key, ignore_errors=True)
        for r in render_config(key, loaded):
            print(f"wrote {write(r, GOLDEN)}")


if __name__ == "__main__":
    main()
