"""The lint CLI: one finding per line in one format, on the right line, every finding at once, exit codes
0/1/2 and never a traceback; `make lint`; the exported JSON Schemas."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from schemas import export
from schemas.yamlio import load_file
from tests.paths import reference

from .conftest import FIXTURES, ROOT, rows, run_lint, write

GOOD = FIXTURES / "good-master.yaml"
THREE = FIXTURES / "three-errors.yaml"
FIX_RUNNERS = FIXTURES / "runners.yaml"
FIX_LAUNCH = FIXTURES / "launch.yaml"


def test_valid_config_exits_0_and_prints_nothing():
    # GOOD, its runners and launch profiles, and the known-issue registry strict checks against
    assert run_lint("--runners", FIX_RUNNERS, "--launch", FIX_LAUNCH, GOOD) == (
        0,
        "",
        "lint: ok, 6 files (strict)\n",
    )


def test_three_errors_in_two_entries_all_reported_on_their_lines():
    code, out, err = run_lint("--runners", FIX_RUNNERS, "--launch", FIX_LAUNCH, THREE)
    assert code == 1
    assert [(line, path, hint[:19]) for line, path, _, hint in rows(out, THREE)] == [
        (3, "fixture-a.image", "use one of vllm/, r"),
        (3, "fixture-a.image", "add it to configs/e"),
        (9, "fixture-a.router.version", "a release such as 0"),
        (41, "fixture-b.scenarios.fixed-seq-len[0].search-space[0].decode.tp", ""),
    ]
    assert err == "lint: 4 findings in 6 files (strict)\n"


# fmt: off
@pytest.mark.parametrize(("text", "line", "path", "fragment"), [
    pytest.param("k:\n  image: x\n", 1, "k.model", "missing required key 'model'", id="missing-key-at-entry"),
    pytest.param("a: 1\n\nb:\n  - 1\n", 3, "b", "valid dictionary", id="entry-not-a-map"),
    pytest.param("- a\n- b\n", 1, "<document>", "a master config is a map of config-key -> entry, got list",
                 id="top-level-list"),
    pytest.param("", 1, "<document>", "a master config is a map of config-key -> entry, got empty",
                 id="empty"),
    pytest.param("# nothing\nplain text\n", 2, "<document>", "got str", id="top-level-scalar"),
    pytest.param("a:\n  b: [1, 2\nc: 3\n", 3, "<document>", "invalid YAML", id="syntax-error"),
    pytest.param("k: {}\nk: {}\n", 2, "k", "duplicate key 'k'", id="duplicate-config-key"),
])
# fmt: on
def test_line_and_path_of_a_finding(tmp_path, text, line, path, fragment):
    file = write(tmp_path, "master.yaml", text)
    code, out, _ = run_lint("--runners", FIX_RUNNERS, "--launch", FIX_LAUNCH, file)
    assert code == 1
    assert any(r[:2] == (line, path) and fragment in r[2] for r in rows(out, file)), out


def test_duplicate_key_in_an_entry_names_the_first_line(tmp_path):
    text = GOOD.read_text().replace("  model-prefix: kimik2.5\n", "  model-prefix: kimik2.5\n  model: x\n", 1)
    file = write(tmp_path, "master.yaml", text)
    code, out, _ = run_lint("--runners", FIX_RUNNERS, "--launch", FIX_LAUNCH, file)
    assert code == 1
    assert out == f"{file}:6: fixture-agentic.model: duplicate key 'model' (first defined on line 4)\n"


def test_duplicate_key_in_runners(tmp_path):
    text = FIX_RUNNERS.read_text().replace("gpus-per-node: 8\n", "gpus-per-node: 8\n    gpus-per-node: 4\n")
    runners = write(tmp_path, "runners.yaml", text)
    code, out, _ = run_lint("--runners", runners)
    assert code == 1
    path = "hardware.cluster:test-mi355x.gpus-per-node"
    assert rows(out, runners) == [(8, path, "duplicate key 'gpus-per-node'", "first defined on line 7")]


def test_unknown_key_in_runners_did_you_mean(tmp_path):
    text = FIX_RUNNERS.read_text().replace("gpus-per-node", "gpus-per-nod")
    runners = write(tmp_path, "runners.yaml", text)
    code, out, _ = run_lint("--runners", runners)
    assert code == 1
    assert (7, "hardware.cluster:test-mi355x.gpus-per-nod", "unknown key 'gpus-per-nod'",
            "did you mean 'gpus-per-node'?") in rows(out, runners)


def test_config_key_defined_in_two_files(tmp_path):
    copy = write(tmp_path, "copy.yaml", GOOD.read_text())
    code, out, _ = run_lint("--runners", FIX_RUNNERS, "--launch", FIX_LAUNCH, GOOD, copy)
    assert code == 1
    again = "config key defined in another file too"
    assert [r[:3] for r in rows(out, copy)] == [(2, "fixture-agentic", again), (32, "fixture-fixed", again)]


def test_a_key_with_a_line_break_stays_on_one_line(tmp_path):
    file = write(tmp_path, "master.yaml", '"a\\nb": 1\n')
    code, out, _ = run_lint("--runners", FIX_RUNNERS, "--launch", FIX_LAUNCH, file)
    assert code == 1 and out.count("\n") == 2  # not a config key; not an entry
    assert [r[:2] for r in rows(out, file)] == [(1, "a\\nb"), (1, "a\\nb")]


def test_mixed_key_types_on_one_line_are_sorted_without_error(tmp_path):
    file = write(tmp_path, "master.yaml", "{a: 1, 1: 2, null: 3}\n")
    code, out, _ = run_lint("--runners", FIX_RUNNERS, "--launch", FIX_LAUNCH, file)
    assert code == 1
    assert [r[1] for r in rows(out, file)] == ["None", "None", "[1]", "[1]", "a"]
    assert [r[2] for r in rows(out, file) if r[1] != "a"].count("input should be a valid string, got 1") == 1


# fmt: off
@pytest.mark.parametrize(("argv", "fragment"), [
    pytest.param(["missing.yaml"], "lint: no such file: missing.yaml", id="missing-config"),
    pytest.param(["--runners", "nowhere.yaml"], "lint: no such file: nowhere.yaml", id="missing-runners"),
    pytest.param(["--changelog", "nowhere.yaml"], "lint: no such file: nowhere.yaml", id="missing-changelog"),
    pytest.param(["--profile", "lenient"], "invalid choice: 'lenient'", id="bad-profile"),
    pytest.param(["--changelog", ROOT / "perf-changelog.yaml", "--base", "no-such-ref-0123"],
                 "BASE 'no-such-ref-0123' is not a commit", id="bad-base"),
    pytest.param(["--no-such-flag"], "unrecognized arguments", id="bad-flag"),
])
# fmt: on
def test_usage_errors_exit_2(argv, fragment):
    code, out, err = run_lint(*argv)
    assert (code, out) == (2, "")
    assert fragment in err


def test_repository_as_it_is_lints_clean():
    code, out, err = run_lint()
    assert (code, out) == (0, ""), out
    assert err.startswith("lint: ok")


def _cli(*argv) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "schemas.lint", *map(str, argv)], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)


# fmt: off
@pytest.mark.parametrize(("content", "argv", "code"), [
    pytest.param(b"a: [1, 2\n", [], 1, id="syntax-error"),
    pytest.param(b"a: !!int abc\n", [], 1, id="bad-typed-scalar"),
    pytest.param(b"a: &x [*x]\n", [], 1, id="recursive-alias"),
    pytest.param(b"{a: 1, 1: 2}\n", [], 1, id="mixed-key-types"),
    pytest.param(b"\x89PNG\r\n\x1a\n\xff", [], 1, id="not-utf8"),
    pytest.param(b"a: 1\n", ["--profile", "lenient"], 2, id="bad-profile"),
    pytest.param(b"- x\n", ["--changelog"], 1, id="changelog-of-scalars"),
])
# fmt: on
def test_subprocess_never_a_traceback(tmp_path, content, argv, code):
    file = tmp_path / "bad.yaml"
    file.write_bytes(content)
    done = _cli("--runners", FIX_RUNNERS, "--launch", FIX_LAUNCH, *argv, file)
    assert done.returncode == code, done.stderr
    assert "Traceback" not in done.stderr and "internal error" not in done.stderr
    assert len(rows(done.stdout, file)) == done.stdout.count("\n")


def _make(*args) -> subprocess.CompletedProcess:
    return subprocess.run(["make", "-s", "-C", str(ROOT), "lint", *args], capture_output=True, text=True,
                          timeout=120)


def test_make_lint_passes_on_the_repository():
    done = _make()
    assert (done.returncode, done.stdout) == (0, ""), done.stdout + done.stderr


# InferenceX's August snapshot: its runners.yaml is the older form (hardware:, no clusters:)
@pytest.mark.parametrize(
    ("profile", "passes"), [("inferencex-legacy", True), ("inferencex", False), ("strict", False)]
)
def test_make_lint_configs_runners_profile(profile, passes):
    done = _make(f"CONFIGS={reference('amd-master.yaml')}", f"RUNNERS={reference('runners.yaml')}",
                 f"PROFILE={profile}")
    assert (done.returncode == 0) == passes, done.stdout[-2000:] + done.stderr
    assert f"({profile})" in done.stderr


def test_make_lint_changelog_reports_findings(tmp_path):
    # '*' matches whatever configs/ holds today: only the pr-link is wrong
    text = "- config-keys: ['*']\n  description: [x]\n  pr-link: TBD\n"
    changelog = write(tmp_path, "perf-changelog.yaml", text)
    done = _make(f"CHANGELOG={changelog}", "REPO=org/repo")
    assert done.returncode != 0
    hint = "open the pull request first, then https://github.com/org/repo/pull/<number>"
    assert rows(done.stdout, changelog) == [(3, "[0].pr-link", "pr-link 'TBD' is a placeholder", hint)]


def test_json_schemas_are_current():
    assert export.main(["--check"]) == 0


def test_stale_json_schema_is_detected(tmp_path, monkeypatch):
    monkeypatch.setattr(export, "OUT", tmp_path)
    assert export.main(["--check"]) == 1  # nothing written yet
    assert export.main([]) == 0
    assert export.main(["--check"]) == 0
    (tmp_path / "runners.schema.json").write_text("{}\n")
    assert export.main(["--check"]) == 1


def test_exported_schema_accepts_valid_configs_and_rejects_a_typo():
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads((export.OUT / "master-config.schema.json").read_text())
    for config in [GOOD, *sorted((ROOT / "configs").glob("*-master.yaml"))]:
        jsonschema.validate(load_file(config).data, schema)
    data = load_file(GOOD).data
    data["fixture-fixed"]["imgae"] = data["fixture-fixed"].pop("image")
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(data, schema)
