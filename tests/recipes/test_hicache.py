"""InferenceX's agentic SGLang entry as it is (its AgentX recipe, HiCache on prefill, MTP acceptance simulated
at the model's golden length, its router, the trace set it picks), and HiCache sized from the DRAM budget
for a model that takes an absolute size."""

from __future__ import annotations

import dataclasses

import pytest

from recipes import parity, render

KEY = "dsv4-fp4-mi355x-sglang-disagg-agentic-hicache-mtp"
MODEL = "deepseek-ai/DeepSeek-V4-Pro"


def _words(argv) -> list[str]:
    return ["".join(p if isinstance(p, str) else f"${{{p.var}}}" for p in w) for w in argv]


def test_hicache_runs_on_prefill_only_sized_by_ratio_for_deepseek_v4(inferencex_rendered):
    side = parity.ours(inferencex_rendered["agentic_p1x8_d1x8_mtp_conc64"].plan)
    prefill, decode = side["engine-args"]["prefill"], side["engine-args"]["decode"]
    # as InferenceX's agentic launcher exports them (its HICACHE_*: the recorded chain shows them)
    assert prefill["--enable-hierarchical-cache"] is True and prefill["--hicache-ratio"] == "3.0"
    assert (prefill["--hicache-mem-layout"], prefill["--hicache-io-backend"]) == ("page_first", "direct")
    assert prefill["--hicache-storage-prefetch-policy"] == "best_effort"
    assert "--hicache-size" not in prefill and "--enable-hierarchical-cache" not in decode
    assert "--disable-radix-cache" not in prefill  # HiCache extends the radix cache
    # the model's agentic recipe (InferenceX's AgentX block), not its fixed-length one
    assert prefill["--context-length"] == decode["--context-length"] == "1048576"
    assert prefill["--chunked-prefill-size"] == "8192" and prefill["--disable-cuda-graph"] is True
    env = inferencex_rendered["agentic_p1x8_d1x8_mtp_conc64"].files["env.sh"]
    assert "HiCache on prefill: host pool = HICACHE_RATIO 3.0 x the GPU KV" in env
    assert "export MORI_IO_SQ_BACKOFF_TIMEOUT_US=500000\n" in env


def test_agentic_mtp_simulates_the_golden_acceptance_on_decode_and_says_so(inferencex_rendered):
    r = inferencex_rendered["agentic_p1xdep8_d1xdep8_mtp_conc192"]
    env = parity.ours(r.plan)["engine-env"]
    assert env["decode"]["SGLANG_SIMULATE_ACC_LEN"] == "2.49"  # DECODE_MTP_SIZE=3
    assert env["decode"]["SGLANG_SIMULATE_ACC_METHOD"] == "match-expected"
    assert "SGLANG_SIMULATE_ACC_LEN" not in env["prefill"]
    assert r.plan.caveats == (
        "MTP acceptance simulated at the model's golden length 2.49 (3 draft steps), not measured: compare "
        "only with runs that simulate the same",
    )
    assert parity.ours(r.plan)["engine-args"]["prefill"]["--enable-prefill-delayer"] is True  # its DP block


def test_the_router_and_client_run_as_inferencex_s_agentic_launch(inferencex_rendered):
    plan = inferencex_rendered["agentic_p1x8_d1x8_mtp_conc64"].plan
    router = parity.flag_map(_words(plan.router.argv))
    assert router["--policy"] == "consistent_hashing" and router["--dp-aware"] is True
    assert router["--disable-circuit-breaker"] is True and router["--health-failure-threshold"] == "100"
    client = parity.flag_map(_words(plan.benchmarks[0].argv))
    # no WEKA_LOADER_OVERRIDE: the runner's default set for a 1M-token model
    assert client["--public-dataset"] == "semianalysis_cc_traces_weka_062126"
    # the pinned client's scenario lock forbids the per-trajectory idle cap InferenceX's own AIPerf takes
    assert "--trace-idle-gap-cap-seconds" not in client and client["--warmup-grace-period"] == "1800"
    env = inferencex_rendered["agentic_p1x8_d1x8_mtp_conc64"].files["env.sh"]
    assert (
        "# CLIENT_IMAGE=lmsysorg/sglang-rocm:v0.5.15.post1-rocm720-mi35x-20260719 (prefill): not used;" in env
    )
    for b in plan.benchmarks:  # every concurrency starts cold: both engines' caches emptied first
        flush = _words(b.before)
        assert flush[2:3] == ["flush-caches"] and flush.count("--url") == 2
        assert flush[-2:] == ["--timeout", "120"]
    components = dict(plan.components)
    assert components["sglang-router"] == "as in lmsysorg/sglang-rocm:v0.5.17-rocm720-mi35x-20260817"


def _with_agentic_recipe(loaded, **changes):
    facts = loaded.models.models[MODEL]
    amd = facts.engines["sglang"]["amd"]
    agentic = amd.agentic.model_copy(update=changes)
    engines = {
        **facts.engines,
        "sglang": {**facts.engines["sglang"], "amd": amd.model_copy(update={"agentic": agentic})},
    }
    models = loaded.models.model_copy(
        update={"models": {**loaded.models.models, MODEL: facts.model_copy(update={"engines": engines})}}
    )
    return dataclasses.replace(loaded, models=models)


def test_hicache_sized_from_the_dram_budget_for_a_model_that_takes_a_size(inferencex_loaded):
    """The prefill server's DRAM budget (the runner's DRAM x 0.80 x 8/8 GPUs) over its 8 ranks on the node."""
    sized = _with_agentic_recipe(inferencex_loaded, hicache_sizing="size")
    r = next(x for x in render.render_config(KEY, sized) if x.plan.variant == "agentic_p1x8_d1x8_mtp_conc64")
    prefill = parity.ours(r.plan)["engine-args"]["prefill"]
    budget = r.plan.dram_budget
    assert prefill["--hicache-size"] == str(budget.budget_gb // 8) and "--hicache-ratio" not in prefill
    assert (
        f"over its 8 ranks on the node: --hicache-size {budget.budget_gb // 8} (GB a rank)"
        in r.files["env.sh"]
    )


def test_a_step_count_the_model_states_no_acceptance_for_is_refused(inferencex_loaded):
    sparse = _with_agentic_recipe(inferencex_loaded, mtp_acceptance={1: 1.79})
    with pytest.raises(render.RenderError) as exc:
        render.render_config(KEY, sparse)
    said = exc.value.findings[0].message
    assert "agentic MTP with 3 draft steps" in said and "for [1] steps only" in said


def test_hicache_over_a_recipe_without_the_radix_cache_is_refused(inferencex_loaded):
    amd = inferencex_loaded.models.models[MODEL].engines["sglang"]["amd"]
    off = _with_agentic_recipe(
        inferencex_loaded, prefill_args=[*amd.agentic.prefill_args, "--disable-radix-cache"]
    )
    with pytest.raises(render.RenderError) as exc:
        render.render_config(KEY, off)
    assert "hicache extends SGLang's radix cache" in exc.value.findings[0].message
