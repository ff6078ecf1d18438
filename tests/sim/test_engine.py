"""The engine in process: PD legs against a prefill's bootstrap app, KV accounting, failures, L2, shapes."""

from __future__ import annotations

import json
import re
from dataclasses import replace

import pytest

from sim.engine import first_token_stops
from sim.metrics import total

from .inproc import BOOT, DECODE_KV, FAST, PREFILL_KV, multi_kv, node, pd_pair, run, serve_config

XFER = "xfer-" + "0f" * 16
WORDS = " ".join(f"word{i}" for i in range(40))
MESSAGES = [{"role": "user", "content": WORDS}]
PROMPT = 42  # <|user|> + 40 words + <|assistant|>


def prefill_leg(**changes):
    body = {
        "model": "m",
        "messages": MESSAGES,
        "stream": False,
        "max_tokens": 1,
        "min_tokens": 1,
        "ignore_eos": True,
        "kv_transfer_params": {"do_remote_decode": True, "do_remote_prefill": False, "transfer_id": XFER},
    }
    return {**body, **changes}


def decode_leg(**kv):
    params = {
        "do_remote_decode": False,
        "do_remote_prefill": True,
        "transfer_id": XFER,
        "remote_engine_id": "engine-p",
        "remote_bootstrap_addr": BOOT,
        **kv,
    }
    return {
        "model": "m",
        "messages": MESSAGES,
        "max_tokens": 4,
        "stream": True,
        "stream_options": {"include_usage": True},
        "kv_transfer_params": params,
    }


def whole(body):
    """The same leg, not streamed."""
    return {**body, "stream": False, "stream_options": None}


def sse_events(text: str) -> list:
    assert text.endswith("data: [DONE]\n\n")
    return [json.loads(line[6:]) for line in text.split("\n\n") if line.startswith("data: {")]


def test_pd_request_loads_kv_remotely_instead_of_recomputing():
    async def scenario():
        prefill, decode = pd_pair()
        first = await prefill.post("/v1/chat/completions", prefill_leg())
        assert first.status_code == 200, first.text
        assert first.json()["kv_transfer_params"] is None
        assert first.json()["choices"][0]["finish_reason"] == "length"
        second = await decode.post("/v1/chat/completions", decode_leg())
        return first, second, await prefill.metrics(), await decode.metrics()

    _, answer, p, d = run(scenario())
    events = sse_events(answer.text)
    text = "".join(e["choices"][0]["delta"].get("content", "") for e in events if e["choices"])
    assert re.fullmatch(r"w0-\d{3} w1-\d{3} w2-\d{3} w3-\d{3}", text)  # an answer of its prompt
    assert events[-1]["usage"] == {
        "prompt_tokens": PROMPT,
        "total_tokens": PROMPT + 4,
        "completion_tokens": 4,
        "prompt_tokens_details": None,
    }
    assert total(d, "vllm:prompt_tokens_by_source_total", source="external_kv_transfer") == PROMPT
    # vLLM recomputes the last prompt token when every token is cached
    assert total(d, "vllm:prompt_tokens_by_source_total", source="local_compute") == 1
    assert total(d, "vllm:prompt_tokens_recomputed_total") == 1
    assert total(d, "vllm:external_prefix_cache_hits_total") == PROMPT
    assert total(d, "sim_kv_remote_loads_total", outcome="ok") == 1
    assert total(d, "sim_kv_remote_loads_total", outcome="recomputed") == 0
    assert total(p, "sim_kv_transfers_total", fate="kept") == 1
    assert total(p, "sim_kv_transfers_total", fate="pulled") == 1
    assert total(p, "vllm:prompt_tokens_by_source_total", source="local_compute") == PROMPT


def test_a_transfer_is_pulled_once():
    async def scenario():
        prefill, decode = pd_pair()
        await prefill.post("/v1/chat/completions", prefill_leg())
        await decode.post("/v1/chat/completions", decode_leg())
        return await decode.post("/v1/chat/completions", whole(decode_leg()))

    again = run(scenario())
    assert again.status_code == 500 and "KV cache load failed" in again.json()["error"]["message"]


@pytest.mark.parametrize(
    "policy, status, outcome", [("fail", 500, "failed"), ("recompute", 200, "recomputed")]
)
def test_missing_transfer_follows_kv_load_failure_policy(policy, status, outcome):
    async def scenario():
        _, decode = pd_pair(decode_kv={**DECODE_KV, "kv_load_failure_policy": policy})
        body = whole(decode_leg())
        return await decode.post("/v1/chat/completions", body), await decode.metrics()

    answer, d = run(scenario())
    assert answer.status_code == status, answer.text
    assert total(d, "sim_kv_remote_loads_total", outcome=outcome, reason="timeout") == 1
    assert total(d, "vllm:prompt_tokens_by_source_total", source="external_kv_transfer") == 0
    if policy == "recompute":
        assert total(d, "vllm:prompt_tokens_by_source_total", source="local_compute") == PROMPT


def test_streamed_decode_reports_a_failed_load_as_an_error_event():
    async def scenario():
        _, decode = pd_pair()
        return await decode.post("/v1/chat/completions", decode_leg())

    answer = run(scenario())
    assert answer.status_code == 200
    [event] = sse_events(answer.text)
    assert event["error"]["code"] == 500 and "not available" in event["error"]["message"]


@pytest.mark.parametrize(
    "changes",
    [
        {"stop": ["\n"], "min_tokens": 0},
        {"ignore_eos": False, "min_tokens": 0},
        {"min_tokens": None, "ignore_eos": None},
    ],
)
def test_first_token_stop_drops_the_transfer(changes):
    async def scenario():
        prefill, decode = pd_pair()
        body = {k: v for k, v in prefill_leg(**changes).items() if v is not None}
        first = await prefill.post("/v1/chat/completions", body)
        second = await decode.post("/v1/chat/completions", whole(decode_leg()))
        return first, second, await prefill.metrics()

    first, second, p = run(scenario())
    assert first.json()["choices"][0]["finish_reason"] == "stop"
    assert second.status_code == 500
    assert total(p, "sim_kv_transfers_total", fate="dropped") == 1


def test_first_token_stop_rule():
    assert not first_token_stops({"min_tokens": 1, "stop": ["x"], "ignore_eos": False})
    assert not first_token_stops({"ignore_eos": True})
    assert first_token_stops({"ignore_eos": True, "stop_token_ids": [2]})
    assert first_token_stops({})


def test_stale_engine_id_is_a_load_failure_not_a_400():
    async def scenario():
        prefill, decode = pd_pair(decode_kv={**DECODE_KV, "kv_load_failure_policy": "recompute"})
        await prefill.post("/v1/chat/completions", prefill_leg())
        body = whole(decode_leg(remote_engine_id="engine-old"))
        return await decode.post("/v1/chat/completions", body), await decode.metrics()

    answer, d = run(scenario())
    assert answer.status_code == 200
    assert total(d, "sim_kv_remote_loads_total", outcome="recomputed", reason="engine-mismatch") == 1
    assert total(d, "sim_contract_violations_total", rule="decode-engine-mismatch") == 1


@pytest.mark.parametrize(
    "leg, body, rule",
    [
        ("prefill", prefill_leg(stream=True), "prefill-stream"),
        ("prefill", prefill_leg(max_tokens=8), "prefill-max-tokens"),
        ("prefill", prefill_leg(min_tokens=2), "must be less than or equal to max_tokens=1, got 2"),
        ("prefill", prefill_leg(kv_transfer_params={"do_remote_decode": True}), "Missing transfer_id"),
        ("prefill", prefill_leg(stream_options={"include_usage": True}), "stream-options"),
        ("decode", decode_leg(remote_bootstrap_addr="10.0.0.1:8998"), "decode-bootstrap-addr"),
        ("decode", decode_leg(transfer_id=None), "decode-transfer-id"),
        ("decode", decode_leg(remote_engine_id=None), "decode-remote-engine-id"),
    ],
)
def test_contract_rejections_are_400_with_the_rule(leg, body, rule):
    async def scenario():
        prefill, decode = pd_pair()
        return await (prefill if leg == "prefill" else decode).post("/v1/chat/completions", body)

    answer = run(scenario())
    assert answer.status_code == 400 and rule in answer.json()["error"]["message"]
    assert answer.json()["error"]["type"] == "BadRequestError"


def test_hazards_are_served_and_counted():
    async def scenario():
        prefill, decode = pd_pair()
        first = await prefill.post("/v1/chat/completions", prefill_leg(stop=["x"], ignore_eos=False))
        plain = await decode.post("/v1/chat/completions", {"messages": MESSAGES, "max_tokens": 2})
        return first, plain, await prefill.metrics(), await decode.metrics()

    first, plain, p, d = run(scenario())
    assert first.status_code == plain.status_code == 200
    assert total(p, "sim_contract_violations_total", rule="prefill-stop", rejects="false") == 1
    assert total(d, "sim_contract_violations_total", rule="decode-kv-params", rejects="false") == 1
    assert total(d, "vllm:prompt_tokens_by_source_total", source="local_compute") == PROMPT


def test_local_prefix_cache_hits_on_a_repeated_prompt():
    async def scenario():
        plain = node(serve_config(None))
        for _ in range(2):
            await plain.post("/v1/completions", {"prompt": WORDS, "max_tokens": 1})
        return await plain.metrics()

    m = run(scenario())
    assert total(m, "vllm:prefix_cache_queries_total") == 80
    assert total(m, "vllm:prefix_cache_hits_total") == 39  # at most prompt - 1, block size 1
    assert total(m, "vllm:prompt_tokens_by_source_total", source="local_compute") == 41


def test_a_cache_salt_keeps_a_request_s_blocks_its_own():
    """vLLM salts a request's block hashes with its cache_salt (LMCache keys by it too): the same prompt
    under another salt hits nothing, under the same salt all but its last token."""

    async def scenario():
        plain = node(serve_config(None))
        for salt in ("a", "b", "b"):
            await plain.post("/v1/completions", {"prompt": WORDS, "max_tokens": 1, "cache_salt": salt})
        return await plain.metrics()

    assert total(run(scenario()), "vllm:prefix_cache_hits_total") == 39  # the third request's only


def test_l2_keys_by_the_cache_salt():
    env = replace(FAST, hbm_cache_tokens=0)  # no local cache room: every reuse would come from L2

    async def scenario():
        prefill = node(serve_config(multi_kv()), env, l2=True)
        for salt in ("a", "b"):
            body = prefill_leg(
                cache_salt=salt,
                kv_transfer_params={
                    "do_remote_decode": True,
                    "do_remote_prefill": False,
                    "transfer_id": XFER,
                },
            )
            await prefill.post("/v1/chat/completions", body)
        return await prefill.metrics()

    assert total(run(scenario()), "vllm:external_prefix_cache_hits_total") == 0


def test_num_gpu_blocks_override_sizes_the_local_cache():
    """--num-gpu-blocks-override 20 at block size 1: 20 tokens of room, so a 40-token prompt is evicted
    by its own tail and a repeat hits nothing (SIM_HBM_CACHE_TOKENS would have held it)."""

    async def scenario():
        plain = node(serve_config(None, gpu_blocks=20))
        for _ in range(2):
            await plain.post("/v1/completions", {"prompt": WORDS, "max_tokens": 1})
        return await plain.metrics()

    m = run(scenario())
    assert total(m, "vllm:prefix_cache_hits_total") == 0
    assert total(m, "vllm:prompt_tokens_by_source_total", source="local_compute") == 80


def test_l2_serves_prefix_chunks_the_local_cache_evicted():
    env = replace(FAST, hbm_cache_tokens=0)  # no local cache room: every reuse comes from L2

    async def scenario():
        prefill = node(serve_config(multi_kv()), env, l2=True)
        stats = []
        for _ in range(2):
            body = prefill_leg(
                kv_transfer_params={
                    "do_remote_decode": True,
                    "do_remote_prefill": False,
                    "transfer_id": XFER,
                    "cached_token_stats": True,
                }
            )
            stats.append((await prefill.post("/v1/chat/completions", body)).json()["kv_transfer_params"])
        return stats, await prefill.metrics()

    stats, m = run(scenario())
    assert stats[0] == {"cached_token_stats": {"num_vllm_cached_tokens": 0, "num_lmcache_cached_tokens": 0}}
    assert stats[1] == {"cached_token_stats": {"num_vllm_cached_tokens": 0, "num_lmcache_cached_tokens": 40}}
    assert total(m, "sim_l2_hit_tokens_total") == 40 and total(m, "sim_l2_hits_total") == 1
    assert total(m, "vllm:external_prefix_cache_hits_total") == 40


@pytest.mark.parametrize(
    "body, status, text",
    [
        ({"model": "other", "messages": MESSAGES}, 404, "does not exist"),
        ({"messages": MESSAGES, "max_tokens": 5000}, 400, "maximum context length is 4096"),
        ({"messages": [{"role": "robot", "content": "x"}]}, 400, "role"),
        ({"messages": MESSAGES, "stream_options": {"include_usage": True}}, 400, "Stream options can only"),
        ({"messages": MESSAGES, "min_tokens": 3, "max_tokens": 2}, 400, "min_tokens"),
    ],
)
def test_openai_request_errors(body, status, text):
    answer = run(node(serve_config(None)).post("/v1/chat/completions", body))
    assert answer.status_code == status and text in answer.json()["error"]["message"]


def test_completions_stream_and_stop_string():
    async def scenario():
        plain = node(serve_config(None))
        return await plain.post(
            "/v1/completions", {"prompt": "a b", "max_tokens": 8, "stop": ["w3"], "stream": True}
        )

    events = sse_events(run(scenario()).text)
    pieces = [e["choices"][0]["text"] for e in events]
    assert [re.sub(r"-\d{3}$", "", p) for p in pieces] == ["w0", " w1", " w2", " "]
    assert events[-1]["choices"][0]["finish_reason"] == "stop"
    assert all(e["object"] == "text_completion" for e in events)


def test_models_lists_the_served_names_and_health_is_empty():
    async def scenario():
        plain = node(serve_config(PREFILL_KV, served_names=("a", "b")))
        return (await plain.client.get("/v1/models")).json(), (await plain.client.get("/health"))

    models, health = run(scenario())
    assert [m["id"] for m in models["data"]] == ["a", "b"] and models["data"][0]["owned_by"] == "vllm"
    assert health.status_code == 200 and health.content == b""
