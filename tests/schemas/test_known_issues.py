"""The known-issue registry (configs/known-issues.yaml) and the strict rule that checks configs against it.

Config cases mutate the SGLang MiniCPM-SALA fixture entry (fixtures/minicpm-sala-master.yaml) and, where a
case needs another fix state, the shipped registry; registry cases mutate the shipped registry and lint it
through the CLI. A rejected case names the key path, a fragment of the message and fragments of the hint.
"""

from __future__ import annotations

import copy
import datetime
import json
import re
import subprocess
from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from schemas import export, lint
from schemas import known_issues as ki
from schemas import settings as reg
from schemas.check import check_known_issues, check_master
from schemas.config import MasterEntry
from schemas.runners import Runners
from schemas.yamlio import load_file, load_text

from .conftest import FIXTURES, KNOWN_ISSUES, ROOT, apply, dump, parse_path, rel, rows, run_lint, shown, write
from .test_properties import SETTINGS, YAMLISH

FIX = FIXTURES / "minicpm-sala-master.yaml"
NVIDIA = FIXTURES / "runners-nvidia.yaml"
LAUNCH = FIXTURES / "launch.yaml"
KEY = "minicpm-sala-bf16-nvidia-sglang-disagg"
ISSUE = "minicpm-sala-kv-indptr"
SS = "scenarios.fixed-seq-len[0].search-space[0]"
P, D = f"{SS}.prefill.additional-settings", f"{SS}.decode.additional-settings"
RECS = "known-issue-workarounds"
FLASHINFER = ["DENSE_AS_SPARSE=true", "ATTENTION_BACKEND=minicpm_flashinfer"]
FLASHATTN = ["DENSE_AS_SPARSE=true", "ATTENTION_BACKEND=minicpm_flashattn"]
NO_GRAPH = [*FLASHINFER, "DISABLE_CUDA_GRAPH=true"]
FIXED = "lmsysorg/sglang:v0.5.10-minicpm-sala-fixed"  # made-up tags, as in the fixture
TITLE = "CUDA-graph replay crashes in FlashInfer plan()"
CRASH = "RuntimeError: kv_indptr[i+1] - kv_indptr[i] should be non-negative, got -3"  # the real message


def s(path, value):
    return ("set", path, value)


def record(workaround="disable-cuda-graph", issue=ISSUE) -> dict:
    return {"issue": issue, "workaround": workaround}


def both(settings) -> list:
    return [s(P, list(settings)), s(D, list(settings))]


FIXED_IN = s("[0].fixed-in.images", [FIXED])


@dataclass(frozen=True)
class Case:
    ops: tuple = ()  # mutations of the fixture entry (conftest.apply)
    registry_ops: tuple = ()  # mutations of the shipped registry
    path: str = ""
    fragment: str = ""
    hints: tuple = ()


def cases(*rows) -> list:
    """Rows (id, ops[, registry_ops[, path, fragment[, hints]]]) as pytest params."""
    out = []
    for id, ops, *rest in rows:
        registry_ops = tuple(rest.pop(0)) if rest else ()
        out.append(pytest.param(Case(tuple(ops), registry_ops, *rest), id=id))
    return out


def fixture_entry() -> dict:
    return copy.deepcopy(load_file(FIX).data[KEY])


def registry_data() -> list:
    return load_file(KNOWN_ISSUES).data


def issues_of(registry: list) -> tuple:
    issues, findings = check_known_issues(load_text(dump(registry), "known-issues.yaml"))
    assert findings == [], shown(findings)
    return issues


def lint_fixture(case: Case, profile="strict"):
    registry = issues_of(apply(registry_data(), case.registry_ops))
    doc = load_text(dump({KEY: apply(fixture_entry(), case.ops)}), file="master.yaml")
    return check_master(doc, Runners.model_validate(load_file(NVIDIA).data), profile, registry)[1]


# fmt: off
REJECT = cases(
    ("unfixed-image", [], [], "image", f"known issue {ISSUE}: {TITLE}",
     ("fixed by PR #3 on minicpm_sala (a2d3bcea9243, 2026-03-11)",
      "use an image of sglang-0.5.23 (configs/engine-builds.yaml)",
      f"{RECS}: [{{issue: {ISSUE}, workaround: <id>}}]",
      "disable-cuda-graph sets DISABLE_CUDA_GRAPH=true, changes performance",
      "minicpm-flashattn sets ATTENTION_BACKEND=minicpm_flashattn instead of "
      "ATTENTION_BACKEND=minicpm_flashinfer, changes performance")),
    ("names-trigger-and-both-roles", [], [], "image",
     f"triggered by DENSE_AS_SPARSE=true + ATTENTION_BACKEND=minicpm_flashinfer at {SS}.prefill and 1 more "
     "on an image without the fix"),
    ("decode-only", [s(P, [])], [], "image", f"at {SS}.decode on an image without the fix"),
    ("settings-in-any-order", [s(D, ["ATTENTION_BACKEND=minicpm_flashinfer", "DENSE_AS_SPARSE=1"])],
     [], "image", "and 1 more"),
    ("not-in-fixed-glob", [], [s("[0].fixed-in.images", ["lmsysorg/sglang:*-fixed"])], "image",
     f"known issue {ISSUE}", ("use one of lmsysorg/sglang:*-fixed",)),
    ("affected-glob-on-full-name", [], [s("[0].affected.images", ["docker.io/lmsysorg/sglang:*"])], "image",
     f"known issue {ISSUE}"),
    ("env-trigger", [], [s("[0].trigger.flags-all", ["--dense-as-sparse"]),
                         s("[0].trigger.env", ["ATTENTION_BACKEND=minicpm_flashinfer"])], "image",
     f"known issue {ISSUE}"),
    ("no-fix-known", [], [("del", "[0].fixed-in")], "image", f"known issue {ISSUE}", ("no fix is known",)),
    ("recorded-not-applied", [s(RECS, [record()])], [], f"{RECS}[0]",
     f"recorded workaround disable-cuda-graph of {ISSUE} is not applied at {SS}.prefill and 1 more",
     ("in its additional-settings: DISABLE_CUDA_GRAPH=true",)),
    ("applied-on-prefill-only", [s(RECS, [record()]), s(P, NO_GRAPH)], [], f"{RECS}[0]",
     f"is not applied at {SS}.decode"),
    ("flashattn-recorded-flashinfer-kept", [s(RECS, [record("minicpm-flashattn")])], [], f"{RECS}[0]",
     "recorded workaround minicpm-flashattn", ("ATTENTION_BACKEND=minicpm_flashattn instead of "
                                               "ATTENTION_BACKEND=minicpm_flashinfer",)),
    ("recorded-not-triggered", [s(RECS, [record()]), *both(["DISABLE_CUDA_GRAPH=true"])], [], f"{RECS}[0]",
     f"recorded workaround disable-cuda-graph is for an issue this config does not trigger: {ISSUE}",
     ("no engine of it sets DENSE_AS_SPARSE=true + ATTENTION_BACKEND=minicpm_flashinfer",
      "remove the record")),
    ("recorded-on-fixed-image", [s(RECS, [record()]), s("image", FIXED), *both(NO_GRAPH)], [FIXED_IN],
     f"{RECS}[0]", "does not trigger", (f"image {FIXED} carries the fix",)),
    ("recorded-for-another-model", [s(RECS, [record()]), s("model", "openbmb/Other"), *both(NO_GRAPH)], [],
     f"{RECS}[0]", "does not trigger", ("model openbmb/Other is not openbmb/MiniCPM-SALA",)),
    ("recorded-image-not-affected", [s(RECS, [record()]), *both(NO_GRAPH)],
     [s("[0].affected.images", ["lmsysorg/sglang:*-old"])], f"{RECS}[0]", "does not trigger",
     ("is not among the affected images",)),
    ("second-workaround-not-needed", [s(RECS, [record(), record("minicpm-flashattn")]),
                                      *both([*FLASHATTN, "DISABLE_CUDA_GRAPH=true"])], [], f"{RECS}[0]",
     "recorded workaround disable-cuda-graph is for an issue this config does not trigger",
     ("no engine of it sets DENSE_AS_SPARSE=true + ATTENTION_BACKEND=minicpm_flashinfer",)),
    ("unknown-issue", [s(RECS, [record(issue="minicpm-sala-kv-indtpr")])], [], f"{RECS}[0].issue",
     "unknown known issue 'minicpm-sala-kv-indtpr'", (f"did you mean '{ISSUE}'?",)),
    ("unknown-workaround", [s(RECS, [record("disable-cuda-graf")]), *both(NO_GRAPH)], [],
     f"{RECS}[0].workaround", f"{ISSUE} has no workaround 'disable-cuda-graf'",
     ("did you mean 'disable-cuda-graph'?",)),
    ("unknown-workaround-far", [s(RECS, [record("zzz")])], [], f"{RECS}[0].workaround", "no workaround 'zzz'",
     ("one of: disable-cuda-graph, minicpm-flashattn",)),
    ("recorded-twice", [s(RECS, [record(), record()]), *both(NO_GRAPH)], [], f"{RECS}[1]",
     "disable-cuda-graph is recorded twice", (f"first at {RECS}[0]",)),
    ("record-needs-both-keys", [s(RECS, [{"issue": ISSUE}])], [], f"{RECS}[0].workaround",
     "missing required key 'workaround'"),
    ("record-unknown-key", [s(RECS, [dict(record(), reason="x")])], [], f"{RECS}[0].reason",
     "unknown key 'reason'"),
)

ACCEPT = cases(
    ("fixed-image", [s("image", FIXED)], [FIXED_IN]),
    ("fixed-by-glob", [s("image", "lmsysorg/sglang:v0.5.10-fixed")],
     [s("[0].fixed-in.images", ["lmsysorg/sglang:*-fixed"])]),
    ("fixed-by-full-name", [s("image", FIXED)], [s("[0].fixed-in.images", [f"docker.io/{FIXED}"])]),
    ("disable-cuda-graph-recorded-and-applied", [s(RECS, [record()]), *both(NO_GRAPH)]),
    ("flashattn-recorded-and-applied", [s(RECS, [record("minicpm-flashattn")]), *both(FLASHATTN)]),
    ("flashattn-without-record", both(FLASHATTN)),
    ("dense-as-sparse-off", both(["DENSE_AS_SPARSE=false", "ATTENTION_BACKEND=minicpm_flashinfer"])),
    ("only-one-trigger-flag", both(["ATTENTION_BACKEND=minicpm_flashinfer"])),
    ("another-model", [s("model", "openbmb/Other")]),
    ("decode-only-workaround-on-decode", [s(P, []), s(D, NO_GRAPH), s(RECS, [record()])]),
    ("env-trigger-not-met", [], [s("[0].trigger.flags-all", ["--dense-as-sparse"]),
                                 s("[0].trigger.env", ["ATTENTION_BACKEND=minicpm_flashattn"])]),
    ("model-glob-elsewhere", [], [s("[0].trigger.model", "openbmb/MiniCPM4-*")]),
)
# fmt: on


@pytest.mark.parametrize("case", REJECT)
def test_reject(case: Case):
    findings = lint_fixture(case)
    mine = [f for f in findings if rel(f) == case.path and case.fragment in f.message]
    assert len(mine) == 1, f"no finding at {case.path!r} with {case.fragment!r} in:\n{shown(findings)}"
    for hint in case.hints:
        assert hint in mine[0].hint, mine[0].format()


@pytest.mark.parametrize("case", ACCEPT)
def test_accept(case: Case):
    findings = lint_fixture(case)
    assert findings == [], shown(findings)


def test_rule_is_strict_only():
    assert lint_fixture(Case(), profile="inferencex") == []


def test_finding_is_one_line_at_the_image_line():
    code, out, err = run_lint("--runners", NVIDIA, "--launch", LAUNCH, "--known-issues", KNOWN_ISSUES, FIX)
    assert (code, err) == (1, "lint: 1 finding in 6 files (strict)\n")
    [(line, path, message, hint)] = rows(out, FIX)
    assert (line, path) == (6, f"{KEY}.image")
    assert FIX.read_text().splitlines()[line - 1] == "  image: lmsysorg/sglang:v0.5.9-minicpm-sala"
    assert message.startswith(f"known issue {ISSUE}: {TITLE}")
    assert "a2d3bcea9243" in hint and "disable-cuda-graph" in hint


def test_make_lint_checks_against_the_shipped_registry():
    done = subprocess.run(
        ["make", "-s", "-C", str(ROOT), "lint", f"CONFIGS={FIX}", f"RUNNERS={NVIDIA}", f"LAUNCH={LAUNCH}"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0
    assert [r[:2] for r in rows(done.stdout, FIX)] == [(6, f"{KEY}.image")]


def test_render_path_loads_the_registry_itself():
    """lint_configs without a registry: strict loads (and reports) the shipped one."""
    report = lint.Report()
    lint.lint_configs([FIX], Runners.model_validate(load_file(NVIDIA).data), "strict", report, launch=None)
    configs = ROOT / "configs"
    assert report.checked == [
        str(KNOWN_ISSUES),
        str(configs / "engine-builds.yaml"),
        str(configs / "models.yaml"),
        str(FIX),
    ]
    assert [rel(f) for f in report.findings] == ["image"]


def test_shipped_registry_lints_clean():
    assert run_lint("--known-issues", KNOWN_ISSUES) == (0, "", "lint: ok, 1 file (strict)\n")


def test_inferencex_profile_does_not_read_the_registry():
    assert run_lint("--profile", "inferencex-legacy", "--runners", NVIDIA, FIX) == (
        0,
        "",
        "lint: ok, 2 files (inferencex-legacy)\n",
    )


# ---------------------------------------------------------------- the registry file

BAD_RE = "kv_indptr["
# fmt: off
REGISTRY_REJECT = [
    pytest.param(ops, path, fragment, hint, id=id) for id, ops, path, fragment, hint in [
    ("bad-regex", [s("[0].log-signature", BAD_RE)], "[0].log-signature",
     "log-signature does not compile: unterminated character set", ""),
    ("regex-matches-everything", [s("[0].log-signature", "x*")], "[0].log-signature",
     "log-signature matches an empty line", ""),
    ("unknown-key", [("rename", "[0].fixed-in", "fixd-in")], "[0].fixd-in", "unknown key 'fixd-in'",
     "did you mean 'fixed-in'?"),
    ("unknown-nested-key", [("rename", "[0].workarounds[0].flags-add", "flag-add")],
     "[0].workarounds[0].flag-add", "unknown key 'flag-add'", "did you mean 'flags-add'?"),
    ("missing-key", [("del", "[0].log-signature")], "[0].log-signature", "missing required key", ""),
    ("id-not-kebab", [s("[0].id", "MiniCPM_SALA")], "[0].id", "'MiniCPM_SALA' is not a kebab-case id", ""),
    ("engine-did-you-mean", [s("[0].engine", "sglan")], "[0].engine", "'sglang' or 'vllm'",
     "did you mean 'sglang'?"),
    ("flag-with-space", [s("[0].trigger.flags-all[1]", "--attention-backend minicpm_flashinfer")],
     "[0].trigger.flags-all[1]", "is not an engine flag", "--name or --name=value"),
    ("flag-no-setting", [s("[0].trigger.flags-all[0]", "--enable-foo")], "[0].trigger.flags-all[0]",
     "no setting stands for engine flag --enable-foo", ""),
    ("flag-did-you-mean", [s("[0].workarounds[0].flags-add[0]", "--disable-cuda-graf")],
     "[0].workarounds[0].flags-add[0]", "did you mean '--disable-cuda-graph'?", ""),
    ("switch-with-value", [s("[0].trigger.flags-all[0]", "--dense-as-sparse=true")],
     "[0].trigger.flags-all[0]", "--dense-as-sparse is a switch: write it without a value", ""),
    ("value-flag-without-value", [s("[0].trigger.flags-all[1]", "--attention-backend")],
     "[0].trigger.flags-all[1]", "--attention-backend takes a value", ""),
    ("env-unknown-setting", [s("[0].trigger.env", ["SGLANG_FOO=1"])], "[0].trigger.env[0]",
     "unknown setting 'SGLANG_FOO'", ""),
    ("env-bad-value", [s("[0].trigger.env", ["DENSE_AS_SPARSE=maybe"])], "[0].trigger.env[0]",
     "expected 1/0 or true/false", ""),
    ("empty-trigger", [s("[0].trigger.flags-all", [])], "[0].trigger",
     "a trigger needs flags-all, env or kv-connectors", ""),
    ("workaround-without-flags", [("del", "[0].workarounds[0].flags-add")], "[0].workarounds[0]",
     "a workaround needs flags-add, flags-remove or kv-connector-module", ""),
    ("workaround-id-twice", [s("[0].workarounds[1].id", "disable-cuda-graph")], "[0].workarounds",
     "workaround id 'disable-cuda-graph' is used twice", ""),
    ("performance-not-said", [("del", "[0].workarounds[0].changes-performance")],
     "[0].workarounds[0].changes-performance", "missing required key", ""),
    ("performance-not-bool", [s("[0].workarounds[0].changes-performance", "yes")],
     "[0].workarounds[0].changes-performance", "valid boolean", ""),
    ("short-commit", [s("[0].affected.engine-commits-before.commit", "a2d3bce")],
     "[0].affected.engine-commits-before.commit", "'a2d3bce' is not a full commit",
     "40 lowercase hex digits"),
    ("date-not-a-date", [s("[0].affected.engine-commits-before.date", "March 11")],
     "[0].affected.engine-commits-before.date", "valid date", ""),
    ("no-affected-images", [s("[0].affected.images", [])], "[0].affected.images", "at least 1 item", ""),
    ("http-link", [s("[0].links", ["http://example.com/pull/3"])], "[0].links[0]",
     "'http://example.com/pull/3' is not an https:// URL", ""),
    # one line of text, no control characters, no shell syntax where a value is a name
    ("title-newline", [s("[0].title", "crash\ncause: known issue forged")], "[0].title", "is not a title",
     "one line, without control characters or bidi overrides"),
    ("title-terminal-escape", [s("[0].title", "crash \x1b]0;owned\x07")], "[0].title", "is not a title", ""),
    ("title-too-long", [s("[0].title", "x" * 201)], "[0].title", "is not a title", "at most 200 characters"),
    ("description-bidi", [s("[0].workarounds[0].description", "run \u202egnp.exe")],
     "[0].workarounds[0].description", "is not a one-line text", ""),
    ("source-newline", [s("[0].affected.source", "fork\r\nx")], "[0].affected.source",
     "is not a one-line text", ""),
    ("change-c1-csi", [s("[0].fixed-in.change", "PR #3\x9b2J")], "[0].fixed-in.change",
     "is not a one-line text", ""),
    ("signature-newline", [s("[0].log-signature", "kv_indptr\nboom")], "[0].log-signature",
     "is not a one-line regex", ""),
    ("signature-too-long", [s("[0].log-signature", "x" * 257)], "[0].log-signature",
     "is not a one-line regex", "at most 256 characters"),
    ("image-glob-quote", [s("[0].affected.images", ["lmsysorg/sglang:'*'"])], "[0].affected.images[0]",
     "is not an image reference or glob", "with '*', '?' and '[...]' globs"),
    ("image-glob-space", [s("[0].fixed-in.images", ["a b"])], "[0].fixed-in.images[0]",
     "is not an image reference or glob", ""),
    ("model-glob-substitution", [s("[0].trigger.model", "openbmb/$(id)")], "[0].trigger.model",
     "is not a model id or glob", ""),
    ("flag-value-quote", [s("[0].trigger.flags-all[1]", "--attention-backend='x'")],
     "[0].trigger.flags-all[1]", "is not an engine flag", ""),
    ("flag-value-unicode", [s("[0].trigger.flags-all[1]", "--attention-backend=minicpm_\uff46lashinfer")],
     "[0].trigger.flags-all[1]", "is U+FF46, not ASCII", ""),
    ("link-quote", [s("[0].links", ["https://github.com/x/y/pull/3'$(id)"])], "[0].links[0]",
     "is not an https:// URL", "URL-safe ASCII"),
    ("link-javascript", [s("[0].links", ["javascript:alert(1)"])], "[0].links[0]",
     "is not an https:// URL", ""),
]]
# fmt: on


@pytest.mark.parametrize(("ops", "path", "fragment", "hint"), REGISTRY_REJECT)
def test_registry_reject(tmp_path, ops, path, fragment, hint):
    text = dump(apply(registry_data(), ops))
    file = write(tmp_path, "known-issues.yaml", text)
    code, out, _ = run_lint("--known-issues", file)
    assert code == 1
    prefix = f"{file}:{load_text(text).line_of(parse_path(path))}: {path}: "  # the key's own line
    assert any(t.startswith(prefix) and fragment in t and hint in t for t in out.splitlines()), (prefix, out)


def test_registry_is_a_list(tmp_path):
    file = write(tmp_path, "known-issues.yaml", dump({"issues": registry_data()}))
    assert run_lint("--known-issues", file)[1] == (
        f"{file}:1: <document>: the known-issue registry is a list of issues, got dict\n"
    )


ISSUE_TEXT = """\
- id: {id}
  title: t
  engine: sglang
  trigger: {{flags-all: [--dense-as-sparse]}}
  affected: {{images: ["*"]}}
  log-signature: boom
"""


def of(out: str, file) -> str:
    """The printed findings of one file."""
    return "".join(line + "\n" for line in out.splitlines() if line.startswith(f"{file}:"))


def test_duplicate_id_names_the_first_line(tmp_path):
    file = write(tmp_path, "known-issues.yaml", ISSUE_TEXT.format(id="a") + ISSUE_TEXT.format(id="a"))
    code, out, _ = run_lint("--known-issues", file)
    assert code == 1
    assert rows(out, file) == [(7, "[1].id", "duplicate issue id 'a'", "first defined on line 1")]


def test_duplicate_key_in_an_issue(tmp_path):
    file = write(tmp_path, "known-issues.yaml", ISSUE_TEXT.format(id="a") + "  engine: vllm\n")
    assert run_lint("--known-issues", file)[1] == (
        f"{file}:7: [0].engine: duplicate key 'engine' (first defined on line 3)\n"
    )


def test_syntax_error_has_a_line(tmp_path):
    file = write(tmp_path, "known-issues.yaml", ISSUE_TEXT.format(id="a") + "  links: [x\n")
    code, out, _ = run_lint("--known-issues", file)
    assert code == 1 and rows(out, file)[0][2].startswith("invalid YAML")


def test_a_malformed_issue_does_not_hide_the_others(tmp_path):
    """The bad issue is reported; the good one still rejects the fixture config."""
    bad = ISSUE_TEXT.format(id="a").replace("log-signature: boom", f"log-signature: '{BAD_RE}'")
    file = write(tmp_path, "known-issues.yaml", bad + dump(registry_data()))
    code, out, _ = run_lint("--runners", NVIDIA, "--launch", LAUNCH, "--known-issues", file, FIX)
    assert code == 1
    assert [r[1] for r in rows(of(out, file), file)] == ["[0].log-signature"]
    assert [r[1] for r in rows(of(out, FIX), FIX)] == [f"{KEY}.image"]


@SETTINGS
@given(text=st.one_of(st.text(max_size=200), YAMLISH))
def test_arbitrary_registry_text_never_crashes(tmp_path_factory, text):
    file = tmp_path_factory.mktemp("ki") / "known-issues.yaml"
    file.write_text(text, encoding="utf-8")
    code, out, err = run_lint("--known-issues", file)
    assert code in (0, 1) and "internal error" not in err
    assert (code == 1) == bool(rows(out, file)), out


def test_registry_json_schema_is_exported_and_checks():
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads((export.OUT / "known-issues.schema.json").read_text())
    # YAML reads an unquoted date as a date; JSON (and an editor's YAML 1.2) sees the text
    data = json.loads(json.dumps(registry_data(), default=datetime.date.isoformat))
    jsonschema.validate(data, schema)
    data[0]["fixd-in"] = data[0].pop("fixed-in")
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(data, schema)


# ---------------------------------------------------------------- helpers for the renderer and log watcher


def test_signatures_for_the_log_watcher():
    sigs = ki.signatures(issues_of(registry_data()))
    assert [id for id, _ in sigs] == [ISSUE, "vllm-multiconnector-prom-metrics"]
    pattern = re.compile(sigs[0][1])
    assert pattern.search(CRASH)
    assert not pattern.search("kv_indptr[i+1] - kv_indptr[i] = 3")


def test_recorded_workarounds_for_the_lock_file():
    entry = MasterEntry.model_validate(apply(fixture_entry(), [s(RECS, [record()])]))
    [row] = ki.recorded_workarounds(entry, issues_of(registry_data()))
    assert row["issue"] == ISSUE and row["workaround"] == "disable-cuda-graph"
    assert row["changes-performance"] is True and row["flags-add"] == ["--disable-cuda-graph"]
    assert row["settings"] == "DISABLE_CUDA_GRAPH=true"


def test_an_entry_without_records_hashes_as_before():
    """config_sha256 (lock file, golden plans) must not move for configs that never record a workaround."""
    entry = MasterEntry.model_validate(fixture_entry())
    assert RECS not in entry.model_dump_json(by_alias=True)
    assert RECS in MasterEntry.model_validate(dict(fixture_entry(), **{RECS: [record()]})).model_dump_json()


# fmt: off
@pytest.mark.parametrize(("settings", "flags"), [
    pytest.param({"DENSE_AS_SPARSE": True}, {"--dense-as-sparse"}, id="switch-on"),
    pytest.param({"DENSE_AS_SPARSE": False}, set(), id="switch-off"),
    pytest.param({"ATTENTION_BACKEND": "minicpm_flashattn"}, {"--attention-backend=minicpm_flashattn"},
                 id="value"),
    pytest.param({"ATTENTION_BACKEND": None, "MAX_NUM_SEQS": 8}, set(), id="unset-and-flagless"),
])
# fmt: on
def test_engine_flags(settings, flags):
    assert reg.engine_flags(settings) == flags


@pytest.mark.parametrize(
    ("flag", "item"),
    [("--dense-as-sparse", "DENSE_AS_SPARSE=true"), ("--attention-backend=x", "ATTENTION_BACKEND=x")],
)
def test_flag_setting(flag, item):
    assert reg.flag_setting(flag) == item
