"""A resumed run on the node: scripts/resume.py reads resume.json, the node script skips what it lists."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from conftest import SCRIPTS, SYNC_PYTHON

RESUME = SCRIPTS / "resume.py"


def reused(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [SYNC_PYTHON, str(RESUME), "reused", "--file", str(path)],
        capture_output=True,
        text=True,
        timeout=20,
        check=False,
    )


def resume_file(tmp_path: Path, points: object) -> Path:
    path = tmp_path / "resume.json"
    path.write_text(json.dumps({"from_run_dir": "/runs/x", "points": points}))
    return path


def test_a_fresh_run_has_no_resume_file_and_skips_nothing(tmp_path):
    done = reused(tmp_path / "resume.json")
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


def test_each_reused_benchmark_with_the_run_that_measured_it(tmp_path):
    path = resume_file(
        tmp_path,
        [
            {"name": "conc2", "measured_in": "20261121-100859-c60e0c", "cache": {}},
            {"name": "conc4", "measured_in": "20261120-090000-abcdef"},
        ],
    )
    done = reused(path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "conc2 20261121-100859-c60e0c\nconc4 20261120-090000-abcdef\n"


@pytest.mark.parametrize(
    ("content", "said"),
    [
        ("{not json", "resume: "),
        (json.dumps({"points": {}}), "no list of points"),
        (json.dumps({"points": [{"name": "conc2 ; rm -rf /", "measured_in": "r"}]}), "points[0].name="),
        (json.dumps({"points": [{"name": "conc2", "measured_in": "a\nb"}]}), "points[0].measured_in="),
        (json.dumps({"points": [{"name": "conc2"}]}), "not a non-empty string"),
    ],
)
def test_a_resume_file_that_could_mislead_bash_fails_in_one_line(tmp_path, content, said):
    path = tmp_path / "resume.json"
    path.write_text(content)
    done = reused(path)
    assert done.returncode == 2 and done.stdout == ""
    assert said in done.stderr and done.stderr.count("\n") == 1, done.stderr


def test_the_node_script_skips_a_reused_benchmark_and_runs_the_others(node, tmp_path):
    path = resume_file(tmp_path, [{"name": "conc2", "measured_in": "run-a"}])
    run = node.run(f"""
load_resumed {path}
for b in conc2 conc4; do
  if ! benchmark_resumed "$b"; then
    echo "measured $b"
  fi
done
""")
    assert run.rc == 0, run.text
    assert "sim0 benchmark conc2: resumed, its result was measured by run run-a" in run.out
    assert "measured conc2" not in run.out and "measured conc4" in run.out


def test_a_bad_resume_file_fails_the_node_at_once(node, tmp_path):
    path = tmp_path / "resume.json"
    path.write_text("[]")
    run = node.run(f"""
step preflight
load_resumed {path}
echo "not reached"
""")
    assert run.rc == 2, run.text
    assert "no list of points" in run.err and "not reached" not in run.out
