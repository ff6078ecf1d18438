"""Refusals that need more than one entry to see: a config key two master files both define (named at both
files and lines), and a perf-changelog pr-link to another repository than the one `make lint REPO=` names."""

from __future__ import annotations

from schemas.changelog import check_changelog, pr_link_problem
from schemas.yamlio import load_text

from .conftest import FIXTURES, dump, rows, run_lint, write

GOOD = FIXTURES / "good-master.yaml"
FIX_RUNNERS = FIXTURES / "runners.yaml"
FIX_LAUNCH = FIXTURES / "launch.yaml"
REPO = "disagg-recipes/disagg-recipes"
FORK = "someone/disagg-recipes"


def rows_of(out: str, file) -> list:
    """(line, key path, message, hint) of the printed findings in `file` (other files' lines left out)."""
    return rows("".join(t + "\n" for t in out.split("\n") if t.startswith(f"{file}:")), file)


def test_a_config_key_in_two_master_files_names_both_files_and_lines(tmp_path):
    """The second file's entries are refused at their lines, each naming where the first file has it."""
    other = write(tmp_path, "nvidia-master.yaml", "# another master file\n\n" + GOOD.read_text())
    code, out, _ = run_lint("--runners", FIX_RUNNERS, "--launch", FIX_LAUNCH, GOOD, other)
    assert code == 1
    assert rows_of(out, GOOD) == []
    keys = GOOD.read_text().split("\n")
    first = {key: keys.index(f"{key}:") + 1 for key in ("fixture-agentic", "fixture-fixed")}
    again = "config key defined in another file too"
    assert rows_of(out, other) == [
        (
            first[key] + 2,
            key,
            again,
            f"also at {GOOD}:{first[key]}; a config key is one entry across every master file: rename one of "
            "them or remove it",
        )
        for key in ("fixture-agentic", "fixture-fixed")
    ]


def test_the_same_keys_in_one_master_file_only_pass():
    _, out, _ = run_lint("--runners", FIX_RUNNERS, "--launch", FIX_LAUNCH, GOOD)
    assert rows_of(out, GOOD) == []


def entry(link: str) -> dict:
    return {"config-keys": ["fixture-fixed"], "description": ["a change"], "pr-link": link}


def test_a_pr_link_to_a_fork_says_how_to_lint_against_another_repository():
    link = f"https://github.com/{FORK}/pull/7"
    text = dump([entry(link)])
    doc = load_text(text, file="perf-changelog.yaml")
    (finding,) = check_changelog(doc, repo=REPO, config_keys={"fixture-fixed"})
    assert (finding.line, finding.path) == (text.split("\n").index(f"  pr-link: {link}") + 1, (0, "pr-link"))
    assert finding.message == (
        f"pr-link points at {FORK}, not this repository ({REPO}); `make lint REPO=<org>/<repo>` sets which "
        "repository pr-links must point at (a fork linting its own changelog)"
    )
    assert finding.hint == f"https://github.com/{REPO}/pull/<number>"
    # linted as the fork's own changelog, the same link is right
    assert pr_link_problem(link, FORK, ("pr-link",)) is None


def test_make_lint_repo_sets_the_repository_pr_links_point_at(tmp_path):
    link = f"https://github.com/{FORK}/pull/7"
    changelog = write(tmp_path, "perf-changelog.yaml", dump([entry(link)]))
    configs = ("--runners", FIX_RUNNERS, "--launch", FIX_LAUNCH, GOOD, "--changelog", changelog)
    code, out, _ = run_lint(*configs)
    line = changelog.read_text().split("\n").index(f"  pr-link: {link}") + 1
    assert code == 1
    assert f"{changelog}:{line}: [0].pr-link: pr-link points at {FORK}, not this repository ({REPO}); " in out
    assert "`make lint REPO=<org>/<repo>` sets which repository pr-links must point at" in out
    _, out, _ = run_lint(*configs, "--repo", FORK)
    assert f"{changelog}:" not in out
