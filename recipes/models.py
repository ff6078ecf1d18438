"""Per-model engine flags and environment (FACTS §5, §8): what a model needs beyond the config's topology,
per engine. A model without a recipe for an engine is not rendered for it."""

from __future__ import annotations

from dataclasses import dataclass, field

from .target import Unsupported


@dataclass(frozen=True)
class EngineRecipe:
    args: tuple = ()  # extra engine flags, identical on every role
    env: dict = field(default_factory=dict)  # gpu-vendor -> ((NAME, value), ...) exported for the engine


_ROCM_KIMI = (
    ("VLLM_ROCM_USE_AITER", "1"),
    ("VLLM_ROCM_QUICK_REDUCE_QUANTIZATION", "INT4"),
    ("VLLM_ROCM_USE_AITER_PAGED_ATTN", "0"),
    ("VLLM_ROCM_USE_AITER_RMSNORM", "1"),
    ("VLLM_ENGINE_READY_TIMEOUT_S", "3600"),
)

MODELS: dict[str, dict[str, EngineRecipe]] = {
    # MLA (one KV group), ~557 GB, gfx950 only. Prefix caching stays on: it is what L2 reuse feeds.
    "amd/Kimi-K2.5-MXFP4": {
        "vllm": EngineRecipe(
            args=(
                "--trust-remote-code",
                "--mm-encoder-tp-mode",
                "data",
                "--kv-cache-dtype",
                "fp8",
                "--block-size",
                "1",
            ),
            env={"amd": _ROCM_KIMI},
        ),
    },
    # OpenBMB's SGLang fork, branch minicpm_sala. The attention flags (--attention-backend, --dense-as-sparse)
    # are settings, not listed here: the known-issue registry must see them (configs/known-issues.yaml).
    "openbmb/MiniCPM-SALA": {
        "sglang": EngineRecipe(
            args=(
                "--trust-remote-code",
                "--disable-radix-cache",
                "--chunked-prefill-size",
                "8192",
                "--max-running-requests",
                "32",
                "--skip-server-warmup",
            ),
        ),
    },
}


def model_recipe(model: str, engine: str) -> EngineRecipe:
    engines = MODELS.get(model)
    if engines is None:
        raise Unsupported(
            f"no engine recipe for model {model!r} in recipes/models.py (known: {', '.join(sorted(MODELS))})"
        )
    if engine not in engines:
        raise Unsupported(
            f"model {model!r} has no {engine} recipe in recipes/models.py "
            f"(it has: {', '.join(sorted(engines))})"
        )
    return engines[engine]
