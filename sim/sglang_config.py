"""The simulated SGLang's configuration type and constants (the serving stack and the command-line parser
import them from here, never from each other)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

VERSION = "0.5.6"  # the upstream release line the fork's server_args.py matches (no tag seen: see README)
FAKE_BOOTSTRAP_HOST = "2.2.2.2"  # sglang/srt/disaggregation/utils.py: a fake transfer (warmup, testing)
# Only this build's minicpm_flashinfer backend with --dense-as-sparse replays CUDA graphs into the
# kv_indptr crash (docs/upstream-facts.md#minicpm-sala).
BUGGY_BACKEND = "minicpm_flashinfer"


@dataclass(frozen=True)
class SGLangConfig:
    model: str
    model_path: Path
    served_names: tuple[str, ...]  # one name (SGLang serves a single --served-model-name)
    host: str
    port: int
    tensor_parallel: int
    pipeline_parallel: int
    page_size: int
    max_model_len: int  # the context length
    max_running: int
    radix_cache: bool
    prompt_tokens_details: bool  # --enable-cache-report
    api_key: str | None
    mode: str  # null | prefill | decode
    bootstrap_port: int
    transfer_backend: str  # --disaggregation-transfer-backend (mooncake or mori are simulated)
    ib_devices: tuple[str, ...]
    attention_backend: str | None
    dense_as_sparse: bool
    cuda_graph: bool  # after SGLang's own adjustments (a prefill server runs without)
    enable_metrics: bool
    skip_warmup: bool
    server_args: dict[str, Any]  # /get_server_info, with ServerArgs' field names

    @property
    def kv_indptr_bug(self) -> bool:
        """Whether this engine walks into the MiniCPM-SALA kv_indptr crash (see BUGGY_BACKEND)."""
        return self.dense_as_sparse and self.attention_backend == BUGGY_BACKEND and self.cuda_graph
