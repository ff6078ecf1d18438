"""The simulated engine: validates a request (400s), runs prefill (local cache, L2, remote KV) and decode
with the latency model, keeps vLLM's metrics, and injects faults. No HTTP here (see sim.server).

`BaseEngine` is what the simulated vLLM and SGLang engines share (admission, the serialised prefill, the
output loop, gauges, SIM_FAULT faults); `Engine` is vLLM's, sim.sglang_engine.SGLangEngine is SGLang's.

First-token stop (docs/upstream-facts.md#mooncake-pd), deterministically: the single token of a prefill leg is
a stop exactly when min_tokens < 1 and the request lets a stop through (ignore_eos not true, or stop /
stop_token_ids set) -- the worst case of what real vLLM may do. The transfer is then dropped and decode waits.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import sys
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from sim import contract
from sim.config import ServeConfig
from sim.lmcache import L2
from sim.metrics import Metrics
from sim.mooncake import Puller, PullFailed, Transfers
from sim.settings import Settings
from sim.tokens import (
    PrefixCache,
    PromptError,
    answer_seed,
    block_hashes,
    chat_tokens,
    completion_tokens,
    known_answer,
    output_word,
)

log = logging.getLogger("sim.engine")
CHAT = "/v1/chat/completions"


def announce_fault(kind: str) -> None:
    """One machine-readable stderr line when a fault takes effect: `SIM FAULT <kind> at <epoch>`. A
    fault benchmark reads the instant from it (the log lines above it have second resolution)."""
    print(f"SIM FAULT {kind} at {time.time():.6f}", file=sys.stderr, flush=True)


class HTTPError(Exception):
    def __init__(self, status: int, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.param = status, message, param


@dataclass
class Job:
    endpoint: str
    body: dict[str, Any]
    tokens: list[str]
    max_tokens: int
    leg: str  # plain | prefill | decode
    request_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    transfer_failure: contract.Violation | None = None  # the named prefill cannot serve this transfer
    local_hit: int = 0
    external: int = 0
    finish_reason: str | None = None
    answer_seed: int = 0  # what the answer follows from (sim.tokens.answer_seed of the prompt it was given)
    # the first words of an answer the simulator can give (sim.tokens.known_answer)
    known: tuple[str, ...] = ()

    @property
    def params(self) -> Any:
        return self.body.get("kv_transfer_params")

    @property
    def salt(self) -> str:
        """The request's cache_salt (vLLM's): its cached blocks are its own."""
        salt = self.body.get("cache_salt")
        return salt if isinstance(salt, str) else ""

    @property
    def stream(self) -> bool:
        return self.body.get("stream") is True

    @property
    def n(self) -> int:
        return self.body.get("n") or 1

    def kv_response(self) -> dict[str, Any] | None:
        """Prefill responses carry no kv_transfer_params, except the LMCache per-request stats."""
        if self.leg == "prefill" and isinstance(self.params, dict) and "cached_token_stats" in self.params:
            return {
                "cached_token_stats": {
                    "num_vllm_cached_tokens": self.local_hit,
                    "num_lmcache_cached_tokens": self.external,
                }
            }
        return None


class BaseEngine:
    """Admission (at most `max_running` requests run, more wait), one prefill at a time, the output loop,
    request gauges and the SIM_FAULT faults. Subclasses name their metrics through the `_on_*` hooks and
    do the prefill (local cache, remote KV) in `_prefill`."""

    def __init__(
        self, env: Settings, *, metrics: Metrics, max_running: int, prefix_cache: PrefixCache | None
    ) -> None:
        self.env, self.metrics, self.hbm = env, metrics, prefix_cache
        self._errored = False  # the first injected error is announced (announce_fault)
        self._wrong_announced = False  # SIM_FAULT wrong-answers, announced once
        self.prefill_lock = asyncio.Lock()
        self.slots = asyncio.Semaphore(max_running)
        self.admitted = self.finished = self.running = self.waiting = 0
        self.exit_code: int | None = None
        self.exit_reason: str | None = None  # the fault behind exit_code, e.g. "crash-after:3"

    def _answer(self, job: Job) -> None:
        """What the engine answers JOB's prompt with: words that follow from the prompt, led by a worked
        answer where the simulator can give one (SIM_FAULT wrong-answers: one too high, announced once)."""
        wrong = self.env.faults.wrong_answers
        job.answer_seed = answer_seed(job.tokens)
        job.known = known_answer(job.tokens, off_by=1 if wrong else 0)
        if job.known and wrong and not self._wrong_announced:
            self._wrong_announced = True
            announce_fault("wrong-answers")
            log.warning("SIM_FAULT wrong-answers: every sum this engine is asked is answered one too high")

    # -- hooks: the engine's own metric names -------------------------------------------------------

    def _on_begin(self, job: Job) -> None:
        """The request left the queue and is about to prefill."""

    def _on_first_token(self, seconds: float) -> None:
        raise NotImplementedError

    def _on_token_gap(self, seconds: float) -> None:
        raise NotImplementedError

    def _on_finish(self, job: Job, reason: str, seconds: float) -> None:
        raise NotImplementedError

    def _on_generated(self, job: Job, count: int) -> None:
        raise NotImplementedError

    def _on_error(self) -> None:
        """An injected SIM_FAULT error answered this request."""

    def _on_gauges(self) -> None:
        raise NotImplementedError

    async def _prefill(self, job: Job) -> None:
        raise NotImplementedError

    async def _step(self, job: Job, index: int) -> None:
        """Before output token `index` (0: the prefill's); a stalled engine waits here."""

    # -- running ------------------------------------------------------------------------------------

    async def run(self, job: Job) -> AsyncIterator[str]:
        """Yields the generated text pieces (one per token); sets job.finish_reason."""
        index, start = self.admitted, time.monotonic()  # latencies count from arrival, as in vLLM
        self.admitted += 1
        self._error_fault(index)
        self._gauge(waiting=1)
        try:
            await self.slots.acquire()
        finally:
            self._gauge(waiting=-1)
        try:
            self._gauge(running=1)
            await self._hang_fault(index)
            self._on_begin(job)
            try:
                await self._prefill(job)
                last = time.monotonic()
                self._on_first_token(last - start)
                async for i, piece in self._generate(job):
                    if i:
                        now = time.monotonic()
                        self._on_token_gap(now - last)
                        last = now
                    yield piece
            finally:
                self._finish(job, start)
        finally:
            self.slots.release()

    def _finish(self, job: Job, start: float) -> None:
        self._gauge(running=-1)
        self._on_finish(job, job.finish_reason or "abort", time.monotonic() - start)
        self.finished += 1
        faults = self.env.faults
        if faults.crash_after is not None and self.finished >= faults.crash_after:
            self._schedule_exit(1, f"crash-after:{faults.crash_after}")
        elif faults.exit0_after is not None and self.finished >= faults.exit0_after:
            self._schedule_exit(0, f"exit0-after:{faults.exit0_after}")

    async def _generate(self, job: Job) -> AsyncIterator[tuple[int, str]]:
        """Output tokens until the length cap or a stop string (skipped until min_tokens exist)."""
        stop = job.body.get("stop") or ()
        stop = (stop,) if isinstance(stop, str) else tuple(stop)
        min_tokens, text = job.body.get("min_tokens") or 0, ""
        for i in range(job.max_tokens):
            await self._step(job, i)
            if i:
                await asyncio.sleep(self.env.decode_s_per_token)
            piece = (" " if i else "") + output_word(i, job.answer_seed, job.known)
            hit = next((s for s in stop if s and s in text + piece), None) if i + 1 > min_tokens else None
            if hit is not None:
                piece = (text + piece)[: (text + piece).index(hit)][len(text) :]
                self._generated(job, i + 1, "stop")
                yield i, piece
                return
            text += piece
            if i + 1 == job.max_tokens:
                self._generated(job, i + 1, "length")
            yield i, piece

    def _generated(self, job: Job, count: int, reason: str) -> None:
        job.finish_reason = reason
        self._on_generated(job, count)

    # -- faults and gauges --------------------------------------------------------------------------

    async def _hang_fault(self, index: int) -> None:
        """A stuck engine (hang-after), or a stalled KV transfer (kv-stall-after), which the KV transport
        gives up on with its own line (_kv_stall_line): the request stays running forever (until the client
        goes away)."""
        faults = self.env.faults
        if faults.hang_after is not None and index >= faults.hang_after:
            kind, after = "hang", faults.hang_after
            log.warning("SIM_FAULT hang-after:%d: request %d hangs", after, index + 1)
        elif faults.kv_stall_after is not None and index >= faults.kv_stall_after:
            kind, after = "kv-stall", faults.kv_stall_after
            print(self._kv_stall_line(), file=sys.stderr, flush=True)
        else:
            return
        self.metrics.inc("sim_faults_injected", kind=kind)
        if index == after:
            announce_fault(f"{kind}-after:{after}")
        try:
            await asyncio.Event().wait()
        finally:
            self._gauge(running=-1)  # only reached when the client gives up

    def _kv_stall_line(self) -> str:
        """What the KV transport logs when a transfer stalls: Mooncake's TCP transport (glog format)."""
        now = time.time()
        stamp = time.strftime("%m%d %H:%M:%S", time.localtime(now)) + f".{int(now % 1 * 1e6):06d}"
        return (
            f"E{stamp} {os.getpid()} tcp_transport_session_impl.h:518] ClientSession: no transfer "
            "progress within 30s; dropping connection"
        )

    def _error_fault(self, index: int) -> None:
        faults = self.env.faults
        rate = faults.error_rate
        after = faults.error_after is not None and index >= faults.error_after
        if after or (rate and math.floor((index + 1) * rate) > math.floor(index * rate)):
            if not self._errored:
                self._errored = True
                announce_fault(f"error-after:{faults.error_after}" if after else f"error-rate:{rate:g}")
            self.metrics.inc("sim_faults_injected", kind="error")
            self._on_error()
            raise HTTPError(
                500, f"simulated engine error (SIM_FAULT {'error-after' if after else 'error-rate'})"
            )

    def _schedule_exit(self, code: int, why: str) -> None:
        if self.exit_code is None:
            self.exit_code, self.exit_reason = code, why
            self.metrics.inc("sim_faults_injected", kind="exit" if code == 0 else "crash")
            log.error("SIM_FAULT %s: the engine goes away after this response (exit code %d)", why, code)

    def _gauge(self, *, waiting: int = 0, running: int = 0) -> None:
        self.waiting += waiting
        self.running += running
        self._on_gauges()


class Engine(BaseEngine):
    def __init__(
        self,
        config: ServeConfig,
        env: Settings,
        *,
        puller: Puller | None = None,
        transfers: Transfers | None = None,
        l2: L2 | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        block, blocks = config.block_size, config.gpu_blocks
        capacity = env.hbm_cache_tokens if blocks is None else blocks * block
        hbm = PrefixCache(block=block, capacity_tokens=capacity) if config.prefix_caching else None
        super().__init__(
            env,
            metrics=metrics or Metrics(config.served_names[0]),
            max_running=config.max_num_seqs,
            prefix_cache=hbm,
        )
        self.config, self.kv = config, config.kv
        self.puller, self.transfers, self.l2 = puller, transfers, l2
        self._warned: set[str] = set()
        self._corrupted = False

    # -- validation ---------------------------------------------------------------------------------

    async def prepare(self, endpoint: str, body: dict[str, Any]) -> Job:
        """The request as vLLM would accept it, or HTTPError(400/404)."""
        self._reject(contract.check_openai_body(body, endpoint=endpoint))
        model = body.get("model")
        if model is not None and model not in self.config.served_names:
            raise HTTPError(404, f"The model `{model}` does not exist.", param="model")
        try:
            tokens = chat_tokens(body["messages"]) if endpoint == CHAT else completion_tokens(body["prompt"])
        except PromptError as exc:
            raise HTTPError(400, str(exc)) from None
        job = Job(endpoint, body, tokens, self._max_tokens(body, len(tokens)), self._leg(body))
        self._answer(job)
        if job.leg == "prefill":
            self._reject(contract.check_prefill_request(body, endpoint=endpoint))
        elif job.leg == "decode":
            found = contract.check_decode_request(body, endpoint=endpoint, engines=await self._engines(job))
            failures = [v for v in found if v.rule in contract.TRANSFER_FAILURE_RULES]
            self._reject([v for v in found if v not in failures])
            self._count(failures)
            job.transfer_failure = failures[0] if failures else None
        return job

    def _leg(self, body: dict[str, Any]) -> str:
        params = body.get("kv_transfer_params")
        kv = self.kv
        if kv is None or kv.mooncake is None:
            return "plain"
        if params is None:
            if kv.consumes and not kv.produces:  # silent recompute: count the hazard, serve it
                self._count([contract.Violation("decode-kv-params", "no kv_transfer_params", False)])
            return "plain"
        if kv.produces and (not kv.consumes or (isinstance(params, dict) and params.get("do_remote_decode"))):
            return "prefill"
        return "decode"

    def _max_tokens(self, body: dict[str, Any], prompt: int) -> int:
        limit = self.config.max_model_len
        cap = contract.effective_max_tokens(body)
        if prompt >= limit or (cap is not None and prompt + cap > limit):
            asked = cap if cap is not None else 1
            raise HTTPError(
                400,
                f"This model's maximum context length is {limit} tokens. However, you "
                f"requested {prompt + asked} tokens ({prompt} in the messages, {asked} in the "
                "completion). Please reduce the length of the messages or completion.",
            )
        return cap if cap is not None else min(self.env.default_max_tokens, limit - prompt)

    async def _engines(self, job: Job) -> dict[str, str]:
        params = job.params if isinstance(job.params, dict) else {}
        addr, wanted = params.get("remote_bootstrap_addr"), params.get("remote_engine_id")
        if self.puller is None or not isinstance(addr, str) or contract.bootstrap_addr_problem(addr):
            return {}
        found = await self.puller.engine_id(addr)
        if found is not None and isinstance(wanted, str) and wanted != found:
            found = await self.puller.engine_id(addr, refresh=True)  # the prefill may have restarted
        return {} if found is None else {addr: found}

    def _reject(self, violations: list[contract.Violation]) -> None:
        self._count(violations)
        rejected = [v for v in violations if v.rejects]
        if rejected:
            raise HTTPError(400, "; ".join(f"{v.rule}: {v.message}" for v in rejected))

    def _count(self, violations: list[contract.Violation]) -> None:
        for v in violations:
            self.metrics.inc("sim_contract_violations", rule=v.rule, rejects=str(v.rejects).lower())
            if not v.rejects and v.rule not in self._warned:
                self._warned.add(v.rule)
                log.warning(
                    "PD contract hazard %s: %s (counted in sim_contract_violations)", v.rule, v.message
                )

    # -- running ------------------------------------------------------------------------------------

    def _transfers(self) -> Transfers:
        """A prefill leg's transfers: an engine takes prefill legs only with a KV connector that has them."""
        assert self.transfers is not None, "a prefill leg on an engine without transfers"
        return self.transfers

    def _on_begin(self, job: Job) -> None:
        if job.leg == "prefill":
            self._transfers().begin(job.params["transfer_id"])

    def _on_first_token(self, seconds: float) -> None:
        self.metrics.observe("vllm:time_to_first_token_seconds", seconds)

    def _on_token_gap(self, seconds: float) -> None:
        self.metrics.observe("vllm:inter_token_latency_seconds", seconds)

    def _on_finish(self, job: Job, reason: str, seconds: float) -> None:
        if job.leg == "prefill" and job.finish_reason is None:
            self._transfers().abort(job.params["transfer_id"])
        self.metrics.inc("vllm:request_success", finished_reason=reason)
        self.metrics.observe("vllm:e2e_request_latency_seconds", seconds)

    def _on_generated(self, job: Job, count: int) -> None:
        self.metrics.inc("vllm:generation_tokens", count * job.n)

    def _on_error(self) -> None:
        self.metrics.inc("vllm:request_success", finished_reason="error")

    def _on_gauges(self) -> None:
        self.metrics.set("vllm:num_requests_waiting", self.waiting)
        self.metrics.set("vllm:num_requests_running", self.running)

    async def _prefill(self, job: Job) -> None:
        tokens, prompt = job.tokens, len(job.tokens)
        hashes, local = [], 0
        if self.hbm is not None:
            hashes = block_hashes(tokens, self.hbm.block, job.salt)
            local = min(self.hbm.match(hashes), (prompt - 1) // self.hbm.block * self.hbm.block)
        external = 0
        if job.leg == "decode":
            external = await self._load_remote(job, prompt, local)
        elif self.l2 is not None:
            external = self.l2.lookup(tokens, local_hit=local, salt=job.salt)
        cached = local + external
        recomputed = 1 if cached >= prompt else 0
        cached -= recomputed
        job.local_hit, job.external = local, external
        if external and job.leg == "decode" and self.env.faults.corrupt_kv:
            job.answer_seed ^= 0x9E3779B9  # the KV it was handed is not the KV its prompt makes
            job.known = ()
            if not self._corrupted:
                self._corrupted = True
                announce_fault("corrupt-kv")
                log.warning("SIM_FAULT corrupt-kv: the KV loaded for a decode is not the KV its prompt makes")
        self._count_prompt(prompt, local, external, cached, recomputed)
        if external and job.leg == "decode":
            await asyncio.sleep(external * self.env.kv_s_per_token)
        async with self.prefill_lock:
            await asyncio.sleep((prompt - cached) * self.env.prefill_s_per_token)
        if self.hbm is not None:
            self.hbm.insert(hashes)
            self.metrics.set("vllm:kv_cache_usage_perc", self.hbm.usage)
        if self.l2 is not None and job.leg != "decode":
            self.l2.store(tokens, salt=job.salt)

    def _count_prompt(self, prompt: int, local: int, external: int, cached: int, recomputed: int) -> None:
        """vLLM's accounting (PromptTokenStats): computed + local + external - recomputed = prompt."""
        m = self.metrics
        m.inc("vllm:prompt_tokens", prompt)
        m.inc("vllm:prefix_cache_queries", prompt)
        m.inc("vllm:prefix_cache_hits", local)
        if self.kv is not None:
            m.inc("vllm:external_prefix_cache_queries", prompt)
            m.inc("vllm:external_prefix_cache_hits", external)
        m.inc("vllm:prompt_tokens_by_source", prompt - cached, source="local_compute")
        m.inc("vllm:prompt_tokens_by_source", cached + recomputed - external, source="local_cache_hit")
        m.inc("vllm:prompt_tokens_by_source", external, source="external_kv_transfer")
        m.inc("vllm:prompt_tokens_cached", cached)
        m.inc("vllm:prompt_tokens_recomputed", recomputed)

    async def _load_remote(self, job: Job, prompt: int, local: int) -> int:
        """Prompt tokens loaded from the prefill, or 0 when recomputing per kv_load_failure_policy."""
        assert self.puller is not None and self.kv is not None, "a decode leg on an engine without a puller"
        params = job.params
        try:
            if job.transfer_failure:
                failure = job.transfer_failure
                raise PullFailed(failure.rule.removeprefix("decode-"), failure.message)
            kept = await self.puller.pull(
                params["remote_bootstrap_addr"], params["transfer_id"], params["remote_engine_id"]
            )
            if kept != prompt:
                raise PullFailed(
                    "mismatch",
                    f"prefill kept {kept} tokens but the decode prompt has {prompt} "
                    "(the legs' prompts differ)",
                )
        except PullFailed as exc:
            policy = self.kv.load_failure_policy
            outcome = "recomputed" if policy == "recompute" else "failed"
            self.metrics.inc("sim_kv_remote_loads", outcome=outcome, reason=exc.reason)
            log.warning("KV load failed (%s), kv_load_failure_policy=%s: %s", exc.reason, policy, exc)
            if policy == "fail":
                job.finish_reason = "error"
                tid = params.get("transfer_id")
                raise HTTPError(500, f"KV cache load failed for transfer {tid}: {exc}") from None
            return 0
        self.metrics.inc("sim_kv_remote_loads", outcome="ok", reason="")
        self.metrics.inc("sim_kv_remote_load_tokens", prompt - local)
        return prompt - local

    async def _generate(self, job: Job) -> AsyncIterator[tuple[int, str]]:
        if job.leg == "prefill":
            stops = first_token_stops(job.body)
            self._transfers().finish(job.params["transfer_id"], tokens=len(job.tokens), kept=not stops)
            self._generated(job, 1, "stop" if stops else "length")
            yield 0, output_word(0, job.answer_seed, job.known)
            return
        async for i, piece in super()._generate(job):
            yield i, piece


def first_token_stops(body: dict[str, Any]) -> bool:
    """Whether the prefill leg's single token is a stop (see the module docstring)."""
    if (body.get("min_tokens") or 0) >= 1:
        return False
    return body.get("ignore_eos") is not True or bool(body.get("stop")) or bool(body.get("stop_token_ids"))
