"""Every rendered benchmark-client line through the real AIPerf 0.13 command-line parser (.venv-bench): the
flags, their values and their types as AIPerf itself converts them (the config class validates too: an input
file must exist, so the line is read with the run's paths mapped to stand-ins). A flag AIPerf does not know,
or a value it refuses, fails here instead of after an hour of bring-up on the cluster."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from recipes.render import load, render_config
from tests.paths import reference

from .conftest import ROOT

pytestmark = pytest.mark.tools  # needs a tool virtualenv (`make tools`): not run by make test-unit

PYTHON = ROOT / ".venv-bench" / "bin" / "python"
PARSE = """
import json, sys
from aiperf.cli import app
failed = []
for name, argv in json.load(sys.stdin):
    try:
        app.parse_args(argv)
    except BaseException as exc:  # cyclopts exits on a bad line; report every line's verdict
        failed.append([name, type(exc).__name__, str(exc)[:400]])
print(json.dumps(failed))
"""


# InferenceX's agentic entries that render from its own master file (make render CONFIGS=): their client
# lines take the same parser.
INFERENCEX_AGENTIC = ("dsv4-fp4-mi355x-sglang-disagg-agentic-hicache-mtp",)


def _lines(stand_in: Path) -> list:
    """(config variant benchmark, argv after `aiperf`) of every shipped config's first benchmark, and of
    InferenceX's agentic entries."""
    loaded = load(None)
    master = reference("amd-master.yaml")
    theirs = [(key, load(key, [master])) for key in INFERENCEX_AGENTIC]
    out = []
    for key, source in [*((k, loaded) for k in sorted(loaded.entries)), *theirs]:
        for r in render_config(key, source):
            bench = r.plan.benchmarks[0]
            words = ["".join(p if isinstance(p, str) else str(stand_in) for p in w) for w in bench.argv]
            if "--input-file" in words:  # the run's staged trace set: a stand-in that exists here
                words[words.index("--input-file") + 1] = str(stand_in / "trace.json")
            out.append([f"{key} {r.plan.variant}", words[words.index("aiperf") + 1 :]])
    return out


def test_every_rendered_client_line_is_one_the_real_aiperf_accepts(tmp_path):
    if not PYTHON.is_file():
        message = ".venv-bench missing: run `make tools` (it holds the real AIPerf)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    (tmp_path / "trace.json").write_text("{}")
    lines = _lines(tmp_path)
    assert any("--tokenizer-trust-remote-code" in argv for _, argv in lines)
    assert any(name.startswith(INFERENCEX_AGENTIC[0]) for name, _ in lines)
    done = subprocess.run(
        [str(PYTHON), "-c", PARSE],
        input=json.dumps(lines),
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env={**os.environ, "HOME": str(tmp_path)},
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []


def test_the_real_aiperf_refuses_what_a_typo_would_render(tmp_path):
    """The check can fail: an unknown flag and a bad value are refused."""
    if not PYTHON.is_file():
        pytest.skip(".venv-bench missing")
    base = ["profile", "--url", "http://x:1", "--model", "m"]
    bad = [["typo", [*base, "--tokenizer-trust-remote"]], ["value", [*base, "--concurrency", "many"]]]
    done = subprocess.run(
        [str(PYTHON), "-c", PARSE], input=json.dumps(bad), capture_output=True, text=True, timeout=300,
        cwd=tmp_path, env={**os.environ, "HOME": str(tmp_path)}, check=False,
    )  # fmt: skip
    assert [name for name, *_ in json.loads(done.stdout.strip().splitlines()[-1])] == ["typo", "value"]
