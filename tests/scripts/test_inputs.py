"""scripts/inputs.py as the first node runs it at preflight: the staged inputs as lock.json has them, named
when one is missing, changed or added; the client's tokenizer present with the code its auto_map names."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from scripts import inputs

TOOL = Path(__file__).resolve().parents[2] / "scripts" / "inputs.py"


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(TOOL), *args], capture_output=True, text=True, timeout=60)


@pytest.fixture
def staged(tmp_path):
    """A run folder with a shipped trace file and a site trace set, and the lock submit would write."""
    recipe = tmp_path / "recipe"
    (recipe / "traces").mkdir(parents=True)
    (recipe / "traces" / "t.jsonl").write_text('{"turns": []}\n')
    site = tmp_path / "cache" / "set_a"
    (site / "sub").mkdir(parents=True)
    (site / "a.json").write_text("{}")
    (site / "sub" / "b.json").write_text("[]")
    lock = {
        "inputs": {
            "traces": {"path": "traces/t.jsonl", "where": "run", **inputs.digest(recipe / "traces/t.jsonl")},
            "site": {"path": str(site), "where": "site", **inputs.digest(site)},
        }
    }
    (tmp_path / "lock.json").write_text(json.dumps(lock))
    return tmp_path, recipe, site


def verify(tmp_path, recipe):
    return run("verify", "--lock", str(tmp_path / "lock.json"), "--recipe-dir", str(recipe))


def test_inputs_as_staged_pass_and_say_what_was_checked(staged):
    tmp_path, recipe, site = staged
    done = verify(tmp_path, recipe)
    assert done.returncode == 0, done.stderr
    assert f"staged site: {site}: 2 file(s), 4 bytes" in done.stdout
    assert "staged traces:" in done.stdout and "as staged" in done.stdout


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (lambda site: (site / "sub" / "b.json").unlink(), "sub/b.json is missing (staged at submission)"),
        (lambda site: (site / "a.json").write_text("{ }"), "a.json changed since submission"),
        (lambda site: (site / "c.json").write_text("{}"), "c.json was added since submission"),
        (lambda site: [p.unlink() for p in sorted(site.rglob("*.json"))], "holds no file"),
    ],
)
def test_a_staged_set_that_differs_from_the_lock_fails_naming_the_file(staged, change, said):
    tmp_path, recipe, site = staged
    change(site)
    done = verify(tmp_path, recipe)
    assert done.returncode == 1 and said in done.stderr, done.stderr
    assert done.stderr.startswith("inputs.py verify: ") and "Traceback" not in done.stderr


def test_a_missing_set_fails_at_once(staged, tmp_path):
    _, recipe, site = staged
    lock = json.loads((tmp_path / "lock.json").read_text())
    lock["inputs"]["site"]["path"] = str(tmp_path / "nowhere")
    (tmp_path / "lock.json").write_text(json.dumps(lock))
    done = verify(tmp_path, recipe)
    assert done.returncode == 1 and f"{tmp_path / 'nowhere'} does not exist" in done.stderr


def _tokenizer(folder: Path, auto_map: bool) -> Path:
    folder.mkdir()
    config = {"tokenizer_class": "X"}
    if auto_map:
        config["auto_map"] = {"AutoTokenizer": [None, "tokenization_x.XFast"]}
        (folder / "tokenization_x.py").write_text("class XFast: pass\n")
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    return folder


def test_a_tokenizer_of_code_needs_its_module_and_the_remote_code_mark(tmp_path):
    folder = _tokenizer(tmp_path / "tok", auto_map=True)
    out = tmp_path / "state" / "tokenizer.json"
    done = run("tokenizer", str(folder), "--remote-code", "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert set(json.loads(out.read_text())["files"]) == {"tokenizer_config.json", "tokenization_x.py"}
    refused = run("tokenizer", str(folder))
    assert refused.returncode == 1 and "not marked remote-code" in refused.stderr
    (folder / "tokenization_x.py").unlink()
    missing = run("tokenizer", str(folder), "--remote-code")
    assert missing.returncode == 1 and "tokenization_x.py missing" in missing.stderr


def test_a_folder_without_a_tokenizer_fails_naming_it(tmp_path):
    done = run("tokenizer", str(tmp_path))
    assert done.returncode == 1 and "no tokenizer_config.json" in done.stderr
