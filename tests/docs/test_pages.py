"""Recipe pages: every section, the commands exactly as rendered, recorded results and their staleness."""

from __future__ import annotations

import json
import re

import pytest

from recipes.build import build_plan
from recipes.pages import site as pages
from recipes.pages import verified
from recipes.pages import views as page_views
from recipes.render import render_plan
from recipes.variants import targets
from recipes.words import bash_argv
from schemas.config import MasterEntry

SECTIONS = (
    "## Overview",
    "## Prerequisites",
    "## Launch",
    "## What each node runs",
    "## Verification",
    "## Benchmarking",
    "## Latest verified result",
    "## Troubleshooting",
    "### Known engine issues",
    "## References",
)
BASH_BLOCK = re.compile(r"^( *)```bash\n(.*?)^\1```$", re.M | re.S)


def rendered_of(src, key):
    entry = src.entries[key]
    return [
        render_plan(build_plan(t))
        for t in targets(key, entry, runners=src.runners, launch=src.launch, issues=src.issues)
    ]


def bash_blocks(page: str) -> list[str]:
    """The page's bash code blocks, taken out of the list items they sit in."""
    out = []
    for m in BASH_BLOCK.finditer(page):
        lines = m[2].rstrip("\n").splitlines()
        out.append("\n".join(line.removeprefix(m[1]) for line in lines))
    return out


def keys(src):
    return sorted(src.entries)


def test_there_are_pages_to_test(src, rendered_pages):
    assert len(rendered_pages) >= 3 and all(f"{k}.md" in rendered_pages for k in src.entries)


def test_every_page_has_every_section_in_order(rendered_pages):
    for name, page in rendered_pages.items():
        if name == "README.md" or "**Not launchable yet.**" in page:  # the index has no sections
            continue
        at = [page.find(f"\n{s}\n") for s in SECTIONS]
        assert -1 not in at, f"{name} lacks {SECTIONS[at.index(-1)]}"
        assert at == sorted(at), f"{name}: sections out of order"


def test_every_command_on_a_page_is_in_a_rendered_file(src, rendered_pages):
    """Quoted and wrapped by the same code as the templates: a page's command is a part of a real file."""
    for key in keys(src):
        files = [text for r in rendered_of(src, key) for text in r.files.values()]
        env_lines = {line for r in rendered_of(src, key) for line in r.files.get("env.sh", "").splitlines()}
        for block in bash_blocks(rendered_pages[f"{key}.md"]):
            if block.startswith("# "):  # the make commands of the Launch section
                continue
            in_env = all(not line or line in env_lines for line in block.splitlines())
            assert in_env or any(block in text for text in files), (
                f"{key}: not in any rendered file:\n{block}"
            )


def test_every_rendered_command_is_on_its_page(src, rendered_pages):
    for key in keys(src):
        page = rendered_pages[f"{key}.md"]
        for r in rendered_of(src, key):
            plan = r.plan
            argvs = [s.argv for role in plan.roles for s in role.services] + [plan.benchmarks[0].argv]
            argvs += [plan.router.argv] if plan.router else []
            argvs += [plan.smoke] if plan.smoke else []
            argvs += [plan.l2_proof] if plan.l2_proof else []
            for words in argvs:
                text = bash_argv(words, page_views.SCRIPT_INDENT)
                assert text in r.files[plan.script], f"{key}: the page's wrapping differs from the script's"
                shown = [b for b in bash_blocks(page) if b == text]
                assert shown, f"{key} {plan.variant}: missing on the page:\n{text}"
            assert bash_argv(plan.launch, page_views.SBATCH_INDENT) in page


def test_every_variable_a_command_uses_is_explained(src, rendered_pages):
    for key in keys(src):
        plans = [r.plan for r in rendered_of(src, key)]
        rows = dict(page_views.ref_rows(plans))
        assert "set by the node script" not in rows.values(), f"{key}: explain it in page_views.REFS"
        for name in rows:
            assert f"| `${{{name}}}` |" in rendered_pages[f"{key}.md"]


def test_pages_are_deterministic(src, rendered_pages):
    again = pages.render_all(src, results_root=pages.PAGES / "no-such-folder")
    assert again == rendered_pages


def test_failure_classes_shown_are_the_catalogs(src, rendered_pages):
    from scripts.failures import CLASSES

    for key in keys(src):
        page = rendered_pages[f"{key}.md"]
        shown = [fc for fc in CLASSES if f"| {fc.exit_code}: {fc.exit_why} | {fc.check} |" in page]
        assert len(shown) >= 5, key
        has_lmcache = "`lmcache`," in page
        assert any(fc.name.startswith("lmcache-") for fc in shown) == has_lmcache, key


# ---------------------------------------------------------------- recorded results


def make_run(tmp_path, plan, *, config_sha256=None, verdict="job succeeded: every node ended cleanly"):
    run = tmp_path / "runs" / "20261121-103154-d89d49"
    run.mkdir(parents=True)
    lock = {
        "config_key": plan.config_key,
        "variant": plan.variant,
        "image": plan.container.image,
        "image_digest": None,
        "components": {"vllm": "0.33.0", "aiperf": "0.13.0"},
        "config_sha256": config_sha256 or plan.config_sha256,
        "rendered_sha256": "ab" * 32,
        "workarounds": [],
    }
    row = {"concurrency": 4, "requests": 216.0, "output_tok_per_s_per_gpu": 35.455, "ttft_ms_p99": 119.9}
    summary = {"config_key": plan.config_key, "variant": plan.variant, "run": run.name, "gpus": 24}
    summary |= {"rows": [row], "lock": {**lock, "nodes": ["sim1", "sim2", "sim3"]}}
    (run / "lock.json").write_text(json.dumps(lock))
    (run / "summary.json").write_text(json.dumps(summary))
    (run / "job.out").write_text(f"0: [10:31:56] sim1 step: preflight\n{verdict}\n")
    return run


@pytest.fixture
def one(src):
    key = next(k for k in keys(src) if src.entries[k].runner == "cluster:local-sim")
    return key, rendered_of(src, key)[0].plan


def test_a_recorded_result_of_the_current_config_is_shown_without_a_note(src, one, tmp_path):
    key, plan = one
    path = verified.record(make_run(tmp_path, plan), tmp_path / "results")
    doc = json.loads(path.read_text())
    assert path.read_text() == json.dumps(doc, indent=2, sort_keys=True) + "\n"
    rec = doc["variants"][plan.variant]
    assert (rec["run"], rec["date"], rec["nodes"]) == (
        "20261121-103154-d89d49",
        "2026-11-21 10:31:54 UTC",
        ["sim1", "sim2", "sim3"],
    )
    page = pages.page(key, src, verified.load(key, tmp_path / "results"))
    section = page[page.index("## Latest verified result") : page.index("## Troubleshooting")]
    assert "run `20261121-103154-d89d49` (2026-11-21 10:31:54 UTC)" in section
    assert "35.5" in section and "Older config" not in section and plan.config_sha256 in section


def test_a_recorded_result_of_an_older_config_is_flagged(src, one, tmp_path):
    key, plan = one
    verified.record(make_run(tmp_path, plan, config_sha256="0" * 64), tmp_path / "results")
    page = pages.page(key, src, verified.load(key, tmp_path / "results"))
    section = page[page.index("## Latest verified result") : page.index("## Troubleshooting")]
    assert "**Older config.**" in section and f"the\n> config is now `{plan.config_sha256[:12]}`" in section


def test_a_run_that_did_not_succeed_is_not_recorded(one, tmp_path):
    _, plan = one
    run = make_run(
        tmp_path, plan, verdict="job failed: first failure on sim2 in step 'prefill vllm' (exit code 1)"
    )
    with pytest.raises(verified.RecordError, match="job succeeded"):
        verified.record(run, tmp_path / "results")
    assert not (tmp_path / "results").exists()


def test_a_run_without_a_summary_says_to_report_it_first(one, tmp_path):
    _, plan = one
    run = make_run(tmp_path, plan)
    (run / "summary.json").unlink()
    with pytest.raises(verified.RecordError, match="make report RUN="):
        verified.record_of(run)


def test_recording_keeps_the_other_variants(one, tmp_path):
    key, plan = one
    root = tmp_path / "results"
    root.mkdir()
    (root / f"{key}.json").write_text(json.dumps({"config_key": key, "variants": {"other": {"run": "x"}}}))
    verified.record(make_run(tmp_path, plan), root)
    assert set(verified.load(key, root)) == {"other", plan.variant}


def test_cli_check_fails_on_a_stale_page_and_names_it(src, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(pages, "PAGES", tmp_path)
    (tmp_path / "gone-config.md").write_text("old\n")
    assert pages.main(["--check"]) == 1
    err = capsys.readouterr().err
    assert "run `make docs`" in err and "gone-config.md" in err
    assert pages.main([]) == 0 and not (tmp_path / "gone-config.md").exists()
    assert pages.main(["--check"]) == 0


# ---------------------------------------------------------------- a config the renderer refuses


def test_a_valid_config_the_renderer_refuses_gets_a_page_saying_why(src):
    key = next(k for k in keys(src) if src.entries[k].runner == "cluster:local-sim")
    data = src.entries[key].model_dump(by_alias=True)
    for scenario in data["scenarios"].values():
        for group in scenario or ():
            for space in group["search-space"]:
                space["spec-decoding"] = "mtp"
    entries = {**src.entries, key: MasterEntry.model_validate(data)}
    page = pages.page(key, pages.Sources(**{**src.__dict__, "entries": entries}), {})
    assert "**Not launchable yet.**" in page and "has no mtp-args" in page
    assert f"[{src.origin[key][0]}]" in page and "## What each node runs" not in page


def test_another_project_s_master_file_gets_its_pages_outside_the_repository(tmp_path, capsys):
    """make docs CONFIGS=<InferenceX's file> OUT=<folder>: one page per entry lint accepts, whose commands
    name the file, written there and never into the repository (its config text is that project's)."""
    from tests.paths import reference

    master = reference("amd-master.yaml")
    assert pages.main(["--configs", str(master), "--out", str(pages.ROOT_DIR / "out" / "x")]) == 2
    assert "a folder outside the repository" in capsys.readouterr().err
    out = tmp_path / "pages"
    assert pages.main(["--configs", str(master), "--out", str(out)]) == 0
    atom = (out / "dsv4-fp4-mi355x-atom-disagg.md").read_text()
    for section in SECTIONS[:4]:
        assert section in atom
    assert "make submit CONFIG=dsv4-fp4-mi355x-atom-disagg VARIANT=<variant> CONFIGS=" in atom
    assert "a parser rebuilt from the recorded description of atom 087b82d9's" in atom
    index = (out / "README.md").read_text()
    assert "[dsv4-fp4-mi355x-sglang-disagg-agentic-hicache-mtp](" in index
    link = re.search(r"\[config reference\]\(([^)]+)\)", index).group(1)
    assert (out / link).resolve() == pages.ROOT_DIR / "docs" / "config-reference.md"
