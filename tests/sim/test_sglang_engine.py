"""The simulated SGLang engine in process (httpx.ASGITransport, no sockets): PD legs as the sglang-router
sends them, the bootstrap-room refusal, transfer failures, single-node mode, metrics, the kv_indptr crash."""

from __future__ import annotations

import asyncio
import json
import logging
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import httpx
import pytest

from sim import sglang_pd
from sim.metrics import Metrics, parse, total
from sim.settings import Settings
from sim.sglang_cli import SGLangConfig
from sim.sglang_engine import SCHEMA, SGLangEngine
from sim.sglang_server import SGLangApi

from .conftest import free_port

FAST = Settings(
    prefill_s_per_token=0.0,
    decode_s_per_token=0.0,
    kv_s_per_token=0.0,
    kv_wait_s=10.0,  # a transfer that should succeed gets time on a loaded 2-core machine
    bootstrap_timeout_s=10.0,
    health_check_timeout_s=0.05,
)
SHORT_WAITS = replace(FAST, kv_wait_s=0.3, bootstrap_timeout_s=0.3)  # for the tests that wait one out
BASE = SGLangConfig(
    model="/m",
    model_path=Path("/m"),
    served_names=("openbmb/MiniCPM-SALA",),
    host="127.0.0.1",
    port=8000,
    tensor_parallel=8,
    pipeline_parallel=1,
    page_size=1,
    max_model_len=4096,
    max_running=32,
    radix_cache=False,
    prompt_tokens_details=False,
    api_key=None,
    mode="null",
    bootstrap_port=8998,
    transfer_backend="mooncake",
    ib_devices=(),
    attention_backend="minicpm_flashinfer",
    dense_as_sparse=True,
    cuda_graph=True,
    enable_metrics=True,
    skip_warmup=True,
    server_args={"tokenizer_path": "/m", "tp_size": 8, "disaggregation_mode": "null"},
)
WORDS = " ".join(f"t{i}" for i in range(40))
PROMPT = 42  # <|user|> + 40 words + <|assistant|>
BOOT = {"bootstrap_host": "10.0.0.1", "bootstrap_port": 8998}


@dataclass
class Node:
    engine: SGLangEngine
    api: SGLangApi
    client: httpx.AsyncClient

    async def post(self, body: dict[str, Any], path: str = "/v1/chat/completions") -> httpx.Response:
        return await self.client.post(path, json=body)

    async def metrics(self) -> dict[str, float]:
        return parse((await self.client.get("/metrics")).text)


def node(config: SGLangConfig, env: Settings = FAST, **kw: Any) -> Node:
    engine = SGLangEngine(config, env, metrics=Metrics(config.served_names[0], SCHEMA), **kw)
    api = SGLangApi(engine, config)
    api.up = True
    client = httpx.AsyncClient(transport=httpx.ASGITransport(app=api), base_url="http://sim")
    return Node(engine, api, client)


def pd_pair(env: Settings = FAST) -> tuple[Node, Node]:
    """A prefill and a decode; the decode reaches the prefill's bootstrap app whatever bootstrap_host says."""
    prefill_config = replace(BASE, mode="prefill", cuda_graph=False)
    rooms = sglang_pd.Rooms(keep_s=env.bootstrap_timeout_s, metrics=Metrics("m", SCHEMA))
    prefill = node(prefill_config, env, rooms=rooms)
    rooms.metrics = prefill.engine.metrics
    info = sglang_pd.prefill_info(tp=8, pp=1, page_size=1, http_port=8000)
    ranks = sglang_pd.rank_table(host="10.0.0.1", base_port=8998, tp=8, pp=1)
    boot = httpx.AsyncClient(transport=httpx.ASGITransport(app=sglang_pd.bootstrap_app(rooms, info, ranks)))
    receiver = sglang_pd.Receiver(boot, wait_s=env.kv_wait_s, me="10.0.0.2:8000")
    return prefill, node(replace(BASE, mode="decode"), env, receiver=receiver)


def chat(room: int | None = 7, *, stream: bool = False, tokens: int = 5, **extra: Any) -> dict[str, Any]:
    """A /v1/chat/completions body as sglang-router 0.3.2 sends it to both legs (seen running)."""
    body: dict[str, Any] = {
        "messages": [{"role": "user", "content": WORDS}],
        "model": "openbmb/MiniCPM-SALA",
        "max_completion_tokens": tokens,
        "stream": stream,
        "ignore_eos": True,
        **extra,
    }
    if stream:
        body["stream_options"] = {"include_usage": True}
    if room is not None:
        body.update(BOOT, bootstrap_room=room)
    return body


def events(text: str) -> list[Any]:
    out = []
    for block in text.split("\n\n"):
        if block.startswith("data: ") and block != "data: [DONE]":
            out.append(json.loads(block.removeprefix("data: ")))
    return out


def run(coro):
    return asyncio.run(coro)


def test_pd_legs_move_the_kv_and_stream_usage():
    async def scenario():
        prefill, decode = pd_pair()
        legs = await asyncio.gather(prefill.post(chat(11, stream=True)), decode.post(chat(11, stream=True)))
        return legs, await prefill.metrics(), await decode.metrics()

    (p_answer, d_answer), p, d = run(scenario())
    assert p_answer.status_code == d_answer.status_code == 200
    chunks = events(d_answer.text)
    assert d_answer.text.endswith("data: [DONE]\n\n")
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    assert re.fullmatch(r"w0-\d{3} w1-\d{3} w2-\d{3} w3-\d{3} w4-\d{3}", text)  # an answer of its prompt
    usage = chunks[-1]["usage"]
    assert (
        usage["prompt_tokens"] == PROMPT
        and usage["completion_tokens"] == 5
        and usage["reasoning_tokens"] == 0
    )
    assert [c["usage"]["completion_tokens"] for c in events(p_answer.text) if c.get("usage")] == [1]
    assert total(d, "sim_kv_remote_loads_total", outcome="ok") == 1
    assert total(d, "sim_kv_remote_load_tokens_total") == PROMPT
    assert (
        total(p, "sim_kv_transfers_total", fate="kept")
        == total(p, "sim_kv_transfers_total", fate="pulled")
        == 1
    )
    assert total(p, "sglang:prompt_tokens_total") == PROMPT
    assert total(d, "sglang:generation_tokens_total") == 5
    assert total(d, "sglang:num_transfer_failed_reqs_total") == 0


def test_concurrent_rooms_do_not_mix():
    async def scenario():
        prefill, decode = pd_pair()
        bodies = [chat(room, tokens=3) for room in range(20)]
        answers = await asyncio.gather(*(prefill.post(b) for b in bodies), *(decode.post(b) for b in bodies))
        return answers, await decode.metrics()

    answers, d = run(scenario())
    assert all(a.status_code == 200 for a in answers), [a.text for a in answers if a.status_code != 200]
    assert total(d, "sim_kv_remote_loads_total", outcome="ok") == 20


@pytest.mark.parametrize("mode", ["prefill", "decode"])
@pytest.mark.parametrize("stream", [False, True])
def test_a_request_without_bootstrap_room_is_refused(mode, stream):
    async def scenario():
        prefill, decode = pd_pair()
        target = prefill if mode == "prefill" else decode
        return await target.post(chat(None, stream=stream)), await target.metrics()

    answer, m = run(scenario())
    if stream:  # SGLang's scheduler refuses it: by then the stream has begun
        assert answer.status_code == 200
        [event] = events(answer.text)
        body = event["error"]
    else:
        assert answer.status_code == 400
        body = answer.json()
    assert body["object"] == "error" and body["code"] == 400
    assert body["message"].startswith(
        "Invalid request: Disaggregated request received without bootstrap room id. req.rid="
    )
    assert total(m, "sim_contract_violations_total", rule="bootstrap-room") == 1


def test_decode_whose_kv_never_arrives_fails_after_the_wait():
    async def scenario():
        _, decode = pd_pair(SHORT_WAITS)
        whole, streamed = await asyncio.gather(decode.post(chat(3)), decode.post(chat(4, stream=True)))
        return whole, streamed, await decode.metrics()

    whole, streamed, d = run(scenario())
    assert whole.status_code == 500
    message = whole.json()["message"]
    assert message.startswith("Decode transfer failed for request rank=0 decode_req.req.rid=")
    assert "timed out after 0.3s in KVPoll.WaitingForInput" in message
    [event] = events(streamed.text)
    assert streamed.status_code == 200 and event["error"]["code"] == 500
    assert total(d, "sglang:num_transfer_failed_reqs_total") == 2
    assert total(d, "sim_kv_remote_loads_total", outcome="failed", reason="timeout") == 2
    assert total(d, "sglang:num_aborted_requests_total") == 2


def test_prefill_without_a_decode_fails_its_bootstrap():
    async def scenario():
        prefill, _ = pd_pair(SHORT_WAITS)
        return await prefill.post(chat(5)), await prefill.metrics()

    answer, p = run(scenario())
    assert answer.status_code == 500
    assert answer.json()["message"].startswith("Prefill bootstrap failed for request rank=0 req.rid=")
    assert total(p, "sglang:num_bootstrap_failed_reqs_total") == 1
    assert total(p, "sglang:prompt_tokens_total") == 0


@pytest.mark.parametrize("boot", [{"bootstrap_host": "127.0.0.1"}, {"bootstrap_port": 8998}, "unreachable"])
def test_decode_handshake_fails_without_a_usable_bootstrap_server(boot):
    async def scenario():
        async with httpx.AsyncClient() as client:
            receiver = sglang_pd.Receiver(client, wait_s=0.3, me="127.0.0.1:1")
            decode = node(replace(BASE, mode="decode"), receiver=receiver)
            body = {k: v for k, v in chat(9).items() if k not in BOOT}
            body.update(
                {"bootstrap_host": "127.0.0.1", "bootstrap_port": free_port()}
                if boot == "unreachable"
                else boot
            )
            return await decode.post(body), await decode.metrics()

    answer, d = run(scenario())
    assert answer.status_code == 500 and answer.json()["message"].startswith("Decode handshake failed")
    assert total(d, "sglang:num_bootstrap_failed_reqs_total") == 1


def test_a_prefill_that_aborts_ends_the_decode_wait_at_once():
    async def scenario():
        prefill, decode = pd_pair(replace(FAST, kv_wait_s=5.0))
        prefill.engine.rooms.begin(8)
        prefill.engine.rooms.fail(8)  # what the prefill does when its leg ends without a transfer
        started = asyncio.get_running_loop().time()
        answer = await decode.post(chat(8))
        return answer, asyncio.get_running_loop().time() - started

    answer, seconds = run(scenario())
    assert answer.status_code == 500 and "aborted bootstrap room 8" in answer.json()["message"]
    assert seconds < 1


def test_single_node_serves_and_ignores_bootstrap_fields():
    async def scenario():
        single = node(BASE)
        plain, with_room = await single.post(chat(None)), await single.post(chat(3))
        completion = await single.post({"prompt": WORDS, "max_tokens": 3}, "/v1/completions")
        return plain, with_room, completion, await single.metrics()

    plain, with_room, completion, m = run(scenario())
    assert plain.status_code == with_room.status_code == completion.status_code == 200
    body = plain.json()
    assert body["object"] == "chat.completion" and body["choices"][0]["matched_stop"] is None
    assert body["usage"] == {
        "prompt_tokens": PROMPT,
        "total_tokens": PROMPT + 5,
        "completion_tokens": 5,
        "prompt_tokens_details": None,
        "reasoning_tokens": 0,
    }
    assert re.fullmatch(r"w0-\d{3} w1-\d{3} w2-\d{3}", completion.json()["choices"][0]["text"])
    assert total(m, "sglang:num_requests_total") == 3 and total(m, "sim_kv_remote_loads_total") == 0


@pytest.mark.parametrize(
    "body, message",
    [
        ({"messages": []}, "messages"),
        ({"messages": [{"role": "user", "content": "x"}], "max_tokens": 0}, "max_tokens must be positive"),
        (
            {"messages": [{"role": "user", "content": WORDS}], "max_tokens": 4060},
            "maximum context length of 4096",
        ),
    ],
)
def test_bad_requests_answer_400_in_sglang_shape(body, message):
    answer = run(node(BASE).post(body))
    assert answer.status_code == 400
    assert answer.json()["object"] == "error" and message in answer.json()["message"]


def test_server_info_model_info_and_models_for_the_router():
    async def scenario():
        single = node(BASE)
        return [
            (await single.client.get(p)).json() for p in ("/get_server_info", "/get_model_info", "/v1/models")
        ]

    info, model, models = run(scenario())
    assert info["tp_size"] == 8 and info["disaggregation_mode"] == "null" and "version" in info
    assert model["model_path"] == "/m" and model["is_generation"] is True
    assert models["data"][0]["id"] == "openbmb/MiniCPM-SALA" and models["data"][0]["owned_by"] == "sglang"


def test_health_and_metrics_routes():
    async def scenario():
        single = node(replace(BASE, enable_metrics=False))
        single.api.up = False
        starting = (await single.client.get("/health")).status_code
        await single.api.warm_up()
        return starting, (await single.client.get("/health")).status_code, await single.client.get("/metrics")

    starting, up, metrics = run(scenario())
    assert (starting, up, metrics.status_code) == (503, 200, 404)  # /metrics only with --enable-metrics


def send_n(single: Node, n: int, timeout: float = 2.0):
    return asyncio.wait_for(asyncio.gather(*(single.post(chat(None)) for _ in range(n))), timeout)


def test_kv_indptr_crash_stalls_the_engine_and_keeps_health_green(caplog):
    async def scenario():
        single = node(BASE, replace(FAST, kv_indptr_after=2))
        before = await send_n(single, 2)
        stuck = asyncio.ensure_future(send_n(single, 2, timeout=30))  # in flight when the engine breaks
        await asyncio.sleep(0.2)
        later = asyncio.ensure_future(single.post(chat(None)))
        await asyncio.sleep(0.2)
        state = (stuck.done(), later.done(), single.engine.wedged)
        health = (await single.client.get("/health")).status_code
        probe = (await single.client.get("/health_generate")).status_code
        stuck.cancel()
        later.cancel()
        await asyncio.gather(stuck, later, return_exceptions=True)
        return before, state, health, probe, await single.metrics()

    with caplog.at_level(logging.ERROR, logger="sim.sglang"):
        before, state, health, probe, m = run(scenario())
    assert [a.status_code for a in before] == [200, 200]
    assert state == (False, False, True)  # in-flight and new requests hang
    assert (health, probe) == (200, 503)  # /health stays green; SGLang's generation probe does not
    trace = caplog.text
    assert "Traceback (most recent call last)" in trace and "cuda_graph_runner.py" in trace
    [last] = [line for line in trace.splitlines() if "kv_indptr" in line]
    assert "kv_indptr[i+1] - kv_indptr[i] should be non-negative" in last
    assert total(m, "sim_faults_injected_total", kind="kv-indptr") == 1


@pytest.mark.parametrize(
    "changes", [{"cuda_graph": False}, {"attention_backend": "minicpm_flashattn"}, {"dense_as_sparse": False}]
)
def test_kv_indptr_crash_needs_all_of_its_triggers(changes):
    async def scenario():
        single = node(replace(BASE, **changes), replace(FAST, kv_indptr_after=1))
        answers = await send_n(single, 4)
        answers += await send_n(single, 2)
        return answers, single.engine.wedged

    answers, wedged = run(scenario())
    assert [a.status_code for a in answers] == [200] * 6 and not wedged


def test_in_pd_the_decode_crashes_and_the_prefill_keeps_serving():
    async def scenario():
        prefill, decode = pd_pair(replace(FAST, kv_indptr_after=0))
        done = await asyncio.gather(prefill.post(chat(1)), decode.post(chat(1, tokens=1)))  # no decode step
        p_leg = asyncio.ensure_future(prefill.post(chat(2)))
        d_leg = asyncio.ensure_future(decode.post(chat(2)))
        await asyncio.sleep(0.3)
        state = (p_leg.done(), d_leg.done(), prefill.engine.wedged, decode.engine.wedged)
        d_leg.cancel()
        await asyncio.gather(d_leg, return_exceptions=True)
        return done, (await p_leg).status_code, state

    done, prefill_status, state = run(scenario())
    assert [a.status_code for a in done] == [200, 200] and prefill_status == 200
    # a prefill server runs without CUDA graphs (SGLang turns them off): only the decode replays them
    assert state == (True, False, False, True)


def test_flush_cache_empties_the_radix_cache_and_refuses_while_requests_run():
    """SGLang's /flush_cache: 400 while a request runs or waits, else the prefix cache emptied, as the job's
    flush before each agentic concurrency reads it."""

    async def scenario():
        single = node(replace(BASE, radix_cache=True))
        await single.post(chat(None))
        filled = len(single.engine.hbm)
        single.engine.running = 1  # a request in flight
        busy = await single.client.post("/flush_cache")
        single.engine.running = 0
        flushed = await single.client.post("/flush_cache")
        return filled, busy, flushed, len(single.engine.hbm)

    filled, busy, flushed, left = run(scenario())
    assert busy.status_code == 400 and "Cache not flushed" in busy.text
    assert flushed.status_code == 200 and flushed.text.startswith("Cache flushed.")
    assert filled > 0 and left == 0
