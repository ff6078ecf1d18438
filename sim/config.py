"""The simulated vLLM's configuration types and the model-folder checks both simulators share (the serving
stack and the command-line parser import them from here, never from each other)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sim.kvconfig import Connectors

VERSION = "0.33.0"


class StartupError(RuntimeError):
    """The engine cannot start; the message is what vLLM would log before exiting 1."""


@dataclass(frozen=True)
class ServeConfig:
    model: str
    model_path: Path
    served_names: tuple[str, ...]
    host: str | None
    port: int
    tensor_parallel: int
    pipeline_parallel: int
    block_size: int
    gpu_blocks: int | None  # --num-gpu-blocks-override; None = SIM_HBM_CACHE_TOKENS decides
    max_model_len: int
    max_num_seqs: int
    prefix_caching: bool
    prompt_tokens_details: bool
    api_key: tuple[str, ...]  # any of them (vLLM takes one or more); () = no key
    kv: Connectors | None


def model_dir(model: str, root: str | None) -> Path:
    path = Path(root, model.lstrip("/")) if root and model.startswith("/") else Path(model)
    if not path.exists():
        if model.startswith(("/", ".", "~")):
            raise StartupError(
                f"Invalid repository ID or local directory specified: {model!r} ({path} does not exist)"
            )
        raise StartupError(f"{model!r} is not a local directory and the simulator cannot download from a hub")
    if not (path / "config.json").is_file():
        raise StartupError(f"{path} has no config.json (not a model directory)")
    return path


def read_hf_config(path: Path) -> dict[str, Any]:
    try:
        data = json.loads((path / "config.json").read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise StartupError(f"{path / 'config.json'}: unreadable model config ({exc})") from None
    if not isinstance(data, dict):
        raise StartupError(f"{path / 'config.json'}: must be a JSON object")
    return data
