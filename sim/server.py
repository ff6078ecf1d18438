"""HTTP side of the simulator: the OpenAI API app (raw ASGI) and the process lifecycle (start-up checks,
bootstrap server, model-load delay, signals, fault exits) on uvicorn.

`Api` serves vLLM's routes; its completion path (body, validation, whole or streamed answer, client
disconnect, fault exit) is shared with SGLang's app (sim.sglang_server), which changes routes and shapes
through `dialect`, `_error_body` and `_ids`. So are `bind`, `uvicorn_server` and `lifecycle`."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

import httpx
import msgspec
import uvicorn

from sim import lmcache, mooncake, openai, settings
from sim.config import VERSION, ServeConfig
from sim.engine import CHAT, Engine, HTTPError, Job, announce_fault
from sim.metrics import Metrics

log = logging.getLogger("sim.server")
ENDPOINTS = (CHAT, "/v1/completions")
JSON = [(b"content-type", b"application/json")]
SSE = [(b"content-type", b"text/event-stream; charset=utf-8"), (b"cache-control", b"no-cache")]
METRICS = [(b"content-type", b"text/plain; version=0.0.4; charset=utf-8")]
_decode = msgspec.json.Decoder().decode
_encode = msgspec.json.Encoder().encode


async def respond(send, status: int, body: bytes = b"", headers: list | None = None) -> None:
    length = [(b"content-length", str(len(body)).encode())]
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": (headers if headers is not None else JSON) + length,
        }
    )
    await send({"type": "http.response.body", "body": body})


async def read_body(receive) -> bytes | None:
    chunks = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            return b"".join(chunks)


async def _until_disconnect(receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


class Api:
    """The OpenAI-compatible app of one engine."""

    dialect = "vllm"

    def __init__(self, engine: Engine, config: ServeConfig) -> None:
        self.engine, self.config = engine, config
        self.model = config.served_names[0]
        self.models = _encode(
            openai.models_payload(
                names=config.served_names,
                root=str(config.model_path),
                max_model_len=config.max_model_len,
                created=int(time.time()),
                dialect=self.dialect,
            )
        )
        keys = (config.api_key,) if isinstance(config.api_key, str) else config.api_key or ()
        self.auth = frozenset(f"Bearer {key}".encode() for key in keys)

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return
        path, method = scope["path"], scope["method"]
        if path in ("/health", "/ping"):
            return await respond(send, 200, headers=[])
        if path == "/version":
            return await respond(send, 200, _encode({"version": VERSION}))
        if path == "/metrics":
            return await respond(send, 200, self.engine.metrics.render().encode(), METRICS)
        if path != "/v1/models" and path not in ENDPOINTS:
            return await respond(send, 404, b'{"detail":"Not Found"}')
        if self.auth and dict(scope["headers"]).get(b"authorization") not in self.auth:
            return await respond(send, 401, b'{"error":"Unauthorized"}')
        if path == "/v1/models" and method == "GET":
            return await respond(send, 200, self.models)
        if method != "POST" or path == "/v1/models":
            return await self._not_allowed(send)
        await self._completion(path, receive, send)

    async def _not_allowed(self, send) -> None:
        await respond(send, 405, b'{"detail":"Method Not Allowed"}')

    def _error_body(self, exc: HTTPError, *, streamed: bool = False) -> dict[str, Any]:
        return openai.error_body(exc.status, exc.message, param=exc.param)

    async def _error(self, send, exc: HTTPError) -> None:
        await respond(send, exc.status, _encode(self._error_body(exc)))

    async def _completion(self, path: str, receive, send) -> None:
        raw = await read_body(receive)
        if raw is None:
            return
        try:
            body = _decode(raw)
        except msgspec.DecodeError as exc:
            return await self._error(send, HTTPError(400, f"Invalid JSON body: {exc}"))
        try:
            if not isinstance(body, dict):
                raise HTTPError(400, "request body must be a JSON object")
            job = await self.engine.prepare(path, body)
        except HTTPError as exc:
            return await self._error(send, exc)
        work = asyncio.ensure_future(self._stream(job, send) if job.stream else self._whole(job, send))
        gone = asyncio.ensure_future(_until_disconnect(receive))
        done, _ = await asyncio.wait({work, gone}, return_when=asyncio.FIRST_COMPLETED)
        if work not in done:
            work.cancel()
        gone.cancel()
        with contextlib.suppress(asyncio.CancelledError, OSError):
            await work
        self._exit_if_due()

    def _ids(self, job: Job) -> tuple[str, int]:
        return ("chatcmpl-" if job.endpoint == CHAT else "cmpl-") + job.request_id, int(time.time())

    def _usage(self, job: Job, completion: int) -> dict[str, Any]:
        cached = job.local_hit + job.external
        return openai.usage(
            prompt=len(job.tokens),
            completion=completion * job.n,
            cached=cached,
            details=self.config.prompt_tokens_details,
            dialect=self.dialect,
        )

    async def _whole(self, job: Job, send) -> None:
        pieces: list[str] = []
        try:
            async for piece in self.engine.run(job):
                pieces.append(piece)
        except HTTPError as exc:
            return await self._error(send, exc)
        rid, created = self._ids(job)
        shape = openai.chat_response if job.endpoint == CHAT else openai.completion_response
        body = shape(
            rid=rid,
            created=created,
            model=self.model,
            text="".join(pieces),
            n=job.n,
            finish=job.finish_reason or "stop",
            use=self._usage(job, len(pieces)),
            kv_params=job.kv_response(),
            dialect=self.dialect,
        )
        if job.endpoint == CHAT and job.body.get("logprobs") is True:  # the chosen tokens, as vLLM lists them
            content = [
                {"token": p, "logprob": 0.0, "bytes": list(p.encode()), "top_logprobs": []} for p in pieces
            ]
            for choice in body["choices"]:
                choice["logprobs"] = {"content": content}
        await respond(send, 200, _encode(body))

    async def _stream(self, job: Job, send) -> None:
        rid, created = self._ids(job)
        chunks = openai.Chunks(
            chat=job.endpoint == CHAT, rid=rid, created=created, model=self.model, dialect=self.dialect
        )
        await send({"type": "http.response.start", "status": 200, "headers": SSE})
        out = [chunks.role(i) for i in range(job.n)] if job.endpoint == CHAT else []
        count = 0
        try:
            async for piece in self.engine.run(job):
                count += 1  # the engine sets finish_reason before yielding the last piece
                out += [chunks.piece(i, piece, job.finish_reason) for i in range(job.n)]
                await send({"type": "http.response.body", "body": b"".join(out), "more_body": True})
                out = []
            options = job.body.get("stream_options") or {}
            if options.get("include_usage"):
                out.append(chunks.usage(self._usage(job, count)))
        except HTTPError as exc:  # vLLM opens chat choices with the first output, so none yet
            out = [openai.sse(self._error_body(exc, streamed=True))]
        out.append(openai.DONE)
        await send({"type": "http.response.body", "body": b"".join(out)})

    def _exit_if_due(self) -> None:
        code = self.engine.exit_code
        if code is not None:
            logging.shutdown()
            announce_fault(self.engine.exit_reason or f"exit {code}")
            sys.stderr.flush()
            os._exit(code)


class _Server(uvicorn.Server):
    """uvicorn without its own signal handling: the process owns SIGTERM/SIGINT for both servers. It
    serves on `sim_sock`, bound before the model loads (bind)."""

    def __init__(self, config: uvicorn.Config, sock: socket.socket) -> None:
        super().__init__(config)
        self.sim_sock = sock

    @contextlib.contextmanager
    def capture_signals(self):
        yield


def bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise OSError(
            f"[Errno {exc.errno}] error while attempting to bind on address ({host!r}, {port}): "
            f"{exc.strerror}"
        ) from None
    return sock


def uvicorn_server(app, sock: socket.socket) -> _Server:
    config = uvicorn.Config(
        app,
        lifespan="off",
        access_log=False,
        log_level="warning",
        http="httptools",
        proxy_headers=False,
        timeout_graceful_shutdown=1,
        timeout_keep_alive=30,
    )
    return _Server(config, sock)


def run(config: ServeConfig) -> int:
    """Start-up checks, then serve until SIGTERM/SIGINT (exit 0) or an injected fault."""
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format="%(levelname)s %(asctime)s [%(name)s] %(message)s",
        datefmt="%m-%d %H:%M:%S",
    )
    kv = config.kv
    role = "prefill" if kv and kv.produces else "decode" if kv and kv.consumes else "plain"
    wildcard = config.host in (None, "", "0.0.0.0", "::")
    env = settings.load(role=role, host=os.environ.get("VLLM_HOST_IP") or config.host)
    try:
        boot_host = env.host_ip or ("0.0.0.0" if wildcard or config.host is None else config.host)
        return _start(config, env, role=role, boot_host=boot_host)
    except (OSError, ConnectionError, settings.SettingsError) as exc:
        log.error("%s: %s", type(exc).__name__, exc)
        return 1


def _start(config: ServeConfig, env: settings.Settings, *, role: str, boot_host: str) -> int:
    if env.faults.crash_at_start:
        log.error("SIM_FAULT crash-at-start: RuntimeError: Engine core initialization failed.")
        announce_fault("crash-at-start")
        return 1
    if env.faults.gpus_lost:  # what PyTorch says on a ROCm node whose GPUs are gone (vLLM #34573)
        log.error("SIM_FAULT gpus-lost: RuntimeError: No HIP GPUs are available")
        announce_fault("gpus-lost")
        return 1
    if env.faults.rdma_register_fails:
        raise settings.SettingsError("SIM_FAULT rdma-register-fails is MoRI's (the SGLang simulator's)")
    if env.faults.hang_at_start:  # a start that stalls: no log line, no CPU time, until it is killed
        announce_fault("hang-at-start")
        threading.Event().wait()
    for warning in config.kv.warnings if config.kv else ():
        log.warning("%s", warning)
    if config.kv and config.kv.lmcache:
        cfg = config.kv.lmcache
        log.info("connecting to LMCache MP server tcp://%s:%d", cfg.host, cfg.port)
        lmcache.wait_until_reachable(cfg)
    api_sock = bind(config.host or "0.0.0.0", config.port)
    boot_sock = bind(boot_host, env.bootstrap_port) if role == "prefill" else None
    log.info("simulated vLLM %s (%s) for %s", VERSION, role, config.served_names[0])
    runner = event_loop_runner()
    return runner(_serve(config, env, api_sock, boot_sock))


def event_loop_runner():
    try:
        import uvloop

        return uvloop.run
    except (ImportError, AttributeError):
        return asyncio.run


async def _serve(config: ServeConfig, env: settings.Settings, api_sock, boot_sock) -> int:
    metrics = Metrics(config.served_names[0])
    kv = config.kv
    limits = httpx.Limits(max_connections=1024, max_keepalive_connections=256)
    async with httpx.AsyncClient(limits=limits) as client:
        transfers = l2 = None
        servers: list[_Server] = []
        if boot_sock is not None:
            engine_id = mooncake.new_engine_id()
            transfers = mooncake.Transfers(engine_id=engine_id, keep_s=env.kv_keep_s, metrics=metrics)
            advertised = boot_sock.getsockname()[0] if env.host_ip is None else env.host_ip
            query = mooncake.query_payload(
                engine_id=engine_id,
                host=advertised,
                base_port=env.bootstrap_port,
                tp=config.tensor_parallel,
                pp=config.pipeline_parallel,
            )
            servers.append(uvicorn_server(mooncake.bootstrap_app(transfers, query), boot_sock))
            log.info(
                "Mooncake bootstrap server on %s:%d, engine_id %s", *boot_sock.getsockname()[:2], engine_id
            )
        if kv and kv.lmcache:
            l2 = lmcache.L2(
                kv.lmcache, chunk=env.l2_chunk_tokens, capacity_tokens=env.l2_capacity_tokens, metrics=metrics
            )
        puller = mooncake.Puller(client, wait_s=env.kv_wait_s) if kv and kv.consumes else None
        engine = Engine(config, env, puller=puller, transfers=transfers, l2=l2, metrics=metrics)
        background = [_sweep(transfers)] if transfers else []
        if l2 is not None:
            background.append(l2.heartbeat())
        api = uvicorn_server(Api(engine, config), api_sock)
        return await lifecycle(servers, api, env, background)


async def lifecycle(
    servers: list[_Server],
    api: _Server,
    env: settings.Settings,
    background: list[Coroutine[Any, Any, None]],
    *,
    banner: str = "Starting vLLM API server on http://%s:%d",
    on_listen: Callable[[], None] | None = None,
) -> int:
    """Serves `servers` (bootstrap) at once, `api` after the model-load delay, and runs `background` tasks;
    until SIGTERM/SIGINT (exit 0) or a server task ends on its own (exit 1)."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    tasks = [asyncio.ensure_future(s.serve(sockets=[s.sim_sock])) for s in servers]
    running = [asyncio.ensure_future(job) for job in background]
    if env.load_delay_s:
        log.info("loading model (SIM_LOAD_DELAY_S=%g)", env.load_delay_s)
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(stop.wait(), env.load_delay_s)
    if not stop.is_set():
        tasks.append(asyncio.ensure_future(api.serve(sockets=[api.sim_sock])))
        log.info(banner, *api.sim_sock.getsockname()[:2])
        if on_listen is not None:
            on_listen()
    await _until(stop, tasks)
    for server in [*servers, api]:
        server.should_exit = True
    for task in running:
        task.cancel()
    await asyncio.gather(*tasks, *running, return_exceptions=True)
    return 0 if stop.is_set() else 1


async def _until(stop: asyncio.Event, tasks: Sequence[asyncio.Future[None]]) -> None:
    """Until a signal, or until a server task ends on its own (a bind or serve failure)."""
    waiter = asyncio.ensure_future(stop.wait())
    either: list[asyncio.Future[Any]] = [waiter, *tasks]
    await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
    waiter.cancel()


async def _sweep(transfers: mooncake.Transfers) -> None:
    while True:
        await asyncio.sleep(1.0)
        transfers.expire()
