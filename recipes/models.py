"""Per-model engine flags and environment (docs/upstream-facts.md#kimi-k25-mi355x and #minicpm-sala): what
a model needs beyond the config's topology, per engine, and the facts of its architecture that engines check
a launch against (heads vs TP, experts vs EP, context length).
A model without a recipe for an engine is not rendered for it; `make check-engines`
builds a stub model folder (config.json only) from its architecture."""

from __future__ import annotations

from dataclasses import dataclass, field

from .target import Unsupported


@dataclass(frozen=True)
class EngineRecipe:
    args: tuple = ()  # extra engine flags, identical on every role
    env: dict = field(default_factory=dict)  # gpu-vendor -> ((NAME, value), ...) exported for the engine


TINY_LLAMA = "disagg-recipes/tiny-llama"
_ROCM_KIMI = (
    ("VLLM_ROCM_USE_AITER", "1"),
    ("VLLM_ROCM_QUICK_REDUCE_QUANTIZATION", "INT4"),
    ("VLLM_ROCM_USE_AITER_PAGED_ATTN", "0"),
    ("VLLM_ROCM_USE_AITER_RMSNORM", "1"),
    ("VLLM_ENGINE_READY_TIMEOUT_S", "3600"),
    # A 256k-token agentic prefill step outlasts vLLM's default 300 s (InferenceX's known-working launch).
    ("VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS", "1200"),
)

MODELS: dict[str, dict[str, EngineRecipe]] = {
    # MLA (one KV group), ~557 GB, gfx950 only. Prefix caching stays on: it is what L2 reuse feeds.
    "amd/Kimi-K2.5-MXFP4": {
        "vllm": EngineRecipe(
            args=(
                "--mm-encoder-tp-mode",
                "data",
                "--kv-cache-dtype",
                "fp8",
                "--block-size",
                "1",
                # InferenceX's known-working MI355X launch: piecewise CUDA/HIP graphs only.
                "--compilation-config",
                '{"cudagraph_mode":"PIECEWISE"}',
            ),
            env={"amd": _ROCM_KIMI},
        ),
    },
    # OpenBMB's SGLang fork, branch minicpm_sala. The attention flags (--attention-backend, --dense-as-sparse)
    # are settings, not listed here: the known-issue registry must see them (configs/known-issues.yaml).
    "openbmb/MiniCPM-SALA": {
        "sglang": EngineRecipe(
            args=(
                "--disable-radix-cache",
                "--chunked-prefill-size",
                "8192",
                "--max-running-requests",
                "32",
                "--skip-server-warmup",
            ),
        ),
    },
    # The local-cpu runner's model: tiny, random weights, made on the machine by sim/cpu/make_model.py (no
    # hub). Nothing beyond the config's settings: its engines' knobs are the runner's (configs/launch.yaml).
    TINY_LLAMA: {"vllm": EngineRecipe()},
}


@dataclass(frozen=True)
class Experts:
    """Mixture of experts: routed and shared experts, experts per token, the dense layers first."""

    routed: int
    shared: int
    per_token: int
    intermediate_size: int
    first_dense_layers: int = 0


@dataclass(frozen=True)
class Mla:
    """Multi-head latent attention (DeepSeek-V3 style): one compressed KV per token, whatever the heads."""

    q_lora_rank: int
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int


@dataclass(frozen=True)
class Architecture:
    """The facts of a model's config.json that engines judge a launch by. `extra`: (key, value) pairs the
    engine's config class of this model type needs besides (rope, routing, layer kinds); `wrapper`: the
    (architecture, model_type) of a multimodal model whose text model this is (vision tower at defaults)."""

    architecture: str
    model_type: str
    layers: int
    hidden_size: int
    heads: int
    kv_heads: int
    intermediate_size: int
    vocab_size: int
    max_positions: int
    head_dim: int | None = None
    experts: Experts | None = None
    mla: Mla | None = None
    extra: tuple = ()
    wrapper: tuple | None = None
    source: str = ""
    # The model folder's code runs to load it (a custom tokenizer or model class through auto_map): every
    # consumer then needs trust-remote-code, the engines and the benchmark client's tokenizer alike.
    remote_code: bool = False


def _minicpm_sala_layers(sparse: tuple, layers: int) -> list:
    return ["minicpm4" if i in sparse else "lightning-attn" for i in range(layers)]


ARCHITECTURES: dict[str, Architecture] = {
    # moonshotai/Kimi-K2.5 (amd's MXFP4 quantizes experts only: same architecture). Its config.json as
    # dumped in a public model report, cross-checked with TensorRT-LLM's and a Rust test's copies.
    "amd/Kimi-K2.5-MXFP4": Architecture(
        architecture="DeepseekV3ForCausalLM",
        model_type="deepseek_v3",
        wrapper=("KimiK25ForConditionalGeneration", "kimi_k25"),
        layers=61,
        hidden_size=7168,
        heads=64,
        kv_heads=64,
        intermediate_size=18432,
        vocab_size=163840,
        max_positions=262144,
        experts=Experts(routed=384, shared=1, per_token=8, intermediate_size=2048, first_dense_layers=1),
        mla=Mla(
            q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128
        ),
        extra=(
            ("n_group", 1),
            ("topk_group", 1),
            ("topk_method", "noaux_tc"),
            ("scoring_func", "sigmoid"),
            ("routed_scaling_factor", 2.827),
            ("norm_topk_prob", True),
            ("rope_theta", 50000.0),
            (
                "rope_scaling",
                {
                    "type": "yarn",
                    "factor": 64.0,
                    "original_max_position_embeddings": 4096,
                    "beta_fast": 32.0,
                    "beta_slow": 1.0,
                    "mscale": 1.0,
                    "mscale_all_dim": 1.0,
                },
            ),
        ),
        source="moonshotai/Kimi-K2.5 config.json (text_config: deepseek_v3)",
        remote_code=True,  # tokenization_kimi.py (tiktoken) and the kimi_k25 wrapper
    ),
    # openbmb/MiniCPM-SALA: 8 sparse-attention (minicpm4) layers among 24 lightning-attention ones.
    "openbmb/MiniCPM-SALA": Architecture(
        architecture="MiniCPMSALAForCausalLM",
        model_type="minicpm_sala",
        layers=32,
        hidden_size=4096,
        heads=32,
        kv_heads=2,
        head_dim=128,
        intermediate_size=16384,
        vocab_size=73448,
        max_positions=524288,
        extra=(
            ("mixer_types", _minicpm_sala_layers((0, 9, 16, 17, 22, 29, 30, 31), 32)),
            (
                "sparse_config",
                {
                    "block_size": 64,
                    "dense_len": 8192,
                    "init_blocks": 1,
                    "kernel_size": 32,
                    "kernel_stride": 16,
                    "topk": 64,
                    "use_nope": False,
                    "window_size": 2048,
                },
            ),
            ("lightning_nh", 32),
            ("lightning_nkv", 32),
            ("lightning_head_dim", 128),
            ("lightning_use_rope", True),
            ("lightning_scale", "1/sqrt(d)"),
            ("attn_use_rope", False),
            ("attn_use_output_gate", True),
            ("use_output_gate", True),
            ("use_output_norm", True),
            ("qk_norm", True),
            ("rope_theta", 10000.0),
            ("scale_emb", 12),
            ("scale_depth", 1.4),
            ("dim_model_base", 256),
            ("mup_denominator", 32),
        ),
        source="openbmb/MiniCPM-SALA config.json (as saved in a public quantization log)",
        remote_code=True,
    ),
    # sim/cpu/make_model.py writes this model's weights with these shapes. head_dim 64: vLLM's CPU attention
    # kernel refuses 16. KV: 2 layers x (K, V) x 2 heads x 64 x 2 bytes = 1 KiB per token.
    TINY_LLAMA: Architecture(
        architecture="LlamaForCausalLM",
        model_type="llama",
        layers=2,
        hidden_size=128,
        heads=2,
        kv_heads=2,
        head_dim=64,
        intermediate_size=256,
        vocab_size=1024,
        max_positions=32768,
        extra=(("rope_theta", 10000.0),),
        source="made locally with random weights (sim/cpu/make_model.py); a BPE tokenizer trained on "
        "sim/traces",
        remote_code=True,  # its tokenizer is a custom class through auto_map, as Kimi's is
    ),
}


def architecture(model: str) -> Architecture:
    found = ARCHITECTURES.get(model)
    if found is None:
        raise Unsupported(
            f"no architecture for model {model!r} in recipes/models.py "
            f"(known: {', '.join(sorted(ARCHITECTURES))})"
        )
    return found


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
