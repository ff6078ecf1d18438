"""Stub model folders: a config.json made from a model's architecture facts (configs/models.yaml), so an
engine judges TP against the real heads, EP against the real experts, max-model-len against the real
context, and never looks a model up on a hub. No weights, no tokenizer; written into the cache, never
committed."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from schemas.models import Architecture


def hf_config(arch: Architecture) -> dict:
    """config.json of `arch`: the text model, wrapped as a multimodal model's text_config when it is one."""
    text = {
        "architectures": [arch.architecture],
        "model_type": arch.model_type,
        "num_hidden_layers": arch.layers,
        "hidden_size": arch.hidden_size,
        "num_attention_heads": arch.heads,
        "num_key_value_heads": arch.kv_heads,
        "vocab_size": arch.vocab_size,
        "max_position_embeddings": arch.max_positions,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-6,
        "tie_word_embeddings": False,
        "dtype": "bfloat16",
    }
    for key, value in (("intermediate_size", arch.intermediate_size), ("head_dim", arch.head_dim)):
        if value is not None:
            text[key] = value
    if arch.experts is not None:
        e, keys = arch.experts, arch.experts.keys
        for fact in ("routed", "shared", "per_token", "intermediate_size", "first_dense_layers"):
            if getattr(keys, fact) is not None:
                text[getattr(keys, fact)] = getattr(e, fact)
    if arch.mla is not None:
        text.update(arch.mla.model_dump(by_alias=False))
    text.update(arch.config)
    if arch.wrapper is None:
        return text
    return {
        "architectures": [arch.wrapper.architecture],
        "model_type": arch.wrapper.model_type,
        "text_config": text,
    }


def stub_folder(arch: Architecture, root: Path) -> Path:
    """root/<hash of the config>/config.json: written once, shared by every line of the model."""
    text = json.dumps(hf_config(arch), indent=1, sort_keys=True) + "\n"
    folder = root / hashlib.sha256(text.encode()).hexdigest()[:16]
    config = folder / "config.json"
    if not config.is_file() or config.read_text() != text:
        folder.mkdir(parents=True, exist_ok=True)
        config.write_text(text)
    return folder
