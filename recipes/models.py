"""Per-model engine flags and environment (FACTS §5): what a model needs beyond the config's topology."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ModelRecipe:
    vllm_args: tuple  # extra `vllm serve` flags, identical on prefill and decode
    env: dict  # gpu-vendor -> ((NAME, value), ...) exported for the engine


_ROCM_KIMI = (
    ("VLLM_ROCM_USE_AITER", "1"),
    ("VLLM_ROCM_QUICK_REDUCE_QUANTIZATION", "INT4"),
    ("VLLM_ROCM_USE_AITER_PAGED_ATTN", "0"),
    ("VLLM_ROCM_USE_AITER_RMSNORM", "1"),
    ("VLLM_ENGINE_READY_TIMEOUT_S", "3600"),
)

MODELS: dict[str, ModelRecipe] = {
    # MLA (one KV group), ~557 GB, gfx950 only. Prefix caching stays on: it is what L2 reuse feeds.
    "amd/Kimi-K2.5-MXFP4": ModelRecipe(
        vllm_args=(
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
}


class UnknownModel(KeyError):
    pass


def model_recipe(model: str) -> ModelRecipe:
    try:
        return MODELS[model]
    except KeyError:
        raise UnknownModel(
            f"no engine recipe for model {model!r} in recipes/models.py (known: {', '.join(sorted(MODELS))})"
        ) from None
