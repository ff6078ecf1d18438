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

# Choices as upstream SGLang 0.5.23 parses them (tests/sim/test_parity.py holds them to its parser).
ATTENTION_BACKENDS = (
    "triton",
    "torch_native",
    "flex_attention",
    "dsa",
    "nsa",
    "qsa",
    "dsv4",
    "compressed",
    "fa3",
    "fa4",
    "flashinfer",
    "llada2_cfg_flashinfer",
    "flashmla",
    "trtllm_mla",
    "cutedsl_mla",
    "tokenspeed_mla",
    "trtllm_mha",
    "minicpm_flashattn",
    "minicpm_flashinfer",
    "hpc_ops",
    "aiter",
    "wave",
    "intel_amx",
    "ascend",
    "intel_xpu",
)
TRANSFER_BACKENDS = ("mooncake", "mooncake_tcp", "nixl", "mori", "ascend", "fake")
QUANTIZATIONS = (
    "awq",
    "fp8",
    "mxfp8",
    "gptq",
    "gptq_marlin",
    "awq_marlin",
    "bitsandbytes",
    "gguf",
    "modelopt",
    "modelopt_fp8",
    "modelopt_fp4",
    "modelopt_mixed",
    "nvfp4_online",
    "petit_nvfp4",
    "w8a8_int8",
    "w8a8_fp8",
    "moe_wna16",
    "w4afp8",
    "mxfp4",
    "auto-round",
    "auto-round-int8",
    "compressed-tensors",
    "modelslim",
    "quark",
    "quark_int4fp8_moe",
    "quark_mxfp4",
    "mxfp_w4a8",
    "humming",
    "mlx_q4",
    "mlx_q8",
    "unquant",
)
LOAD_FORMATS = (
    "auto",
    "pt",
    "safetensors",
    "npcache",
    "dummy",
    "sharded_state",
    "gguf",
    "bitsandbytes",
    "layered",
    "flash_rl",
    "remote",
    "remote_instance",
    "fastsafetensors",
    "instanttensor",
    "private",
    "presharded",
    "expert_pack",
    "mistral",
    "runai_streamer",
)
KV_CACHE_DTYPES = ("auto", "fp8_e5m2", "fp8_e4m3", "bf16", "bfloat16", "mxfp8", "nvfp4", "fp4_mx_block16")
SCHEDULE_POLICIES = (
    "lpm",
    "random",
    "fcfs",
    "dfs-weight",
    "lof",
    "priority",
    "routing-key",
    "hrrn",
    "shortest-prefill-first",
)
LOAD_BALANCE_METHODS = ("auto", "round_robin", "follow_bootstrap_room", "total_requests", "total_tokens")


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
