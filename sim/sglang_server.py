"""HTTP side of the simulated SGLang server: its routes on the shared completion path (sim.server.Api),
the prefill's bootstrap server, warm-up, and the process lifecycle (sim.server.lifecycle)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
import threading
import time
from typing import Any

import httpx
import msgspec

from sim import mori, openai, settings, sglang_pd
from sim.config import StartupError
from sim.engine import HTTPError, Job, announce_fault
from sim.metrics import Metrics
from sim.server import METRICS, Api, bind, event_loop_runner, lifecycle, respond, uvicorn_server
from sim.sglang_config import VERSION, SGLangConfig
from sim.sglang_engine import SCHEMA, SGLangEngine

log = logging.getLogger("sim.sglang")
_encode = msgspec.json.Encoder().encode
READY = "The server is fired up and ready to roll!"  # what SGLang logs once it serves
COMPLETIONS = ("/v1/chat/completions", "/v1/completions")


class SGLangApi(Api):
    """SGLang's HTTP routes (sglang/srt/entrypoints/http_server.py) over the simulated engine."""

    dialect = "sglang"

    def __init__(self, engine: SGLangEngine, config: SGLangConfig) -> None:
        super().__init__(engine, config)  # type: ignore[arg-type]
        self.engine: SGLangEngine = engine  # type: ignore[assignment]  # Api's is typed as vLLM's Engine
        self.config: SGLangConfig = config  # type: ignore[assignment]
        self.up = False  # Starting until warm-up is done (or skipped): /health answers 503
        info = {**config.server_args, "version": VERSION}
        info["internal_states"] = [
            {"attention_backend": config.attention_backend, "cuda_graph": config.cuda_graph}
        ]
        model_info = {
            "model_path": config.model,
            "tokenizer_path": config.server_args["tokenizer_path"],
            "is_generation": True,
            "preferred_sampling_params": None,
            "weight_version": "default",
        }
        self.info = {
            "/get_server_info": _encode(info),
            "/get_model_info": _encode(model_info),
            "/version": _encode({"version": VERSION}),
            "/v1/models": self.models,
        }

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return
        path, method = scope["path"], scope["method"]
        if path == "/health":
            return await respond(send, 200 if self.up else 503, headers=[])
        if path == "/health_generate":
            return await respond(send, await self._health_generate(), headers=[])
        if path == "/metrics" and self.config.enable_metrics:
            return await respond(send, 200, self.engine.metrics.render().encode(), METRICS)
        if path == "/flush_cache":
            return await self._flush_cache(send)
        if path not in self.info and path not in COMPLETIONS:
            return await respond(send, 404, b'{"detail":"Not Found"}')
        if self.auth and dict(scope["headers"]).get(b"authorization") not in self.auth:
            return await respond(send, 401, b'{"error":"Unauthorized"}')
        if path in self.info:
            if method != "GET":
                return await self._not_allowed(send)
            return await respond(send, 200, self.info[path])
        if method != "POST":
            return await self._not_allowed(send)
        await self._completion(path, receive, send)

    async def _flush_cache(self, send) -> None:
        """Empties the radix cache, as SGLang's /flush_cache (GET or POST): refused (400) while a request is
        running or waiting."""
        if self.engine.running or self.engine.waiting:
            text = b"Cache not flushed. There are running or waiting requests.\n"
            return await respond(send, 400, text, headers=[(b"content-type", b"text/plain")])
        if self.engine.hbm is not None:
            self.engine.hbm.clear()
        text = (
            b"Cache flushed.\nPlease check backend logs for more details. (When there are running or waiting "
            b"requests, the operation will not be performed.)\n"
        )
        return await respond(send, 200, text, headers=[(b"content-type", b"text/plain")])

    async def _health_generate(self) -> int:
        """A one-token generation in real SGLang: 503 while starting, and when no output comes within
        SGLANG_HEALTH_CHECK_TIMEOUT (a stalled scheduler)."""
        if not self.up:
            return 503
        if not self.engine.stalled:
            return 200
        await asyncio.sleep(self.engine.env.health_check_timeout_s)
        return 503 if self.engine.stalled else 200

    def _error_body(self, exc: HTTPError, *, streamed: bool = False) -> dict[str, Any]:
        body = openai.sglang_error(exc.status, exc.message, param=exc.param)
        return {"error": body} if streamed else body

    def _ids(self, job: Job) -> tuple[str, int]:
        return job.request_id, int(time.time())  # SGLang's response id is the request id itself

    def _usage(self, job: Job, completion: int) -> dict[str, Any]:
        return openai.usage(
            prompt=len(job.tokens),
            completion=completion * job.n,
            cached=job.local_hit,
            details=self.config.prompt_tokens_details,
            dialect="sglang",
        )

    async def warm_up(self) -> None:
        """SGLang sends one request through the engine before it reports Up, unless --skip-server-warmup."""
        if not self.config.skip_warmup:
            await asyncio.sleep(self.engine.env.prefill_s_per_token * 8 + self.engine.env.decode_s_per_token)
        self.up = True
        log.info("%s", READY)


def run(config: SGLangConfig) -> int:
    """Start-up checks, then serve until SIGTERM/SIGINT (exit 0) or an injected fault."""
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="[%(asctime)s] %(message)s", datefmt="%Y-%m-%d %H:%M:%S"
    )
    role = {"null": "plain"}.get(config.mode, config.mode)
    try:
        env = settings.load(role=role, host=config.host, engine="sglang")
        if env.faults.crash_at_start:
            log.error("SIM_FAULT crash-at-start: RuntimeError: Scheduler initialization failed.")
            announce_fault("crash-at-start")
            return 1
        if env.faults.gpus_lost:  # what PyTorch says on a ROCm node whose GPUs are gone (vLLM #34573)
            log.error("SIM_FAULT gpus-lost: RuntimeError: No HIP GPUs are available")
            announce_fault("gpus-lost")
            return 1
        if config.mode != "null" and config.transfer_backend == "mori":
            aborted = mori.start(config.ib_devices, os.environ)
            if aborted is not None:
                return aborted
            if env.faults.rdma_register_fails:  # the KV pool's registration: logged, then a hang
                print(mori.REGISTER_FAILED, file=sys.stderr, flush=True)
                announce_fault("rdma-register-fails")
                threading.Event().wait()
        elif env.faults.rdma_register_fails:
            raise settings.SettingsError("SIM_FAULT rdma-register-fails is MoRI's: run it with mori")
        if config.ib_devices:
            log.warning(
                "--disaggregation-ib-device %s: no RDMA here, the simulated KV moves over HTTP",
                ",".join(config.ib_devices),
            )
        api_sock = bind(config.host, config.port)
        boot_sock = bind(config.host, config.bootstrap_port) if config.mode == "prefill" else None
    except (OSError, settings.SettingsError, StartupError) as exc:
        print(f"ERROR [sim sglang] {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    log.info(
        "simulated SGLang %s (disaggregation_mode=%s) for %s, attention_backend=%s, cuda_graph=%s",
        VERSION,
        config.mode,
        config.served_names[0],
        config.attention_backend,
        config.cuda_graph,
    )
    return event_loop_runner()(_serve(config, env, api_sock, boot_sock))


async def _serve(config: SGLangConfig, env: settings.Settings, api_sock, boot_sock) -> int:
    metrics = Metrics(config.served_names[0], SCHEMA)
    limits = httpx.Limits(max_connections=1024, max_keepalive_connections=256)
    async with httpx.AsyncClient(limits=limits) as client:
        rooms = receiver = None
        servers, background = [], []
        if boot_sock is not None:
            rooms = sglang_pd.Rooms(keep_s=env.bootstrap_timeout_s, metrics=metrics)
            info = sglang_pd.prefill_info(
                tp=config.tensor_parallel,
                pp=config.pipeline_parallel,
                page_size=config.page_size,
                http_port=config.port,
            )
            host, port = boot_sock.getsockname()[:2]
            ranks = sglang_pd.rank_table(
                host=host, base_port=port, tp=config.tensor_parallel, pp=config.pipeline_parallel
            )
            servers.append(uvicorn_server(sglang_pd.bootstrap_app(rooms, info, ranks), boot_sock))
            background.append(_sweep(rooms))
            log.info("CommonKVBootstrapServer started successfully on %s:%d", host, port)
        if config.mode == "decode":
            me = "{}:{}".format(*api_sock.getsockname()[:2])
            receiver = sglang_pd.Receiver(client, wait_s=env.kv_wait_s, me=me)
        engine = SGLangEngine(config, env, rooms=rooms, receiver=receiver, metrics=metrics)
        app = SGLangApi(engine, config)
        warm_ups: list[asyncio.Task] = []
        banner = "Uvicorn running on http://%s:%d (Press CTRL+C to quit)"
        code = await lifecycle(
            servers,
            uvicorn_server(app, api_sock),
            env,
            background,
            banner=banner,
            on_listen=lambda: warm_ups.append(asyncio.ensure_future(app.warm_up())),
        )
        for task in warm_ups:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        return code


async def _sweep(rooms: sglang_pd.Rooms) -> None:
    while True:
        await asyncio.sleep(1.0)
        rooms.expire()
