"""Stub model folders: a config.json made from a model's architecture facts (recipes/models.py), so an
engine judges TP against the real heads, EP against the real experts, max-model-len against the real
context, and never looks a model up on a hub. No weights, no tokenizer; written into the cache, never
committed."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from recipes.models import Architecture

# Expert keys per model type (config.json names differ between model families).
_EXPERT_KEYS = {
    "deepseek_v3": (
        "n_routed_experts",
        "n_shared_experts",
        "num_experts_per_tok",
        "moe_intermediate_size",
        "first_k_dense_replace",
    ),
}


def hf_config(arch: Architecture) -> dict:
    """config.json of `arch`: the text model, wrapped as a multimodal model's text_config when it is one."""
    text = {
        "architectures": [arch.architecture],
        "model_type": arch.model_type,
        "num_hidden_layers": arch.layers,
        "hidden_size": arch.hidden_size,
        "num_attention_heads": arch.heads,
        "num_key_value_heads": arch.kv_heads,
        "intermediate_size": arch.intermediate_size,
        "vocab_size": arch.vocab_size,
        "max_position_embeddings": arch.max_positions,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-6,
        "tie_word_embeddings": False,
        "dtype": "bfloat16",
    }
    if arch.head_dim is not None:
        text["head_dim"] = arch.head_dim
    if arch.experts is not None:
        text.update(_experts(arch))
    if arch.mla is not None:
        m = arch.mla
        text.update(
            q_lora_rank=m.q_lora_rank,
            kv_lora_rank=m.kv_lora_rank,
            qk_nope_head_dim=m.qk_nope_head_dim,
            qk_rope_head_dim=m.qk_rope_head_dim,
            v_head_dim=m.v_head_dim,
        )
    text.update(dict(arch.extra))
    if arch.wrapper is None:
        return text
    architecture, model_type = arch.wrapper
    return {"architectures": [architecture], "model_type": model_type, "text_config": text}


def _experts(arch: Architecture) -> dict:
    keys = _EXPERT_KEYS.get(arch.model_type)
    if keys is None:
        raise ValueError(
            f"no expert keys known for model type {arch.model_type!r} (recipes/engines/stubs.py)"
        )
    e = arch.experts
    return dict(
        zip(keys, (e.routed, e.shared, e.per_token, e.intermediate_size, e.first_dense_layers), strict=True)
    )


def stub_folder(arch: Architecture, root: Path) -> Path:
    """root/<hash of the config>/config.json: written once, shared by every line of the model."""
    text = json.dumps(hf_config(arch), indent=1, sort_keys=True) + "\n"
    folder = root / hashlib.sha256(text.encode()).hexdigest()[:16]
    config = folder / "config.json"
    if not config.is_file() or config.read_text() != text:
        folder.mkdir(parents=True, exist_ok=True)
        config.write_text(text)
    return folder
