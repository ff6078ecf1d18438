"""perf-changelog.yaml: canonical pr-links, config keys that resolve, and append-only history against BASE."""

from __future__ import annotations

import subprocess

import pytest

from schemas.changelog import check_changelog, pr_link_problem
from schemas.findings import format_path
from schemas.yamlio import load_text

from .conftest import FIXTURES, ROOT, dump, rows, run_lint, write

REPO = "disagg-recipes/disagg-recipes"
CANON = f"https://github.com/{REPO}/pull/"
FIX = f"{CANON}<number>"
LATER = f"open the pull request first, then {FIX}"
KEYS_HINT = "config keys are the top-level keys of configs/*-master.yaml"
KEYS = {"fixture-agentic", "fixture-fixed"}  # the keys of fixtures/good-master.yaml
WILDCARDS = "the wildcards '*', '?', '[...]'"
KEY_SHAPE = f"lowercase ASCII letters, digits, '.', '_', '-' and {WILDCARDS}; at most 128 characters"
ONE_LINE = "non-empty, one line, without control characters or bidi overrides; at most 2000 characters"
FIXTURE_CONFIGS = (
    "--runners",
    FIXTURES / "runners.yaml",
    "--launch",
    FIXTURES / "launch.yaml",
    FIXTURES / "good-master.yaml",
)


def entry(link=f"{CANON}7", keys=("fixture-agentic",), **extra) -> dict:
    return {"config-keys": list(keys), "description": ["a change"], "pr-link": link, **extra}


def lint_changelog(entries, *, config_keys=KEYS, base=None) -> list[tuple[str, str, str]]:
    """(path, message, hint) of every finding; `entries` is YAML text or a list to dump."""
    doc = load_text(entries if isinstance(entries, str) else dump(entries), file="perf-changelog.yaml")
    found = check_changelog(doc, repo=REPO, config_keys=config_keys, base=base)
    return [(format_path(f.path), f.message, f.hint) for f in found]


@pytest.mark.parametrize("link", [f"{CANON}1", f"{CANON}2305", f"{CANON}99999"])
def test_canonical_pr_link_passes(link):
    assert pr_link_problem(link, REPO, ("pr-link",)) is None
    assert lint_changelog([entry(link)]) == []


# fmt: off
@pytest.mark.parametrize(("link", "fragment", "hint"), [
    pytest.param("XXX", "pr-link 'XXX' is a placeholder", LATER, id="XXX"),
    pytest.param("TBD", "pr-link 'TBD' is a placeholder", LATER, id="TBD"),
    pytest.param("PLACEHOLDER", "is a placeholder", LATER, id="PLACEHOLDER"),
    pytest.param("pull/XXX", "is a placeholder", LATER, id="pull-XXX"),
    pytest.param(f"{CANON}XXX", "is a placeholder", LATER, id="canonical-XXX"),
    pytest.param(f"{CANON}xxxx", "is a placeholder", LATER, id="canonical-xxxx"),
    pytest.param(f"{CANON}TBD", "is a placeholder", LATER, id="canonical-TBD"),
    pytest.param(f"{CANON}12/changes", "pr-link has a '/changes' suffix", f"{CANON}12", id="changes-suffix"),
    pytest.param(f"{CANON}12/files", "pr-link has a '/files' suffix", f"{CANON}12", id="files-suffix"),
    pytest.param(f"{CANON}12/", "suffix", f"{CANON}12", id="trailing-slash"),
    pytest.param(f"http://github.com/{REPO}/pull/12", "is not https", FIX, id="http"),
    pytest.param("https://github.com/SemiAnalysisAI/InferenceX/pull/1924",
                 f"points at SemiAnalysisAI/InferenceX, not this repository ({REPO})", FIX, id="other-repo"),
    pytest.param(f"https://github.com/{REPO}/issues/12", "is not a pull request link of", FIX,
                 id="issues-link"),
    pytest.param(f"{CANON}0", "is not a pull request link of", FIX, id="pull-0"),
    pytest.param("#12", "is not a pull request link of", FIX, id="bare-number"),
    pytest.param("", "pr-link is empty", FIX, id="empty"),
    pytest.param("   ", "pr-link is empty", FIX, id="blank"),
    pytest.param(None, "pr-link is empty", FIX, id="null"),
    # re's \d and str.isdigit take these for digits: a pull request number is ASCII
    pytest.param(f"{CANON}1\u0663", "pr-link number '1\u0663' has non-ASCII digits", FIX,
                 id="arabic-indic-digit"),
    pytest.param(f"{CANON}\uff11\uff12", "pr-link number '\uff11\uff12' has non-ASCII digits", FIX,
                 id="fullwidth-digits"),
    pytest.param(f"{CANON}\u0967\u0968/changes", "has non-ASCII digits", FIX, id="devanagari-with-suffix"),
    pytest.param(f"{CANON}12\n", "is not a pull request link of", FIX, id="trailing-newline"),
])
# fmt: on
def test_bad_pr_link_rejected_with_a_hint(link, fragment, hint):
    ((path, message, got_hint),) = lint_changelog([entry(link)])
    assert path == "[0].pr-link"
    assert fragment in message
    assert got_hint == hint


# fmt: off
@pytest.mark.parametrize(("keys", "expected"), [
    pytest.param(["fixture-agentic"], [], id="exact"),
    pytest.param(["fixture-*"], [], id="wildcard"),
    pytest.param(["*"], [], id="star"),
    pytest.param(["fixture-?ixed"], [], id="question-mark"),
    pytest.param(["fixture-agentic", "retired"], [("[0].config-keys[1]", "no such config key 'retired'")],
                 id="unknown-key"),
    pytest.param(["nothing-*"], [("[0].config-keys[0]", "pattern matches no config key 'nothing-*'")],
                 id="wildcard-matching-nothing"),
    pytest.param(["fixture-[xy]*"], [("[0].config-keys[0]", "pattern matches no config key 'fixture-[xy]*'")],
                 id="character-class"),
])
# fmt: on
def test_config_keys_resolve(keys, expected):
    assert lint_changelog([entry(keys=keys)]) == [(path, msg, KEYS_HINT) for path, msg in expected]


def test_config_keys_unchecked_without_known_keys():
    assert lint_changelog([entry(keys=["retired"])], config_keys=None) == []


# fmt: off
@pytest.mark.parametrize(("mutation", "path", "fragment", "hint"), [
    pytest.param({"description": None}, "[0].description", "valid list", "", id="description-null"),
    pytest.param({"config-keys": []}, "[0].config-keys", "at least 1 item", "", id="no-config-keys"),
    pytest.param({"config-keys": "fixture-fixed"}, "[0].config-keys", "valid list", "", id="keys-not-a-list"),
    pytest.param({"pr_link": f"{CANON}1"}, "[0].pr_link", "unknown key 'pr_link'", "did you mean 'pr-link'?",
                 id="underscore-key"),
    pytest.param({"scenario-type": ["agentic"]}, "[0].scenario-type[0]",
                 "'fixed-seq-len' or 'agentic-coding', got 'agentic'", "did you mean 'agentic-coding'?",
                 id="bad-scenario-type"),
    pytest.param({"evals-only": "yes"}, "[0].evals-only", "valid boolean, got 'yes'", "",
                 id="evals-only-str"),
    pytest.param({"pr-link": 1924}, "[0].pr-link", "valid string, got 1924", "", id="pr-link-number"),
    pytest.param({"config-keys": ["Fixture-*"]}, "[0].config-keys[0]",
                 "'Fixture-*' is not a config key or pattern", KEY_SHAPE, id="config-key-uppercase"),
    pytest.param({"config-keys": ["x$(id)"]}, "[0].config-keys[0]", "is not a config key or pattern",
                 KEY_SHAPE, id="config-key-substitution"),
    pytest.param({"description": ["line\nforged: line"]}, "[0].description[0]",
                 "is not a description line", ONE_LINE, id="description-newline"),
    pytest.param({"description": ["a \x1b[2J b"]}, "[0].description[0]", "is not a description line",
                 ONE_LINE, id="description-terminal-escape"),
    pytest.param({"description": ["abc\u202edcb"]}, "[0].description[0]", "is not a description line",
                 ONE_LINE, id="description-bidi-override"),
    pytest.param({"description": ["x" * 2001]}, "[0].description[0]", "is not a description line", ONE_LINE,
                 id="description-too-long"),
    pytest.param({"pr-link": CANON + "1" * 600}, "[0].pr-link", "at most 512 characters", "",
                 id="pr-link-too-long"),
])
# fmt: on
def test_entry_shape(mutation, path, fragment, hint):
    found = [f for f in lint_changelog([entry(**mutation)]) if f[0] == path]
    assert len(found) == 1 and fragment in found[0][1] and found[0][2] == hint, found


@pytest.mark.parametrize("key", ["config-keys", "description", "pr-link"])
def test_required_keys(key):
    e = entry()
    del e[key]
    assert lint_changelog([e]) == [(f"[0].{key}", f"missing required key '{key}'", "")]


def test_optional_fields_accepted():
    optional = {"scenario-type": ["agentic-coding"], "evals-only": False, "all-evals": True,
                "eval-min-prefill-ep": 8}
    assert lint_changelog([entry(**optional)]) == []
    assert lint_changelog([entry(**{"append-only": True, "evals-only": False})]) == []


# fmt: off
@pytest.mark.parametrize(("text", "expected"), [
    pytest.param("a: 1\n", [("", "the changelog is a list of entries", "")], id="map"),
    pytest.param("", [("", "the changelog is a list of entries", "")], id="empty"),
    pytest.param("- 1\n", [("[0]", "input should be a valid dictionary or instance of ChangelogEntry, got 1",
                             "")], id="scalar-entry"),
])
# fmt: on
def test_changelog_shape(text, expected):
    assert lint_changelog(text) == expected


DUPLICATE_IN_ENTRY = f"""\
- config-keys: [fixture-fixed]
  description: [first]
  pr-link: {CANON}1
  pr-link: {CANON}2
"""


def test_duplicate_key_in_an_entry():
    expected = [("[0].pr-link", "duplicate key 'pr-link'", "first defined on line 3")]
    assert lint_changelog(DUPLICATE_IN_ENTRY) == expected


TWO_ENTRIES = f"""\
- config-keys: [fixture-agentic]
  description: [fine]
  pr-link: {CANON}1
- config-keys:
  - fixture-fixed
  - gone
  description: [broken]
  pr-link: XXX
"""


def test_changelog_findings_through_the_cli_have_lines(tmp_path):
    path = write(tmp_path, "perf-changelog.yaml", TWO_ENTRIES)
    code, out, _ = run_lint("--changelog", path, *FIXTURE_CONFIGS)
    assert code == 1
    assert [r[:2] for r in rows(out, path)] == [(6, "[1].config-keys[1]"), (8, "[1].pr-link")]


# ---------------------------------------------------------------- append-only against BASE (a real git repo)

OLD_GOOD = entry(f"{CANON}1", ["fixture-agentic"])
OLD_BAD = entry("XXX", ["retired"])  # bad history: it must not fail later pull requests
NEW_GOOD = entry(f"{CANON}3", ["fixture-*"])
NEW_BAD = entry(f"{CANON}4/changes", ["fixture-*"])
OLD_BAD_FINDINGS = [("[1].config-keys[0]", "no such config key 'retired'"),
                    ("[1].pr-link", "pr-link 'XXX' is a placeholder")]


def _git(repo, *args):
    identity = ["-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run(["git", *identity, *args], cwd=repo, check=True, capture_output=True, timeout=30)


@pytest.fixture
def repo(tmp_path, monkeypatch):
    """A git repo whose HEAD holds a changelog of one good and one bad (old) entry; cwd inside it."""
    _git(tmp_path, "init", "-q", "-b", "main")
    write(tmp_path, "perf-changelog.yaml", dump([OLD_GOOD, OLD_BAD]))
    _git(tmp_path, "add", "perf-changelog.yaml")
    _git(tmp_path, "commit", "-q", "-m", "base")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def lint_in(repo, entries, *extra) -> tuple[int, list[tuple[str, str]]]:
    """Write the working-tree changelog and lint it from inside the repo: (exit code, sorted findings)."""
    write(repo, "perf-changelog.yaml", dump(entries))
    code, out, _ = run_lint("--changelog", "perf-changelog.yaml", *FIXTURE_CONFIGS, *extra)
    return code, sorted(r[1:3] for r in rows(out, "perf-changelog.yaml"))


def test_base_unchanged_bad_history_is_not_reported(repo):
    assert lint_in(repo, [OLD_GOOD, OLD_BAD], "--base", "HEAD") == (0, [])


def test_base_appended_good_entry_passes(repo):
    assert lint_in(repo, [OLD_GOOD, OLD_BAD, NEW_GOOD], "--base", "HEAD") == (0, [])


def test_base_appended_bad_entry_is_reported_alone(repo):
    code, found = lint_in(repo, [OLD_GOOD, OLD_BAD, NEW_GOOD, NEW_BAD], "--base", "HEAD")
    assert (code, found) == (1, [("[3].pr-link", "pr-link has a '/changes' suffix")])


def test_base_appended_entry_naming_an_unknown_config(repo):
    code, found = lint_in(repo, [OLD_GOOD, OLD_BAD, entry(f"{CANON}5", ["retired"])], "--base", "HEAD")
    assert (code, found) == (1, [("[2].config-keys[0]", "no such config key 'retired'")])


def test_base_modified_old_entry_is_reported(repo):
    changed = dict(OLD_GOOD, description=["rewritten"])
    code, found = lint_in(repo, [changed, OLD_BAD, NEW_GOOD], "--base", "HEAD")
    assert (code, found) == (1, [("[0]", "entry [0] was changed after it landed")])


def test_base_removed_entry_is_reported(repo):
    code, found = lint_in(repo, [OLD_GOOD], "--base", "HEAD")
    assert (code, found) == (1, [("<document>", "entry [1] of the base was removed")])


def test_base_entry_inserted_in_the_middle_is_not_an_append(repo):
    code, found = lint_in(repo, [OLD_GOOD, NEW_GOOD, OLD_BAD], "--base", "HEAD")
    assert code == 1
    assert ("[1]", "entry [1] was changed after it landed") in found


def test_base_without_the_file_checks_every_entry(repo):
    write(repo, "other.txt", "x\n")
    _git(repo, "rm", "-q", "--cached", "perf-changelog.yaml")
    _git(repo, "add", "other.txt")
    _git(repo, "commit", "-q", "-m", "no changelog here")
    assert lint_in(repo, [OLD_GOOD, OLD_BAD], "--base", "HEAD") == (1, OLD_BAD_FINDINGS)


def test_without_base_every_entry_is_checked(repo):
    assert lint_in(repo, [OLD_GOOD, OLD_BAD, NEW_GOOD]) == (1, OLD_BAD_FINDINGS)


def test_base_duplicate_keys_are_errors_in_old_entries_too(repo):
    """Parsers disagree on which of two equal keys counts: a duplicate slipped into a landed entry (here
    before the real pr-link, so this loader still reads the entry as unchanged) is an error all the same."""
    old = f"- config-keys: [fixture-fixed]\n  description: [first]\n  pr-link: {CANON}1\n"
    write(repo, "perf-changelog.yaml", old)
    _git(repo, "commit", "-q", "-am", "history")
    sneaked = old.replace("  pr-link:", f"  pr-link: {CANON}666\n  pr-link:")
    write(repo, "perf-changelog.yaml", sneaked + DUPLICATE_IN_ENTRY.replace("[first]", "[second]"))
    code, out, _ = run_lint("--changelog", "perf-changelog.yaml", "--base", "HEAD", *FIXTURE_CONFIGS)
    assert code == 1
    assert out == (
        "perf-changelog.yaml:4: [0].pr-link: duplicate key 'pr-link' (first defined on line 3)\n"
        "perf-changelog.yaml:8: [1].pr-link: duplicate key 'pr-link' (first defined on line 7)\n"
    )


def test_bad_base_ref_is_a_usage_error(repo):
    write(repo, "perf-changelog.yaml", dump([OLD_GOOD]))
    code, out, err = run_lint("--changelog", "perf-changelog.yaml", "--base", "no-such-branch")
    assert (code, out) == (2, "")
    assert "BASE 'no-such-branch' is not a commit" in err


def test_make_lint_with_base(repo):
    changelog = write(repo, "perf-changelog.yaml", dump([OLD_GOOD, OLD_BAD, NEW_BAD]))
    configs = [
        f"CONFIGS={FIXTURES / 'good-master.yaml'}",
        f"RUNNERS={FIXTURES / 'runners.yaml'}",
        f"LAUNCH={FIXTURES / 'launch.yaml'}",
    ]
    argv = ["make", "-s", "-C", str(ROOT), "lint", f"CHANGELOG={changelog}", "BASE=HEAD", *configs]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    line = changelog.read_text().split("\n").index(f"  pr-link: {CANON}4/changes") + 1
    assert done.returncode != 0
    expected = [(line, "[2].pr-link", "pr-link has a '/changes' suffix", f"{CANON}4")]
    assert rows(done.stdout, changelog) == expected, done.stderr


# fmt: off
@pytest.mark.parametrize(("text", "line", "path", "tag"), [
    pytest.param(f"- config-keys: [fixture-fixed]\n  description: !!python/object/apply:os.system [id]\n"
                 f"  pr-link: {CANON}1\n", 2, "[0].description", "!!python/object/apply:os.system",
                 id="python-on-a-list"),
    pytest.param(f"- !!python/object/new:os.system\n  config-keys: [fixture-fixed]\n  pr-link: {CANON}1\n",
                 1, "[0]", "!!python/object/new:os.system", id="python-on-an-entry"),
    pytest.param("- config-keys: [fixture-fixed]\n  description: [a]\n  pr-link: !!binary aHR0cA==\n",
                 3, "[0].pr-link", "!!binary", id="binary"),
    pytest.param(f"- config-keys: !keys [fixture-fixed]\n  description: [a]\n  pr-link: {CANON}1\n",
                 1, "[0].config-keys", "!keys", id="custom"),
])
# fmt: on
def test_tags_in_the_changelog_are_refused_at_their_line(tmp_path, text, line, path, tag):
    file = write(tmp_path, "perf-changelog.yaml", text)
    code, out, _ = run_lint("--changelog", file, *FIXTURE_CONFIGS)
    assert code == 1
    assert rows(out, file) == [
        (line, path, f"YAML tag {tag!r} is not allowed: configs are plain data",
         "remove the tag; allowed: !!str, !!int, !!float, !!bool, !!null, !!timestamp, !!seq, !!map")
    ]
