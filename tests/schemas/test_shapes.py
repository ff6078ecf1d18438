"""Hostile text: every key and value that reaches bash, a file name or a terminal has an allowed shape
(schemas/base.py), checked under every profile. Config keys, runner labels, known-issue and workaround ids
are refused at their own line, saying which shape would do; so are values of master entries that are not
an image reference, a model id, a lowercase name, a version or a safe KEY=VALUE."""

from __future__ import annotations

import copy
from typing import Annotated

import pytest
from pydantic import TypeAdapter, ValidationError

from schemas import base
from schemas.check import check_master
from schemas.config import Image, MasterConfig
from schemas.findings import one_line
from schemas.runners import Runners
from schemas.yamlio import load_file, load_text
from tests.paths import reference

from .cases import FIXED_SEQ_LEN, IX, Case, add, cases, check_accept, check_reject, s
from .conftest import KNOWN_ISSUES, SS, P, baseline, dump, launch_data, rows, run_lint, write

PS = f"{P}.additional-settings"
LMC = f"{SS}.kv-offload-backend"
KEY_HINT = "lowercase ASCII letters, digits, '.', '_' and '-', starting with a letter or digit"

# What a key or label must never be: shell syntax, a path, a line break, a look-alike, a bidi override.
HOSTILE = [
    pytest.param("x$(touch F)", id="command-substitution"),
    pytest.param("x`id`", id="backticks"),
    pytest.param('x";id;"', id="quotes"),
    pytest.param("x\nid", id="newline"),
    pytest.param("x\rid", id="carriage-return"),
    pytest.param("a,BASH_ENV=F,X=", id="env-injection"),
    pytest.param("${IFS}", id="ifs"),
    pytest.param("../../x", id="traversal"),
    pytest.param("/abs", id="absolute"),
    pytest.param("k\u0456mik2.5-fp4-mi355x-vllm-disagg", id="cyrillic-i"),
    pytest.param("kimi\u202ek2", id="bidi-override"),
    pytest.param("kimi\x1b[31m", id="terminal-escape"),
    pytest.param("k\uff11", id="fullwidth-digit"),
    pytest.param("a b", id="space"),
    pytest.param("Kimi", id="uppercase"),
    pytest.param(".hidden", id="leading-dot"),
    pytest.param("-rf", id="leading-dash"),
    pytest.param("", id="empty"),
    pytest.param("a" * 129, id="too-long"),
]


def _lint_master(tmp_path, entries: dict):
    file = write(tmp_path, "master.yaml", dump(copy.deepcopy(entries)))
    code, out, _ = run_lint(file)  # the shipped runners, launch profiles and registry
    return file, code, rows(out, file)


@pytest.mark.parametrize("key", HOSTILE)
def test_config_key_refused_at_its_line(tmp_path, key):
    """Model constraint base.ConfigKey: the bad key's own finding, on its line, saying the shape; the good
    entry beside it is untouched."""
    file, code, found = _lint_master(tmp_path, {"good-key": baseline(), key: baseline()})
    line = load_text(file.read_text()).line_of((key,))
    shown = one_line(key) or "<document>"
    assert code == 1
    assert any(
        r[0] == line and "is not a config key" in r[2] and KEY_HINT in r[3] for r in found if r[1] == shown
    ), found
    assert not [r for r in found if r[1].startswith("good-key")]


def test_config_key_lookalike_is_named():
    (finding,) = _key_findings("k\u0456mi")
    assert "'\u0456' is U+0456, not ASCII" in finding.message


def _key_findings(key):
    return check_master(load_text(dump({key: baseline()}), "m.yaml"), None, "inferencex")[1]


@pytest.mark.parametrize(
    "key", ["kimik2.5-fp4-mi355x-vllm-disagg-agentic", "a", "0x", "dsr1_fp8.v2", "a" * 128]
)
def test_config_key_accepted(key):
    assert _key_findings(key) == []


def test_every_reference_config_key_has_the_shape():
    keys = list(load_file(reference("amd-master.yaml")).data)
    adapter = TypeAdapter(base.ConfigKey)
    assert len(keys) == 56 and all(adapter.validate_python(k) for k in keys)


def test_every_reference_runner_label_has_the_shape():
    data = load_file(reference("runners.yaml")).data
    labels = {*data["labels"], *data["hardware"]}
    adapter = TypeAdapter(base.Label)
    assert {"cluster:mi355x-amds", "h100", "b200-nscale"} <= labels
    assert all(adapter.validate_python(label) for label in labels)


@pytest.mark.parametrize("label", HOSTILE + [pytest.param("a:b:c", id="two-colons")])
def test_runner_label_refused_in_runners_and_launch(tmp_path, label):
    """Model constraint base.Label on the keys of runners.yaml labels/hardware and launch.yaml profiles."""
    runners = {
        "labels": {label: ["n0"]},
        "hardware": {label: {"available-cpu-dram-mib": 1, "gpus-per-node": 8}},
    }
    profile = launch_data()["profiles"]["cluster:local-sim"]
    files = {
        "runners": write(tmp_path, "runners.yaml", dump(runners)),
        "launch": write(tmp_path, "launch.yaml", dump({"profiles": {label: profile}})),
    }
    shown = one_line(label)
    expected = {"runners": ["labels", "hardware"], "launch": ["profiles"]}
    for kind, file in files.items():
        code, out, _ = run_lint(f"--{kind}", file)
        doc = load_text(file.read_text())
        found = sorted((r[0], r[1]) for r in rows(out, file) if "is not a runner label" in r[2])
        assert code == 1
        assert found == sorted((doc.line_of((top, label)), f"{top}.{shown}") for top in expected[kind]), out


@pytest.mark.parametrize("issue_id", HOSTILE + [pytest.param("minicpm--sala", id="double-dash")])
def test_known_issue_and_workaround_ids_refused(tmp_path, issue_id):
    """Model constraint base.Id on known-issue ids and workaround ids."""
    registry = load_file(KNOWN_ISSUES).data
    registry[0]["id"] = issue_id
    registry[0]["workarounds"][1]["id"] = issue_id
    file = write(tmp_path, "known-issues.yaml", dump(registry))
    code, out, _ = run_lint("--known-issues", file)
    found = [r[1] for r in rows(out, file) if "is not a kebab-case id" in r[2]]
    assert code == 1 and found == ["[0].id", "[0].workarounds[1].id"], out


# ---------------------------------------------------------------- values of a master entry (model: base.*)

# fmt: off
REJECT = [
    *cases("model",
        # references to runners and known issues
        ("runner-substitution", [s("runner", "cluster:mi355x-amds$(id)")], "runner", "is not a runner label",
         "at most one ':'", IX),
        ("runner-newline", [s("runner", "cluster:mi355x-amds\nx")], "runner", "is not a runner label"),
        ("worker-hardware-quote", [s(f"{P}.hardware", "a'b")], f"{P}.hardware", "is not a runner label"),
        ("workaround-issue-id", [s("known-issue-workarounds", [{"issue": "x;id", "workaround": "w"}])],
         "known-issue-workarounds[0].issue", "is not a kebab-case id"),
        ("workaround-id", [s("known-issue-workarounds", [{"issue": "x", "workaround": "W W"}])],
         "known-issue-workarounds[0].workaround", "is not a kebab-case id"),
        # image, model and names
        ("image-newline", [s("image", "vllm/vllm-openai-rocm:v0.33.0\n")], "image",
         "is not an image reference", None, IX),
        ("image-quote", [s("image", "vllm/x:v1'")], "image", "is not an image reference"),
        ("image-substitution", [s("image", "vllm/$(id):v1")], "image", "is not an image reference"),
        ("image-uppercase-repo", [s("image", "vllm/VLLM:v1")], "image", "is not an image reference"),
        ("image-too-long", [s("image", "vllm/x:v" + "1" * 300)], "image", "is not an image reference"),
        ("model-space", [s("model", "amd/Kimi K2.5")], "model", "is not a model id", "org/name of ASCII"),
        ("model-traversal", [s("model", "amd/../../etc")], "model", "is not a model id"),
        ("model-dotdot", [s("model", "../x")], "model", "is not a model id"),
        ("model-absolute", [s("model", "/models/x")], "model", "is not a model id"),
        ("model-three-parts", [s("model", "a/b/c")], "model", "is not a model id"),
        ("model-cyrillic", [s("model", "amd/K\u0456mi")], "model", "'\u0456' is U+0456, not ASCII"),
        ("model-prefix-upper", [s("model-prefix", "Kimi")], "model-prefix", "is not a name", None, IX),
        ("precision-newline", [s("precision", "fp4\n")], "precision", "is not a name"),
        ("framework-space", [s("framework", "vllm disagg")], "framework", "is not a name"),
        ("router-name", [s("router.name", "pd-proxy;id")], "router.name", "is not a name"),
        ("router-version", [s("router.version", "0.1.0 && id")], "router.version", "is not a version",
         "as in 0.1.17"),
        ("router-version-unicode-digit", [s("router.version", "0.1.\u0663")], "router.version",
         "is not a version"),
        ("backend-name", [s(f"{LMC}.name", "lmcache`id`")], f"{LMC}.name", "is not a name"),
        ("backend-version", [s(f"{LMC}.version", "0.5.6\r")], f"{LMC}.version", "is not a version"),
        ("kv-transfer", [s("kv-p2p-transfer", "mooncake$x")], "kv-p2p-transfer", "is not a name"),
        # additional-settings: never whitespace or shell syntax, under any profile
        ("setting-substitution", [add(PS, 2, "WEKA_LOADER_OVERRIDE=$(touch x)")], f"{PS}[2]",
         "'WEKA_LOADER_OVERRIDE=$(touch x)' is not a setting", "KEY=VALUE of ASCII letters", IX),
        ("setting-backticks", [add(PS, 2, "WEKA_LOADER_OVERRIDE=`id`")], f"{PS}[2]", "is not a setting"),
        ("setting-space", [add(PS, 2, "WEKA_LOADER_OVERRIDE=a b")], f"{PS}[2]", "is not a setting"),
        ("setting-semicolon", [add(PS, 2, "WEKA_LOADER_OVERRIDE=a;reboot")], f"{PS}[2]", "is not a setting"),
        ("setting-pipe", [add(PS, 2, "WEKA_LOADER_OVERRIDE=a|sh")], f"{PS}[2]", "is not a setting"),
        ("setting-glob", [add(PS, 2, "WEKA_LOADER_OVERRIDE=*")], f"{PS}[2]", "is not a setting"),
        ("setting-newline", [add(PS, 2, "MC_PROTOCOL=tcp\nexport X=1")], f"{PS}[2]", "is not a setting"),
        ("setting-quote", [add(PS, 2, "MC_PROTOCOL='tcp'")], f"{PS}[2]", "is not a setting"),
        ("setting-path-substitution", [add(PS, 7, "HF_HUB_CACHE=/models/$(id)")], f"{PS}[7]",
         "is not a setting"),
        ("setting-path-space", [add(PS, 7, "HF_HUB_CACHE=/a b")], f"{PS}[7]", "is not a setting"),
        ("setting-leading-space", [add(PS, 7, "GPU_MEMORY_UTILIZATION= 0.9")], f"{PS}[7]",
         "is not a setting"),
        ("setting-arabic-indic-digit", [add(PS, 7, "MAX_NUM_SEQS=\u0663")], f"{PS}[7]",
         "'\u0663' is U+0663, not ASCII"),
        ("setting-bidi", [add(PS, 7, "MC_PROTOCOL=tcp\u202e")], f"{PS}[7]", "is not a setting"),
        ("setting-too-long", [add(PS, 7, "HF_HUB_CACHE=/" + "a" * 1100)], f"{PS}[7]",
         "is not a setting", "at most 1024 characters"),
        ("single-node-setting", [s(f"{SS}.additional-settings", ["X=$(id)"])], f"{SS}.additional-settings[0]",
         "is not a setting", None, IX),
    ),
]
ACCEPT = [
    *cases("model",
        ("image-registry-port-digest", [s("image", "localhost:5000/org/x@sha256:" + "0" * 64)], IX),
        ("image-registry-host", [s("image", "nvcr.io/nvidia/vllm:25.01-py3")], IX),
        ("model-single-part", [s("model", "Kimi-K2.5")], IX),
        ("model-dots", [s("model", "Qwen/Qwen3.5-397B-A17B-FP8")], IX),
        ("names", [s("model-prefix", "glm5.2"), s("precision", "mxfp4"), s("framework", "dynamo-sglang")],
         IX),
        # a label without 'cluster:' is a label; agentic entries need one with it (_agentic_runner_is_cluster)
        ("label-without-cluster", FIXED_SEQ_LEN + [s("runner", "mi355x")], IX),
        ("version-local", [s(f"{LMC}.version", "0.5.5.dev104+rocm7.2")]),
        ("setting-inferencex-image",
         [add(PS, 7, "CLIENT_IMAGE=lmsysorg/sglang-rocm:v0.5.15.post1-rocm720")], IX),
        ("setting-dot-folder", [add(PS, 7, "HF_HUB_CACHE=/models/.cache/huggingface/hub")]),
    ),
]
# fmt: on


@pytest.mark.parametrize("case", REJECT)
def test_reject(case: Case):
    check_reject(case)


@pytest.mark.parametrize("case", ACCEPT)
def test_accept(case: Case):
    check_accept(case)


def test_every_reference_image_has_the_shape():
    images = {e["image"] for e in load_file(reference("amd-master.yaml")).data.values()}
    adapter = TypeAdapter(Image)
    assert len(images) > 20 and all(adapter.validate_python(i) for i in images)


@pytest.mark.parametrize(
    "value",
    ["a\u2028b", "a\x85b", "a\x00b", "a\tb", "\u2066x", "x\x7f", ""],
    ids=["line-separator", "nel", "nul", "tab", "bidi-isolate", "del", "empty"],
)
def test_prose_is_one_plain_line(value):
    with pytest.raises(ValidationError, match="is not a title"):
        TypeAdapter(Annotated[str, base.prose("a title", 200)]).validate_python(value)


def test_prose_takes_quotes_and_unicode():
    text = 'vLLM\'s "PD" contract — 1٣ ü'
    assert TypeAdapter(Annotated[str, base.prose("a title", 200)]).validate_python(text) == text


def test_no_unicode_aware_classes_in_schemas():
    """re's \\d, \\w and \\s match Arabic-Indic and fullwidth digits, letters and spaces beyond ASCII: the
    schemas use [0-9] and explicit ASCII classes (re.ASCII where a pattern is compiled)."""
    from pathlib import Path

    for path in sorted((Path(base.__file__).parent).glob("*.py")):
        text = path.read_text()
        for escape in ("\\d", "\\w", "\\s", "\\S", "\\D", "\\W"):
            assert escape not in text.replace("\\\\", ""), f"{path.name} uses {escape}"


def test_keys_of_shaped_maps_are_property_names_in_the_json_schema():
    """Editors must refuse a bad key: propertyNames, not patternProperties (which lets other keys by)."""
    master = MasterConfig.model_json_schema()
    assert "patternProperties" not in str(master)
    assert master["propertyNames"]["pattern"] == "^[a-z0-9][a-z0-9._-]*$"
    labels = Runners.model_json_schema()["properties"]["labels"]
    assert labels["propertyNames"]["pattern"].startswith("^[a-z0-9]")
    assert "additionalProperties" in labels
