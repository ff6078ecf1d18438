"""The InferenceX reference corpus (read in place through tests.paths, never copied): what InferenceX
accepts loads under its own profile; what its validator missed fails under strict."""

from __future__ import annotations

import pytest

from schemas.yamlio import load_file
from tests.paths import reference

from .conftest import rows, run_lint

AGENTIC = "kimik2.5-fp4-mi355x-vllm-disagg-agentic"
SS = "scenarios.agentic-coding[0].search-space[0]"


def test_amd_master_passes_the_inferencex_profile():
    argv = [
        "--profile",
        "inferencex-legacy",
        "--runners",
        reference("runners.yaml"),
        reference("amd-master.yaml"),
    ]
    code, out, err = run_lint(*argv)
    assert (code, out) == (0, ""), out
    assert err == "lint: ok, 2 files (inferencex-legacy)\n"


def test_amd_master_under_strict_reports_in_format():
    master = reference("amd-master.yaml")
    code, out, _ = run_lint("--runners", reference("runners.yaml"), master)
    assert code == 1
    assert rows(out, master)


def test_pr1924_entry_fails_strict_on_what_review_missed():
    entry = reference("pr1924-kimi-agentic-entry.yaml")
    code, out, _ = run_lint(entry)
    assert code == 1
    found = rows(out, entry)
    ss = f"{AGENTIC}.{SS}"
    expected = [
        (9, f"{AGENTIC}.image", "image publisher 'yukiozzz' is a personal or unlisted namespace"),
        (15, f"{AGENTIC}.router.version", "router version '1' is not a release or commit"),
        (26, f"{ss}.kv-offload-backend", "lmcache backend without a version"),
        (41, f"{ss}.prefill.additional-settings[8]", "LMCACHE_L1_SIZE_GB: is derived from"),
    ]
    for line, path, fragment in expected:
        assert any(r[:2] == (line, path) and fragment in r[2] for r in found), (path, out)


def test_pr1924_entry_passes_inferencex_profile():
    """InferenceX's own rules accepted it: the strict findings above are what this repository adds."""
    code, out, _ = run_lint("--profile", "inferencex-legacy", reference("pr1924-kimi-agentic-entry.yaml"))
    assert (code, out) == (0, "")


def test_pr1924_changelog_entry_fails_on_its_placeholder_link():
    changelog = reference("pr1924-changelog-entry-XXX.yaml")
    code, out, _ = run_lint("--changelog", changelog)
    assert code == 1
    hint = "open the pull request first, then https://github.com/disagg-recipes/disagg-recipes/pull/<number>"
    assert rows(out, changelog) == [(6, "[0].pr-link", "pr-link 'XXX' is a placeholder", hint)]


def test_real_changelog_parses():
    doc = load_file(reference("perf-changelog.yaml"))
    assert isinstance(doc.data, list) and len(doc.data) == 772
    assert doc.duplicates == []


def test_real_changelog_has_exactly_two_bad_pr_links():
    changelog = reference("perf-changelog.yaml")
    code, out, _ = run_lint("--changelog", changelog, "--repo", "SemiAnalysisAI/InferenceX")
    assert code == 1
    links = [r for r in rows(out, changelog) if r[1].endswith(".pr-link")]
    assert [(path, msg) for _, path, msg, _ in links] == [
        ("[638].pr-link", "pr-link has a '/changes' suffix"),
        ("[690].pr-link", "pr-link 'https://github.com/SemiAnalysisAI/InferenceX/pull/XXX' is a placeholder"),
    ]
    assert links[0][3] == "https://github.com/SemiAnalysisAI/InferenceX/pull/2305"
    text = changelog.read_text().splitlines()
    assert all("pr-link:" in text[line - 1] for line, *_ in links)


def test_pr2326_entry_lints_under_inferencex_with_reference_runners():
    argv = [
        "--profile",
        "inferencex-legacy",
        "--runners",
        reference("runners.yaml"),
        reference("pr2326-entry.yaml"),
    ]
    code, out, _ = run_lint(*argv)
    assert (code, out) == (0, "")


# fmt: off
@pytest.mark.parametrize(("path", "fragment"), [
    pytest.param("kv-p2p-transfer", "router vllm-router does not speak the moriio PD contract",
                 id="transfer"),
    pytest.param(f"{SS}.prefill.additional-settings[2]", "unknown setting 'VLLM_PATCH_46240'", id="unknown"),
])
# fmt: on
def test_pr2326_entry_under_strict(path, fragment):
    entry = reference("pr2326-entry.yaml")
    code, out, _ = run_lint("--runners", reference("runners.yaml"), entry)
    assert code == 1
    full = f"minimaxm3-fp4-mi355x-vllm-disagg-agentic.{path}"
    assert any(r[1] == full and fragment in r[2] for r in rows(out, entry)), out
