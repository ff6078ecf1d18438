"""Shared fixtures: every shipped config rendered once per session."""

from __future__ import annotations

import json
import re

import pytest

from recipes.render import load, render_config


@pytest.fixture(scope="session")
def configs():
    return load(None)


@pytest.fixture(scope="session")
def rendered(configs):
    return {
        (r.plan.config_key, r.plan.variant): r
        for key in sorted(configs.entries)
        for r in render_config(key, configs)
    }


def inferencex_entry(key: str) -> tuple:
    """InferenceX's entry KEY loaded from its own master file as `make render CONFIGS=` loads it, and its
    variants rendered: (Loaded, {variant: Rendered})."""
    from tests.paths import reference

    loaded = load(key, [reference("amd-master.yaml")])
    return loaded, {r.plan.variant: r for r in render_config(key, loaded)}


@pytest.fixture(scope="module")
def module_entry(request) -> tuple:
    """The test module's InferenceX entry (its KEY), loaded and rendered once per module."""
    return inferencex_entry(request.module.KEY)


@pytest.fixture(scope="module")
def inferencex_loaded(module_entry):
    return module_entry[0]


@pytest.fixture(scope="module")
def inferencex_rendered(module_entry) -> dict:
    return module_entry[1]


def substitute(text: str, values: dict) -> str:
    """Expand the "${VAR}" parts of a rendered JSON word the way bash would, for parsing in tests."""
    return re.sub(r"'\"\$\{([A-Z_\[\]0-9]+)\}\"'", lambda m: values[m.group(1)], text)


def kv_config(plan, role: str, values: dict) -> dict:
    """The --kv-transfer-config JSON of a role's vLLM command, runtime values filled in."""
    from recipes.words import bash_word

    vllm = next(s for r in plan.roles if r.name == role for s in r.services if s.name == "vllm")
    words = [w[0] if len(w) == 1 else w for w in vllm.argv]
    raw = bash_word(vllm.argv[words.index("--kv-transfer-config") + 1])
    return json.loads(substitute(raw, values).strip("'"))


@pytest.fixture(autouse=True)
def made_up_corpus_client(monkeypatch, tmp_path_factory):
    """The client's own staging of the corpus (recipes/staging.py: AIPerf and the datasets library, in
    .venv-bench) replaced by its answer for a made-up corpus in a temporary cache: these tests snapshot runs
    without the client's virtualenv (make test-unit builds none). tests/engines/test_staging.py runs the real
    one."""
    from recipes import staging

    root = tmp_path_factory.getbasetemp() / "hf-cache"

    def client(name: str, cache, *, download: bool, say) -> dict:
        kind = "published" if download else "made-up"  # a runner that downloads replays the pinned corpus
        folder = root / kind / "datasets" / f"semianalysisai___{name}" / "default" / "0.0.0" / ("0" * 40)
        folder.mkdir(parents=True, exist_ok=True)
        if not download:
            (folder / staging.MADE_UP_MARKER).write_text("made up by a test\n")
        (folder / f"{name}-train.arrow").write_bytes(b"rows")
        return {"name": name, "hf_dataset": f"semianalysisai/{name}", "split": "train", "folder": str(folder),
                "rows": 1, "aiperf": "0.13.0"}  # fmt: skip

    monkeypatch.setattr(staging, "client_dataset", client)


STAGED_IMAGE = {"mode": "archive", "reference": "vllm/vllm-openai-rocm:v0.33.0", "id": "sha256:" + "a" * 64,
                "archive_file": "/models/images/vllm_vllm-openai-rocm_v0.33.0.tar"}  # fmt: skip


@pytest.fixture
def staged_image(monkeypatch):
    """make submit's image staging stood in for (tests/recipes/test_image_staging.py runs the real one against
    a recording docker): a real runner's archive folder is the site's, never this machine's."""
    from recipes import staging

    def staged(plan, say=None):
        return dict(STAGED_IMAGE) if plan.container.staging else None

    monkeypatch.setattr(staging, "stage_image", staged)
    return STAGED_IMAGE
