"""Points rendered from the srt-slurm recipe they name (recipes/srt.py): InferenceX's newest MI355X
SGLang+MoRI entries render from their recipes, the engine lines carry the recipe's flags and environment, and
a recipe that disagrees with its entry is refused, both values said (each refusal shown on a mutated copy)."""

from __future__ import annotations

import copy
import re
import shutil

import pytest
import yaml

from recipes import render
from recipes.outside import srt_recipe
from schemas import lint
from tests.paths import reference_now

# InferenceX's newest MI355X SGLang+MoRI multinode entries: each names its recipe with CONFIG_FILE.
SGLANG_MORI = (
    "qwen3.5-fp8-mi355x-sglang-disagg",
    "qwen3.5-fp4-mi355x-sglang-disagg",
    "dsr1-fp8-mi355x-sglang-disagg",
    "dsr1-fp8-mi355x-sglang-disagg-mtp",
    "dsr1-fp4-mi355x-sglang-disagg",
    "dsr1-fp4-mi355x-sglang-disagg-8k1k-mtp",
    "dsr1-fp4-mi355x-sglang-disagg-mtp",
)
DEP = ("dsr1-fp8-mi355x-sglang-disagg", "fsl8k1k_p2xdep8_d1xdep8")
RECIPE = "recipes/dsr1/sglang/mi355x-fp8/8k1k/disagg-variants.yaml:override_stp_2p1d_dep8"


def _rendered(key: str, master) -> dict:
    loaded = render.load(key, [master])
    return {r.plan.variant: r for r in render.render_config(key, loaded)}


@pytest.fixture(scope="module")
def newest():
    return reference_now("configs/amd-master.yaml")


@pytest.mark.parametrize("key", SGLANG_MORI)
def test_each_sglang_mori_entry_renders_from_its_recipe(newest, key):
    rendered = _rendered(key, newest)
    assert rendered
    for r in rendered.values():
        assert "srt-slurm recipe recipes/" in r.files["env.sh"]
        assert "--disaggregation-transfer-backend mori" in r.files["server_sglang.sh"]


@pytest.mark.parametrize("key", SGLANG_MORI)
def test_each_sglang_mori_entry_runs_gsm8k_at_inferencexs_threshold_for_its_model(newest, key):
    """One graded eval per point, at its highest concurrency, against the threshold InferenceX gates the
    model's family at (qwen3.5 0.94, dsr1 0.91)."""
    want = 0.94 if key.startswith("qwen3.5") else 0.91
    for r in _rendered(key, newest).values():
        a = r.plan.accuracy
        assert a is not None and (a.eval, a.threshold) == ("gsm8k", want), (key, r.plan.variant)
        assert a.concurrency == max(b.concurrency for b in r.plan.benchmarks)
        assert f"--threshold {want:.4f}" in r.files["server_sglang.sh"]


def test_the_engine_line_is_the_recipes(newest):
    """The DEP8 prefill: the recipe's flags as srt-slurm writes them (sorted, a list after its flag), its
    admission limit (not derived), its MoRI environment per role; the site's values the runner's."""
    r = _rendered(DEP[0], newest)[DEP[1]]
    script, env = r.files["server_sglang.sh"], r.files["env.sh"]
    launch = srt_recipe.read(RECIPE, srt_recipe.checkout_of(newest))
    prefill = launch.roles["prefill"]
    assert "--max-running-requests 2048" in script and "MAX_RUNNING_REQUESTS" not in env
    assert "--cuda-graph-bs 1 2 3 \\" in script
    assert "SGLANG_MORI_NUM_MAX_DISPATCH_TOKENS_PER_RANK=8192" in script  # prefill's, from the recipe
    assert "SGLANG_MORI_NUM_MAX_DISPATCH_TOKENS_PER_RANK=256" in script  # decode's override
    assert prefill.env["GLOO_SOCKET_IFNAME"] == "eno0" and "GLOO_SOCKET_IFNAME=eno0" not in script
    assert "the recipe's GLOO_SOCKET_IFNAME=eno0 is the site's: the runner's data-plane-interface" in env
    assert "export GLOO_SOCKET_IFNAME=ens51np0" in env


def test_mtp_depth_comes_from_the_recipe(newest):
    r = next(iter(_rendered("dsr1-fp4-mi355x-sglang-disagg-8k1k-mtp", newest).values()))
    script = r.files["server_sglang.sh"]
    assert "--speculative-num-steps 3" in script and "--speculative-algorithm NEXTN" in script
    assert "--speculative-draft-model-path /models/SGLang/DeepSeek-R1-NextN" in script  # the staged copy


# ---------------------------------------------------------------- refusals, each on a mutated copy


@pytest.fixture
def checkout(tmp_path, newest):
    """A checkout of one entry (the DEP8 one) and its recipe tree."""
    home = srt_recipe.checkout_of(newest)
    tree = tmp_path / srt_recipe.MULTI_NODE_TREE
    shutil.copytree(home / srt_recipe.MULTI_NODE_TREE / "dsr1", tree / "dsr1")
    (tmp_path / "configs").mkdir()
    return tmp_path


def _lint(folder, entry: dict) -> list[str]:
    master = folder / "configs" / "amd-master.yaml"
    master.write_text(yaml.safe_dump({DEP[0]: entry}, sort_keys=False))
    report = lint.run(lint.parser().parse_args([str(master)]))
    return [f.message for f in report.findings if f.file == str(master)]


def _entry(newest) -> dict:
    return copy.deepcopy(yaml.safe_load(newest.read_text())[DEP[0]])


def _first(entry: dict) -> dict:
    return entry["scenarios"]["fixed-seq-len"][0]["search-space"][0]


def test_the_unmutated_copy_renders(checkout, newest):
    assert _lint(checkout, _entry(newest)) == []


@pytest.mark.parametrize(
    ("mutate", "said"),
    [
        (lambda e: _first(e)["decode"].update({"num-worker": 2}), "decode: the recipe"),
        (
            lambda e: _first(e).update({"spec-decoding": "mtp"}),
            "runs no speculative decoding; the point says",
        ),
        (
            lambda e: _first(e)["prefill"]["additional-settings"].append("MEM_FRACTION_STATIC=0.7"),
            "prefill: MEM_FRACTION_STATIC beside the recipe",
        ),
        (
            lambda e: _first(e)["prefill"].update(
                {"additional-settings": [f"CONFIG_FILE={RECIPE.replace('2p1d_dep8', 'nope')}"]}
            ),
            "override_stp_nope is not a section of the recipe",
        ),
        (
            lambda e: e.update({"kv-p2p-transfer": "mooncake"}),
            "disaggregation-transfer-backend mori, the entry",
        ),
    ],
    ids=["workers", "speculation", "setting-beside", "no-such-section", "transfer"],
)
def test_a_recipe_that_disagrees_is_refused(checkout, newest, mutate, said):
    entry = _entry(newest)
    mutate(entry)
    found = _lint(checkout, entry)
    assert any(said in message for message in found), found


def test_a_master_file_in_no_checkout_cannot_read_its_recipe(tmp_path, newest):
    (tmp_path / "configs").mkdir()
    found = _lint(tmp_path, _entry(newest))
    assert any("no InferenceX checkout" in message for message in found), found


# Every multinode entry of InferenceX's newest amd-master that does not render, and a fragment of its reason.
REFUSED = {
    "dsv4-fp4-mi355x-sglang-disagg-agentic-umbp-dspark": "carries no engine build listed in",
    "dsv4-fp4-mi355x-atom-disagg-agentic-lmcache-dspark": "carries no engine build listed in",
    "glm5.3-fp8-mi355x-tilert-agentic": "framework 'tilert' is not rendered",
    "dsv41flash-fp4-mi300x-vllm-agentic-nixl": "has no launch profile in configs/launch.yaml",
    "dsv41flash-fp4-mi300x-vllm-agentic-dspark": "an aggregated multinode point",
}


def test_every_multinode_entry_renders_or_says_why(newest):
    """Strict lint is render's verdict: each multinode entry of the newest amd-master is clean (it renders) or
    refused with its reason; the clean ones are exactly the SGLang+MoRI entries."""
    entries = yaml.safe_load(newest.read_text())
    multinode = {key for key, entry in entries.items() if entry.get("multinode")}
    report = lint.run(
        lint.parser().parse_args(["--runners", str(reference_now("configs/runners.yaml")), str(newest)])
    )
    said: dict[str, list[str]] = {}
    for finding in report.findings:
        if finding.path and finding.path[0] in multinode:
            said.setdefault(finding.path[0], []).append(finding.message)
    assert multinode - set(said) == set(SGLANG_MORI)
    assert set(said) == set(REFUSED)
    for key, fragment in REFUSED.items():
        assert any(fragment in message for message in said[key]), (key, said[key])


# ---------------------------------------------------------------- a recipe rendered on its own

BUNDLE = "benchmarks/multi_node/srt-slurm-recipes/dsr1/sglang/mi355x-fp8/8k1k/disagg-variants.yaml"


def _engine_blocks(script: str) -> list[str]:
    """Each `start_service sglang ...` block of a node script, up to its readiness wait."""
    return re.findall(r"start_service sglang .*?wait_http", script, flags=re.S)


def test_a_recipe_renders_on_its_own_as_its_entry_does(tmp_path, newest, monkeypatch):
    """make render CONFIG=<recipe>:<section> with what the recipe does not say: the engine lines are the
    ones the master entry naming the same section renders."""
    monkeypatch.setenv(srt_recipe.RECIPES_ENV, "")  # render sets it: restored after
    recipe = srt_recipe.checkout_of(newest) / BUNDLE
    given = [
        "--model",
        "deepseek-ai/DeepSeek-R1-0528",
        "--image",
        "lmsysorg/sglang-rocm:v0.5.17-rocm720-mi35x-20260809",
    ]
    given += ["--precision", "fp8", "--isl", "8192", "--osl", "1024", "--conc", "4", "8"]
    assert render.main([f"{recipe}:override_stp_1p2d_tp8", "--out", str(tmp_path), *given]) == 0
    ours = (
        tmp_path / "mi355x-dsr1-fp8-stp-1p2d-tp8-fixed-seq" / "fsl8k1k_p1x8_d2x8" / "server_sglang.sh"
    ).read_text()
    monkeypatch.setenv(srt_recipe.RECIPES_ENV, "")  # render sets it: restored after
    entry = _rendered(DEP[0], newest)["fsl8k1k_p1x8_d2x8"].files["server_sglang.sh"]
    assert _engine_blocks(ours) == _engine_blocks(entry) and len(_engine_blocks(ours)) == 2


def test_a_recipe_on_its_own_says_what_it_lacks(tmp_path, newest, monkeypatch, capsys):
    monkeypatch.setenv(srt_recipe.RECIPES_ENV, "")  # render sets it: restored after
    recipe = srt_recipe.checkout_of(newest) / BUNDLE
    assert render.main([f"{recipe}:override_stp_1p2d_tp8", "--out", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "give MODEL=<org/name> (the recipe states no identity.model.repo), IMAGE=<image>" in out
    assert 'CONC="<c1> <c2> ..."' in out


def test_a_recipe_whose_router_sets_what_the_launch_decides_is_refused(checkout, newest):
    """The router's address and the workers it fronts are the launch's: a recipe's frontend naming one is
    refused at lint, naming it."""
    bundle = checkout / srt_recipe.MULTI_NODE_TREE / "dsr1/sglang/mi355x-fp8/8k1k/disagg-variants.yaml"
    raw = yaml.safe_load(bundle.read_text())
    raw["base"]["frontend"]["args"]["port"] = 8080
    bundle.write_text(yaml.safe_dump(raw, sort_keys=False))
    found = _lint(checkout, _entry(newest))
    assert any("'s frontend sets ['port'], which the launch decides" in message for message in found), found
