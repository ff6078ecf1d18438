"""In-process prefill/decode simulator pairs wired through httpx.ASGITransport (no sockets, no sleeps)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import httpx

from sim import kvconfig, mooncake
from sim.config import ServeConfig
from sim.engine import Engine
from sim.lmcache import L2
from sim.metrics import Metrics, parse
from sim.server import Api
from sim.settings import Settings

BOOT = "http://10.0.0.1:8998"
FAST = Settings(prefill_s_per_token=0.0, decode_s_per_token=0.0, kv_s_per_token=0.0, kv_wait_s=0.2)
PREFILL_KV = {
    "kv_connector": "MooncakeConnector",
    "kv_role": "kv_producer",
    "kv_load_failure_policy": "recompute",
    "kv_connector_extra_config": {"mooncake_protocol": "tcp", "num_workers": 10},
}
DECODE_KV = {
    "kv_connector": "MooncakeConnector",
    "kv_role": "kv_consumer",
    "kv_load_failure_policy": "fail",
    "kv_connector_extra_config": {"mooncake_protocol": "tcp", "num_workers": 10},
}
LMCACHE_CHILD = {
    "kv_connector": "LMCacheMPConnector",
    "kv_role": "kv_both",
    "kv_connector_module_path": kvconfig.LMCACHE_MODULE,
    "kv_connector_extra_config": {"lmcache.mp.host": "tcp://127.0.0.1", "lmcache.mp.port": 5555},
}


def multi_kv(*, lmcache: dict[str, Any] | None = None) -> dict[str, Any]:
    """The prefill MultiConnector config (docs/upstream-facts.md#multiconnector)."""
    extra = lmcache or LMCACHE_CHILD["kv_connector_extra_config"]
    child = dict(LMCACHE_CHILD, kv_connector_extra_config=extra)
    mooncake_child = {k: v for k, v in PREFILL_KV.items() if k != "kv_load_failure_policy"}
    return {
        "kv_connector": "MultiConnector",
        "kv_role": "kv_producer",
        "kv_load_failure_policy": "recompute",
        "kv_connector_extra_config": {"connectors": [mooncake_child, child]},
    }


def serve_config(kv: dict[str, Any] | None, **changes: Any) -> ServeConfig:
    base = ServeConfig(
        model="/m",
        model_path=Path("/m"),
        served_names=("m",),
        host=None,
        port=8000,
        tensor_parallel=8,
        pipeline_parallel=1,
        block_size=1,
        gpu_blocks=None,
        max_model_len=4096,
        max_num_seqs=64,
        prefix_caching=True,
        prompt_tokens_details=False,
        api_key=None,
        kv=kvconfig.resolve_connectors(kv),
    )
    return replace(base, **changes)


@dataclass
class Node:
    engine: Engine
    client: httpx.AsyncClient

    async def post(self, path: str, body: dict[str, Any], **kw: Any) -> httpx.Response:
        return await self.client.post(path, json=body, **kw)

    async def metrics(self) -> dict[str, float]:
        return parse((await self.client.get("/metrics")).text)


def node(
    config: ServeConfig,
    env: Settings = FAST,
    *,
    puller: mooncake.Puller | None = None,
    engine_id: str = "engine-p",
    l2: bool = False,
) -> Node:
    metrics = Metrics(config.served_names[0])
    transfers = (
        mooncake.Transfers(engine_id=engine_id, keep_s=env.kv_keep_s, metrics=metrics)
        if config.kv and config.kv.produces
        else None
    )
    store = (
        L2(config.kv.lmcache, chunk=4, capacity_tokens=10_000, metrics=metrics)
        if l2 and config.kv and config.kv.lmcache
        else None
    )
    engine = Engine(config, env, puller=puller, transfers=transfers, l2=store, metrics=metrics)
    client = httpx.AsyncClient(transport=httpx.ASGITransport(app=Api(engine, config)), base_url="http://sim")
    return Node(engine, client)


def pd_pair(
    *,
    prefill_kv: dict[str, Any] = PREFILL_KV,
    decode_kv: dict[str, Any] = DECODE_KV,
    env: Settings = FAST,
    l2: bool = False,
) -> tuple[Node, Node]:
    """A prefill and a decode; the decode reaches the prefill's bootstrap app at BOOT."""
    prefill = node(serve_config(prefill_kv), env, l2=l2)
    query = mooncake.query_payload(engine_id="engine-p", host="10.0.0.1", base_port=8998, tp=8, pp=1)
    boot_app = mooncake.bootstrap_app(prefill.engine.transfers, query)
    boot = httpx.AsyncClient(transport=httpx.ASGITransport(app=boot_app))
    decode = node(serve_config(decode_kv), env, puller=mooncake.Puller(boot, wait_s=env.kv_wait_s))
    return prefill, decode


def run(coro):
    return asyncio.run(coro)
