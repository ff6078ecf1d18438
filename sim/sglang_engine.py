"""The simulated SGLang engine: request validation, PD roles by --disaggregation-mode, SGLang's metric names,
and the MiniCPM-SALA kv_indptr crash. Admission, the latency model, the output loop and SIM_FAULT faults
are sim.engine.BaseEngine's, shared with the vLLM engine. No HTTP here (see sim.sglang_server).

PD as SGLang does it (sim/README.md, "SGLang: the contract as seen"): every request on a prefill or decode
server must carry a `bootstrap_room` (else 400, scheduler.py); the prefill waits for the decode named by
the room to bootstrap (SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT), computes, and finishes its request only
once the decode has taken the KV; the decode fetches the prefill's parallel info from the bootstrap server
at `bootstrap_host:bootstrap_port`, announces itself and waits for the KV (SIM_KV_WAIT_S, default
SGLANG_DISAGGREGATION_WAITING_TIMEOUT). A transfer that fails aborts the request with 500: SGLang's decode
never recomputes a prompt, so a request that succeeded in PD mode had its KV moved.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from sim import mori
from sim.engine import CHAT, BaseEngine, HTTPError, Job, announce_fault
from sim.metrics import Metrics, Schema
from sim.mooncake import PullFailed
from sim.settings import Settings
from sim.sglang_config import FAKE_BOOTSTRAP_HOST, SGLangConfig
from sim.sglang_pd import Receiver, Rooms
from sim.tokens import (
    PrefixCache,
    PromptError,
    block_hashes,
    chat_tokens,
    completion_tokens,
    output_word,
)

log = logging.getLogger("sim.sglang")

# sglang/srt/metrics/collector.py. TokenizerMetricsCollector (labels: model_name) ...
TOKENIZER = {
    "sglang:prompt_tokens": ("counter", "Number of prefill tokens processed."),
    "sglang:generation_tokens": ("counter", "Number of generation tokens processed."),
    "sglang:cached_tokens": ("counter", "Number of cached prompt tokens."),
    "sglang:num_requests": ("counter", "Number of requests processed."),
    "sglang:num_aborted_requests": ("counter", "Number of requests aborted."),
    "sglang:time_to_first_token_seconds": ("histogram", "Histogram of time to first token in seconds."),
    "sglang:inter_token_latency_seconds": ("histogram", "Histogram of inter-token latency in seconds."),
    "sglang:e2e_request_latency_seconds": ("histogram", "Histogram of End-to-end request latency in seconds"),
}
# ... and SchedulerMetricsCollector (labels: model_name, engine_type, tp_rank, pp_rank).
SCHEDULER = {
    "sglang:num_running_reqs": ("gauge", "The number of running requests."),
    "sglang:num_queue_reqs": ("gauge", "The number of requests in the waiting queue."),
    "sglang:token_usage": ("gauge", "The token usage."),
    "sglang:cache_hit_rate": ("gauge", "The prefix cache hit rate."),
    "sglang:num_prefill_prealloc_queue_reqs": (
        "gauge",
        "The number of requests in the prefill prealloc queue.",
    ),
    "sglang:num_prefill_inflight_queue_reqs": (
        "gauge",
        "The number of requests in the prefill inflight queue.",
    ),
    "sglang:num_decode_prealloc_queue_reqs": (
        "gauge",
        "The number of requests in the decode prealloc queue.",
    ),
    "sglang:num_decode_transfer_queue_reqs": (
        "gauge",
        "The number of requests in the decode transfer queue.",
    ),
    "sglang:num_bootstrap_failed_reqs": ("counter", "The number of bootstrap failed requests."),
    "sglang:num_transfer_failed_reqs": ("counter", "The number of transfer failed requests."),
    "sglang:is_cuda_graph": ("gauge", "Whether the batch is using CUDA graph."),
}
TTFT_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400)
E2E_BUCKETS = (*TTFT_BUCKETS[:-1], 400, 600, 1200, 1800, 2400)
ITL_BUCKETS = (
    *(0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040, 0.060, 0.080),
    *(0.100, 0.200, 0.400, 0.600, 0.800, 1.000, 2.000, 4.000, 6.000, 8.000),
)
SCHEMA = Schema(
    families={**TOKENIZER, **SCHEDULER},
    presets={},
    buckets={
        "sglang:time_to_first_token_seconds": TTFT_BUCKETS,
        "sglang:inter_token_latency_seconds": ITL_BUCKETS,
        "sglang:e2e_request_latency_seconds": E2E_BUCKETS,
    },
    base='model_name="{model}"',
    family_base=dict.fromkeys(
        SCHEDULER, 'model_name="{model}",engine_type="unified",tp_rank="0",pp_rank="0"'
    ),
)

# What the MiniCPM-SALA build logs when CUDA-graph replay re-plans FlashInfer over the overwritten kv_indptr
# (docs/upstream-facts.md#minicpm-sala). The frames follow SGLang's scheduler -> cuda_graph_runner ->
# attention backend -> FlashInfer plan() path; the last line carries the message a log watcher keys on.
KV_INDPTR_TRACEBACK = """Scheduler hit an exception: Traceback (most recent call last):
  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 2710, in run_scheduler_process
    scheduler.event_loop_overlap()
  File "/usr/local/lib/python3.12/dist-packages/torch/utils/_contextlib.py", line 120, in decorate_context
    return func(*args, **kwargs)
  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 1003, in event_loop_overlap
    batch_result = self.run_batch(batch)
  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 1897, in run_batch
    batch_result = self.model_worker.forward_batch_generation(model_worker_batch)
  File "/sgl-workspace/sglang/python/sglang/srt/managers/tp_worker.py", line 283, in forward_batch_generation
    logits_output, can_run_cuda_graph = self.model_runner.forward(forward_batch)
  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/model_runner.py", line 2086, in forward
    output = self._forward_raw(forward_batch, skip_attn_backend_init, pp_proxy_tensors)
  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/model_runner.py", line 2117, in _forward_raw
    ret = self.graph_runner.replay(forward_batch, skip_attn_backend_init, pp_proxy_tensors)
  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/cuda_graph_runner.py", line 812, in replay
    self.replay_prepare(forward_batch, pp_proxy_tensors)
  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/cuda_graph_runner.py", line 781, in replay_prepare
    self.model_runner.attn_backend.init_forward_metadata_replay_cuda_graph(
  File "/sgl-workspace/sglang/python/sglang/srt/layers/attention/minicpm_backend.py", line 1164, in init_forward_metadata_replay_cuda_graph
    self.indices_updater_decode.update(
  File "/sgl-workspace/sglang/python/sglang/srt/layers/attention/minicpm_backend.py", line 1588, in update_single_wrapper
    wrapper.plan(
  File "/usr/local/lib/python3.12/dist-packages/flashinfer/prefill.py", line 1698, in plan
    self._plan_info = self._cached_module.plan(
  File "/usr/local/lib/python3.12/dist-packages/flashinfer/jit/core.py", line 146, in __call__
    return self._module(*args, **kwargs)
RuntimeError: Error in function 'PrefillSplitQOKVIndptr' at /workspace/include/flashinfer/attention/scheduler.cuh:466: kv_indptr[i+1] - kv_indptr[i] should be non-negative"""  # noqa: E501


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass
class SGLangJob(Job):
    room: int | None = None
    boot_addr: str | None = None  # bootstrap_host:bootstrap_port the decode takes the KV from
    fake: bool = False  # bootstrap_host is SGLang's FAKE_BOOTSTRAP_HOST: no transfer at all
    completion: int = 0
    loaded: int = 0  # decode: prompt tokens whose KV came from the prefill
    refusal: HTTPError | None = None  # answered once the stream has begun


class SGLangEngine(BaseEngine):
    def __init__(
        self,
        config: SGLangConfig,
        env: Settings,
        *,
        rooms: Rooms | None = None,
        receiver: Receiver | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        hbm = (
            PrefixCache(block=config.page_size, capacity_tokens=env.hbm_cache_tokens)
            if config.radix_cache
            else None
        )
        super().__init__(
            env,
            metrics=metrics or Metrics(config.served_names[0], SCHEMA),
            max_running=config.max_running,
            prefix_cache=hbm,
        )
        self.config, self.mode, self.rooms, self.receiver = config, config.mode, rooms, receiver
        self.wedged = False  # the kv_indptr crash happened: the scheduler makes no progress any more
        self.metrics.set("sglang:is_cuda_graph", 0.0)

    def _kv_stall_line(self) -> str:
        """Over MoRI, what the NIC's RDMA provider prints when its retries to the peer run out."""
        return mori.RETRY_EXCEEDED if self.config.transfer_backend == "mori" else super()._kv_stall_line()

    @property
    def stalled(self) -> bool:
        """No output comes any more (kv_indptr crash, or a SIM_FAULT hang took the engine)."""
        hang = self.env.faults.hang_after
        return self.wedged or (hang is not None and self.admitted > hang)

    # -- validation ---------------------------------------------------------------------------------

    async def prepare(self, endpoint: str, body: dict[str, Any]) -> SGLangJob:
        """The request as SGLang would accept it, or HTTPError(400)."""
        _check_body(body, endpoint)
        try:
            tokens = chat_tokens(body["messages"]) if endpoint == CHAT else completion_tokens(body["prompt"])
        except PromptError as exc:
            raise HTTPError(400, str(exc)) from None
        job = SGLangJob(endpoint, body, tokens, self._max_tokens(body, endpoint, len(tokens)), self._leg())
        self._answer(job)
        room, host, port = body.get("bootstrap_room"), body.get("bootstrap_host"), body.get("bootstrap_port")
        if self.mode == "null":
            return job  # a server that is not disaggregated ignores the bootstrap fields
        if room is None:
            self.metrics.inc("sim_contract_violations", rule="bootstrap-room", rejects="true")
            refusal = HTTPError(
                400,
                "Invalid request: Disaggregated request received without bootstrap room id. "
                f"req.rid='{job.request_id}'",
            )
            if not job.stream:
                raise refusal
            job.refusal = refusal  # SGLang's scheduler aborts it: a stream has begun by then
            return job
        if not is_int(room) or (host is not None and not isinstance(host, str)):
            raise HTTPError(400, "bootstrap_room must be an integer and bootstrap_host a string")
        if port is not None and not is_int(port):
            raise HTTPError(400, "bootstrap_port must be an integer")
        job.room, job.fake = room, host == FAKE_BOOTSTRAP_HOST
        if host and port is not None:
            job.boot_addr = f"{host}:{port}"
        return job

    def _leg(self) -> str:
        return "plain" if self.mode == "null" else self.mode

    def _max_tokens(self, body: dict[str, Any], endpoint: str, prompt: int) -> int:
        """max_completion_tokens over max_tokens (chat); tokenizer_manager's context-length checks."""
        asked = body.get("max_completion_tokens") if endpoint == CHAT else None
        asked = body.get("max_tokens") if asked is None else asked
        if asked is None and endpoint != CHAT:
            asked = 16  # CompletionRequest.max_tokens default
        limit = self.config.max_model_len
        if prompt >= limit:
            raise HTTPError(
                400,
                f"The input ({prompt} tokens) is longer than the model's context length ({limit} tokens).",
            )
        if asked is not None and asked + prompt >= limit:
            raise HTTPError(
                400,
                f"Requested token count exceeds the model's maximum context length of {limit} tokens. You "
                f"requested a total of {asked + prompt} tokens: {prompt} tokens from the input messages and "
                f"{asked} tokens for the completion. Please reduce the number of tokens in the input "
                "messages or the completion to fit within the limit.",
            )
        return asked if asked is not None else min(self.env.default_max_tokens, limit - prompt - 1)

    # -- running ------------------------------------------------------------------------------------

    def _on_begin(self, job: Job) -> None:
        if self.mode == "prefill" and isinstance(job, SGLangJob) and not job.fake and job.room is not None:
            self._prefill_rooms().begin(job.room)

    async def _prefill(self, job: Job) -> None:
        assert isinstance(job, SGLangJob)
        if job.refusal is not None:
            raise job.refusal
        await self._stall_point()
        if self.mode == "decode":
            await self._receive(job)
            return
        transfer = self.mode == "prefill" and not job.fake
        if transfer:
            await self._bootstrapped(job)
        prompt, hashes, cached = len(job.tokens), [], 0
        if self.hbm is not None:
            hashes = block_hashes(job.tokens, self.hbm.block)
            cached = min(self.hbm.match(hashes), prompt - 1)  # the last prompt token is always computed
        job.local_hit = cached
        async with self.prefill_lock:
            await asyncio.sleep((prompt - cached) * self.env.prefill_s_per_token)
        self.metrics.set("sglang:cache_hit_rate", cached / prompt)
        if self.hbm is not None:
            self.hbm.insert(hashes)
            self.metrics.set("sglang:token_usage", self.hbm.usage)
        if transfer:
            rooms, room = self._prefill_room(job)
            rooms.ready(room, prompt)
            await self._transferred(job)

    def _prefill_rooms(self) -> Rooms:
        """A prefill's rooms (a prefill engine always has them)."""
        assert self.rooms is not None, "a prefill without its rooms"
        return self.rooms

    def _prefill_room(self, job: SGLangJob) -> tuple[Rooms, int]:
        """A prefill's rooms and the room of a request it transfers (every such request has one)."""
        assert job.room is not None, "a transferred request without its room"
        return self._prefill_rooms(), job.room

    async def _bootstrapped(self, job: SGLangJob) -> None:
        """Prefill: waits for the decode of this room to announce itself (the bootstrap queue)."""
        rooms, room = self._prefill_room(job)
        entry = rooms.rooms[room]
        self._queue("sglang:num_prefill_prealloc_queue_reqs", 1)
        try:
            await asyncio.wait_for(entry.registered.wait(), self.env.bootstrap_timeout_s)
        except TimeoutError:
            self.metrics.inc("sglang:num_bootstrap_failed_reqs")
            waited = self.env.bootstrap_timeout_s
            why = f"Request {job.room} timed out after {waited:.1f}s in KVPoll.Bootstrapping"
            raise self._failure("Prefill bootstrap failed", job, why) from None
        finally:
            self._queue("sglang:num_prefill_prealloc_queue_reqs", -1)

    async def _transferred(self, job: SGLangJob) -> None:
        """Prefill: the request ends only once the decode has the KV (the inflight queue)."""
        rooms, room = self._prefill_room(job)
        entry = rooms.rooms[room]
        self._queue("sglang:num_prefill_inflight_queue_reqs", 1)
        try:
            await asyncio.wait_for(entry.pulled.wait(), self.env.kv_wait_s)
        except TimeoutError:
            self.metrics.inc("sglang:num_transfer_failed_reqs")
            why = f"the decode did not take the KV within {self.env.kv_wait_s:g}s"
            raise self._failure("Prefill transfer failed", job, why) from None
        finally:
            self._queue("sglang:num_prefill_inflight_queue_reqs", -1)
        rooms.close(room)

    async def _receive(self, job: SGLangJob) -> None:
        """Decode: bootstrap with the room's prefill, then wait for the KV; any failure aborts (500)."""
        assert self.receiver is not None and job.room is not None, "a decode's transfer without its room"
        receiver, room = self.receiver, job.room
        prompt = len(job.tokens)
        if job.fake:
            self.metrics.inc("sim_kv_remote_loads", outcome="fake", reason="")
            return
        self._queue("sglang:num_decode_prealloc_queue_reqs", 1)
        try:
            if job.boot_addr is None:
                raise PullFailed("bootstrap", "the request names no bootstrap_host and bootstrap_port")
            await receiver.bootstrap(job.boot_addr, room)
        except PullFailed as exc:
            self.metrics.inc("sglang:num_bootstrap_failed_reqs")
            self.metrics.inc("sim_kv_remote_loads", outcome="failed", reason=exc.reason)
            raise self._failure("Decode handshake failed", job, str(exc), decode=True) from None
        finally:
            self._queue("sglang:num_decode_prealloc_queue_reqs", -1)
        self._queue("sglang:num_decode_transfer_queue_reqs", 1)
        try:
            kept = await receiver.receive(job.boot_addr, room)
            if kept != prompt:
                raise PullFailed("mismatch", f"the prefill computed {kept} tokens, this prompt has {prompt}")
        except PullFailed as exc:
            self.metrics.inc("sglang:num_transfer_failed_reqs")
            self.metrics.inc("sim_kv_remote_loads", outcome="failed", reason=exc.reason)
            log.warning("KV of bootstrap room %s not received: %s", job.room, exc)
            why = str(exc)
            if exc.reason == "timeout":  # what SGLang's receiver says (common/conn.py)
                why = (
                    f"Request {job.room} timed out after {self.env.kv_wait_s:.1f}s in KVPoll.WaitingForInput"
                )
            raise self._failure("Decode transfer failed", job, why, decode=True) from None
        finally:
            self._queue("sglang:num_decode_transfer_queue_reqs", -1)
        self.metrics.inc("sim_kv_remote_loads", outcome="ok", reason="")
        self.metrics.inc("sim_kv_remote_load_tokens", prompt)
        job.loaded = prompt
        await asyncio.sleep(prompt * self.env.kv_s_per_token)

    def _failure(self, what: str, job: SGLangJob, why: str, *, decode: bool = False) -> HTTPError:
        req = "decode_req.req" if decode else "req"
        message = (
            f"{what} for request rank=0 {req}.rid='{job.request_id}' {req}.bootstrap_room={job.room} "
            f"with exception KVTransferError(bootstrap_room={job.room}): {why}"
        )
        log.error("%s", message)
        return HTTPError(500, message)

    async def _generate(self, job: Job) -> AsyncIterator[tuple[int, str]]:
        if self.mode == "prefill":  # the prefill's one token; the decode continues from it
            self._generated(job, 1, "length")
            yield 0, output_word(0, job.answer_seed, job.known)
            return
        async for i, piece in super()._generate(job):
            yield i, piece

    async def _step(self, job: Job, index: int) -> None:
        """Token `index` >= 1 is a decode step: with CUDA graphs, a graph replay (the kv_indptr crash)."""
        if index >= 1 and self.config.cuda_graph:
            self.metrics.set("sglang:is_cuda_graph", 1.0)
            if self.config.kv_indptr_bug and not self.wedged and self.finished >= self.env.kv_indptr_after:
                self._crash_kv_indptr()
        await self._stall_point()

    async def _stall_point(self) -> None:
        if self.wedged:
            await asyncio.Event().wait()  # nothing ever progresses again (until the client goes away)

    def _crash_kv_indptr(self) -> None:
        """The scheduler raises in FlashInfer plan() and makes no progress any more; the HTTP server lives
        on and /health stays 200 (the worst case: only the log shows it)."""
        self.wedged = True
        self.metrics.inc("sim_faults_injected", kind="kv-indptr")
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        log.error("[%s TP0] %s", stamp, KV_INDPTR_TRACEBACK)
        announce_fault(f"kv-indptr-after:{self.env.kv_indptr_after}")

    # -- metrics ------------------------------------------------------------------------------------

    def _queue(self, name: str, delta: int) -> None:
        self.metrics.set(name, self.metrics.get(name) + delta)

    def _on_first_token(self, seconds: float) -> None:
        self.metrics.observe("sglang:time_to_first_token_seconds", seconds)

    def _on_token_gap(self, seconds: float) -> None:
        self.metrics.observe("sglang:inter_token_latency_seconds", seconds)

    def _on_finish(self, job: Job, reason: str, seconds: float) -> None:
        assert isinstance(job, SGLangJob)
        if self.mode == "prefill" and job.finish_reason is None and not job.fake and job.room is not None:
            self._prefill_rooms().fail(job.room)
        self.metrics.inc("sglang:num_requests")
        if job.finish_reason is None:
            self.metrics.inc("sglang:num_aborted_requests")
            return
        self.metrics.inc("sglang:prompt_tokens", len(job.tokens))
        self.metrics.inc("sglang:generation_tokens", job.completion * job.n)
        self.metrics.inc("sglang:cached_tokens", job.local_hit)
        self.metrics.observe("sglang:e2e_request_latency_seconds", seconds)

    def _on_generated(self, job: Job, count: int) -> None:
        assert isinstance(job, SGLangJob)
        job.completion = count

    def _on_error(self) -> None:
        self.metrics.inc("sglang:num_requests")
        self.metrics.inc("sglang:num_aborted_requests")

    def _on_gauges(self) -> None:
        self.metrics.set("sglang:num_running_reqs", self.running)
        self.metrics.set("sglang:num_queue_reqs", self.waiting)


def _check_body(body: Any, endpoint: str) -> None:
    """The request models' validation (pydantic in SGLang: 400 with the field's message)."""
    if not isinstance(body, dict):
        raise HTTPError(400, "request body must be a JSON object")
    if endpoint == CHAT:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise HTTPError(400, "messages: a non-empty list is required")
    elif not isinstance(body.get("prompt"), (str, list)) or not body.get("prompt"):
        raise HTTPError(400, "prompt: a non-empty string or list is required")
    stream = body.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise HTTPError(400, f"stream must be a boolean, got {stream!r}")
    for key in ("max_tokens", "max_completion_tokens"):
        value = body.get(key)
        if value is not None and (not is_int(value) or value <= 0):
            raise HTTPError(400, f"{key} must be positive")
    n = body.get("n")
    if n is not None and (not is_int(n) or n < 1):
        raise HTTPError(400, f"n must be an integer >= 1, got {n!r}")
