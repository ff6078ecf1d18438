"""SGLang engines: `python3 -m sglang.launch_server` per role, PD over Mooncake or MoRI through SGLang's own
disaggregation flags, and sglang-router in front of them (docs/upstream-facts.md#routers)."""

from __future__ import annotations

from dataclasses import dataclass

from schemas import settings as reg
from schemas.entries import dram_budget, splits_experts
from schemas.models import Mori

from . import srt
from .benchmark import concurrencies
from .outside.srt_recipe import cli
from .plan import Ports, Service, Timeouts
from .target import NODE_ADDR, Target, Unsupported
from .words import Ref, argv, word

# KV transfers this renderer launches SGLang PD over: its --disaggregation-transfer-backend values.
TRANSFERS = ("mooncake", "mori")
HICACHE = "hicache"  # the kv-offload-backend SGLang offers itself: its hierarchical cache

# MoRI (AMD's RDMA KV transfer and all-to-all) as InferenceX's known-working MI355X SGLang launch sets it for
# every model (docs/sglang-mori.md): SGLang's PD and MoRI knobs, exported on every node.
MORI_ENV: dict[str, str | int] = {
    "SGLANG_USE_AITER": 1,
    "AITER_LOG_LEVEL": "ERROR",
    "SGLANG_MORI_DISPATCH_DTYPE": "auto",
    "SGLANG_MORI_QP_PER_TRANSFER": 4,
    "SGLANG_MORI_NUM_WORKERS": 4,
    "SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT": 3600,
    "SGLANG_DISAGGREGATION_WAITING_TIMEOUT": 3600,
    "SGLANG_HEALTH_CHECK_TIMEOUT": 600,
    "SGLANG_DISAGGREGATION_NUM_PRE_ALLOCATE_REQS": 32,
    "SGLANG_ENABLE_SPEC_V2": 1,
    "SGLANG_ENABLE_OVERLAP_PLAN_STREAM": 0,
    "SGLANG_LOG_MS": "true",
    "MORI_SHMEM_MODE": "ISOLATION",
    "MORI_EP_LAUNCH_CONFIG_MODE": "AUTO",
    "MORI_APP_LOG_LEVEL": "WARNING",
    "MORI_IO_SQ_BACKOFF_TIMEOUT_US": 50000,
    "MORI_IO_QP_MAX_SEND_WR": 16384,
    "MORI_IO_QP_MAX_CQE": 32768,
    "MORI_IO_QP_MAX_SGE": 2,
    "MORI_IO_TC_DISABLE": 0,
    # a ROCm 7.2.0 graph-capture hang: collectives block instead of polling
    "TORCH_NCCL_BLOCKING_WAIT": 1,
    "NCCL_BLOCKING_WAIT": 1,
}
# MoRI's dispatch budgets (tokens per rank) where the sweep does not derive them and the model pins none.
MORI_DISPATCH_TOKENS = {"prefill": 8192, "decode": 512}
DISPATCH_TOKENS_VAR = {"prefill": "MORI_DISPATCH_TOKENS_PREFILL", "decode": "MORI_DISPATCH_TOKENS_DECODE"}
MAX_RUNNING_VAR = "MAX_RUNNING_REQUESTS"
# SGLang flags this builder knows the meaning of, whichever model sets them: the admission limit it derives
# on a DEP worker (a model sets it for TP workers), two-batch overlap, whose MoRI all-to-all runs on SDMA,
# and the radix cache HiCache needs.
MAX_RUNNING_FLAG, TWO_BATCH_OVERLAP_FLAG = "--max-running-requests", "--enable-two-batch-overlap"
DISABLE_RADIX_FLAG = "--disable-radix-cache"
FLAGS_READ = (MAX_RUNNING_FLAG, TWO_BATCH_OVERLAP_FLAG, DISABLE_RADIX_FLAG)


@dataclass(frozen=True)
class MoriBudget:
    """What the known-working launch derives from the sweep for MoRI (env.sh shows it): a worker running DP
    attention with split experts (DEP) admits the largest concurrency at once, and decode's dispatch budget
    per rank is that spread over its DP ranks; MTP multiplies decode's by the tokens a step verifies. A
    model's pinned values (configs/models.yaml `mori`) replace what they name."""

    max_concurrency: int
    dep: dict  # role -> True when its worker runs DP attention with split experts
    decode_ranks: int  # decode's DP ranks (its TP size)
    mtp: int  # DECODE_MTP_SIZE (0: none)
    pinned: Mori = Mori()

    @property
    def decode_base(self) -> int:
        """Decode's budget before MTP: the largest concurrency over its DP ranks on a DEP decode, else MoRI's
        default."""
        if self.dep["decode"]:
            return self.max_concurrency // self.decode_ranks
        return MORI_DISPATCH_TOKENS["decode"]

    def derived(self, role: str) -> int:
        return self.decode_base * (self.mtp + 1) if role == "decode" else MORI_DISPATCH_TOKENS[role]

    def dispatch(self, role: str) -> int:
        return self.pinned.role(role).dispatch_tokens_per_rank or self.derived(role)

    @property
    def switch_threshold(self) -> int:
        """SGLANG_MORI_DISPATCH_INTER_KERNEL_SWITCH_THRESHOLD: twice decode's budget before MTP, or the
        model's pinned value where decode is not DEP."""
        if self.pinned.switch_threshold and not self.dep["decode"]:
            return self.pinned.switch_threshold
        return 2 * self.decode_base

    def notes(self) -> tuple:
        out = [
            "MoRI's dispatch budgets (tokens per rank) and the admission limit, as the known-working",
            f"launch derives them from this variant: largest concurrency {self.max_concurrency}.",
        ]
        dep_roles = [r for r in reg.ROLES if self.dep[r]]
        if dep_roles:
            out.append(
                f"  {MAX_RUNNING_VAR} (--max-running-requests of {' and '.join(dep_roles)}: DP attention, "
                f"experts split) = {self.max_concurrency}"
            )
        for role in reg.ROLES:
            out.append(f"  {DISPATCH_TOKENS_VAR[role]} = {self._dispatch_note(role)}")
        if self.pinned.switch_threshold and not self.dep["decode"]:
            threshold = f"{self.switch_threshold} (pinned by the model)"
        else:
            threshold = f"2 x {self.decode_base} = {self.switch_threshold}"
        out.append(f"  SGLANG_MORI_DISPATCH_INTER_KERNEL_SWITCH_THRESHOLD (exported above) = {threshold}")
        return tuple(out)

    def _dispatch_note(self, role: str) -> str:
        if self.pinned.role(role).dispatch_tokens_per_rank:
            return f"{self.dispatch(role)} (pinned by the model)"
        if role == "prefill":
            return f"{self.dispatch(role)} (MoRI's prefill default)"
        if self.dep["decode"]:
            base = f"{self.max_concurrency} / {self.decode_ranks} DP ranks"
        else:
            base = f"{MORI_DISPATCH_TOKENS['decode']} (MoRI's decode default)"
        if self.mtp or self.dep["decode"]:
            mtp = f" x (MTP {self.mtp} + 1)" if self.mtp else ""
            base += f"{mtp} = {self.dispatch('decode')}"
        return base

    def values(self) -> dict:
        out = {DISPATCH_TOKENS_VAR[r]: self.dispatch(r) for r in reg.ROLES}
        if any(self.dep.values()):
            out[MAX_RUNNING_VAR] = self.max_concurrency
        return out


def _dep(t: Target, role: str) -> bool:
    w = t.worker(role)
    return bool(w.dp_attn) and splits_experts(w)


def mori_budget(t: Target) -> MoriBudget | None:
    """MoRI's budgets derived from the sweep; None without MoRI, or from a recipe (which states its own)."""
    if not _over_mori(t) or t.srt is not None:
        return None
    return MoriBudget(
        max_concurrency=max(concurrencies(t)),
        dep={role: _dep(t, role) for role in reg.ROLES},
        decode_ranks=t.worker("decode").tp,
        mtp=t.mtp_steps,
        pinned=t.recipe.mori,
    )


def _over_mori(t: Target) -> bool:
    return t.disagg and t.kv_transfer == "mori"


def check(t: Target) -> None:
    if t.disagg and t.kv_transfer not in TRANSFERS:
        raise Unsupported(
            f"kv-p2p-transfer {t.kv_transfer!r} is not rendered for SGLang ({' or '.join(TRANSFERS)})",
            at=(t.key, "kv-p2p-transfer"),
        )
    if _over_mori(t) and not uses_rdma(t):
        raise Unsupported(
            f"kv-p2p-transfer mori moves KV over RDMA only, and runner {t.runner_label} names no nic-devices",
            at=(t.key, "kv-p2p-transfer"),
        )
    if _over_mori(t) and t.launch.rdma_traffic_class is None:
        raise Unsupported(
            f"kv-p2p-transfer mori: runner {t.runner_label}'s launch profile states no rdma-traffic-class "
            "(the DSCP and PFC no-drop priority its NICs carry RDMA on, as `nicctl show qos` shows them); "
            "unmarked, MoRI's packets travel at priority 0, which PFC does not protect",
            at=(t.key, "kv-p2p-transfer"),
        )
    if _over_mori(t) and t.launch.data_plane_interface is None:
        raise Unsupported(
            f"kv-p2p-transfer mori: runner {t.runner_label}'s launch profile states no data-plane-interface, "
            "the interface MoRI's Gloo and NCCL collectives bind (GLOO_SOCKET_IFNAME, NCCL_SOCKET_IFNAME)",
            at=(t.key, "kv-p2p-transfer"),
        )
    backend = t.point.space.kv_offload_backend
    if backend is not None and backend.name != HICACHE:
        raise Unsupported(
            f"kv-offload-backend {backend.name} is not rendered for SGLang ({HICACHE}, SGLang's own, is; "
            "the LMCache MP connector is vLLM's)",
            at=(*t.point.path, "kv-offload-backend"),
        )
    if _hicache(t):
        _check_hicache(t)
    if t.srt is not None:  # the recipe states the engine's flags: the model's below are not used
        return
    for role in t.roles:
        if t.worker(role).dp_attn and t.recipe.dp_attention is None:
            raise Unsupported(
                f"{role}: dp-attn on model {t.entry.model}, whose sglang recipe in configs/models.yaml has "
                "no dp-attention block (the flags a known-working DP-attention launch used)",
                at=(*t.role_path(role), "dp-attn"),
            )
        if _dep(t, role) and MAX_RUNNING_FLAG in map(str, t.model_args(role)):
            raise Unsupported(
                f"{role}: the model's flags set --max-running-requests, which a DP-attention worker with "
                "split experts derives from the sweep (its largest concurrency): set it per role for TP "
                "workers only (prefill-args, decode-args in configs/models.yaml)",
                at=(t.key, "model"),
            )
        if _dep(t, role) and not _over_mori(t):
            raise Unsupported(
                f"{role}: DP attention with split experts is rendered over MoRI's all-to-all only "
                "(kv-p2p-transfer mori), as the known-working launch runs it",
                at=(*t.role_path(role), "dp-attn"),
            )
    if _agentic(t) and t.mtp_steps and t.recipe.mtp_acceptance and t.mtp_steps not in t.recipe.mtp_acceptance:
        raise Unsupported(
            f"agentic MTP with {t.mtp_steps} draft steps: model {t.entry.model}'s sglang recipe states the "
            f"acceptance an agentic run simulates for {sorted(t.recipe.mtp_acceptance)} steps only "
            "(mtp-acceptance in configs/models.yaml)",
            at=(*t.role_path("decode"), "additional-settings"),
        )
    if t.point.space.spec_decoding == "mtp":
        if not t.recipe.mtp_args:
            raise Unsupported(
                f"spec-decoding mtp on model {t.entry.model}, whose sglang recipe in configs/models.yaml "
                "has no mtp-args (the draft algorithm a known-working MTP launch used)",
                at=(*t.point.path, "spec-decoding"),
            )
        if not t.mtp_steps:
            raise Unsupported(
                "spec-decoding mtp needs its draft steps: DECODE_MTP_SIZE=N (N >= 1) in decode's "
                "additional-settings",
                at=(*t.role_path("decode"), "additional-settings"),
            )


def _agentic(t: Target) -> bool:
    return t.point.scenario == "agentic-coding"


def _hicache(t: Target) -> bool:
    backend = t.point.space.kv_offload_backend
    return backend is not None and backend.name == HICACHE and t.point.space.kv_offloading == "dram"


def _check_hicache(t: Target) -> None:
    role = _offload_role(t)
    if DISABLE_RADIX_FLAG in map(str, t.model_args(role)):
        raise Unsupported(
            f"kv-offload-backend hicache extends SGLang's radix cache, and model {t.entry.model}'s sglang "
            f"recipe turns it off on {role} ({DISABLE_RADIX_FLAG}): its recipe for this scenario must keep "
            "it",
            at=(*t.point.path, "kv-offload-backend"),
        )
    if t.recipe.hicache_sizing == "size" and hicache_size_gb(t) < 1:
        raise Unsupported(
            f"HiCache's host pool per rank rounds below 1 GB (the server's DRAM budget over its ranks): "
            f"runner {t.runner_label} states too little DRAM, or dram-utilization is too low",
            at=(*t.point.path, "kv-offload-backend"),
        )


def _offload_role(t: Target) -> str:
    """The role whose node's DRAM HiCache uses (schemas.entries.offloading_worker is its worker)."""
    return "prefill" if t.disagg else reg.SERVER


def hicache_budget(t: Target):
    """The offloading server's DRAM budget (schemas/dram.py) where HiCache is sized from it, else None."""
    if not _hicache(t) or t.recipe.hicache_sizing != "size":
        return None
    budget = dram_budget(t.hardware, t.dram_utilization, t.worker(_offload_role(t)))
    if budget is None:  # lint's _dram_budget_tiles_node refuses such a config first
        raise Unsupported(
            "the offloading worker does not tile a node, or its runner states no DRAM: HiCache's host pool "
            "is undefined",
            at=t.role_path(_offload_role(t)),
        )
    return budget


def _ranks_per_node(t: Target) -> int:
    return min(t.worker(_offload_role(t)).tp, t.hardware.gpus_per_node)


def hicache_size_gb(t: Target) -> int:
    """--hicache-size: the server's DRAM budget over the ranks it runs on one node (one host pool each)."""
    return hicache_budget(t).budget_gb // _ranks_per_node(t)


def _hicache_args(t: Target, role: str) -> list:
    """SGLang's hierarchical cache on the offloading worker: host DRAM behind its radix cache."""
    if not _hicache(t) or role != _offload_role(t):
        return []
    s = t.settings(role)
    if t.recipe.hicache_sizing == "ratio":
        sizing = ["--hicache-ratio", s["HICACHE_RATIO"]]
    else:
        sizing = ["--hicache-size", hicache_size_gb(t)]
    return [
        "--enable-hierarchical-cache",
        *sizing,
        *("--hicache-io-backend", s["HICACHE_IO_BACKEND"]),
        *("--hicache-mem-layout", s["HICACHE_MEM_LAYOUT"]),
        *("--hicache-write-policy", s["HICACHE_WRITE_POLICY"]),
        *("--hicache-storage-prefetch-policy", s["HICACHE_PREFETCH_POLICY"]),
    ]


def simulated_acceptance(t: Target) -> float | None:
    """The golden acceptance length an agentic MTP run simulates on decode, None where it is measured."""
    if not (_agentic(t) and t.mtp_steps) or t.srt is not None:  # a recipe simulates nothing of its own
        return None
    return t.recipe.mtp_acceptance.get(t.mtp_steps)


def _acceptance_env(t: Target, role: str) -> list:
    length = simulated_acceptance(t)
    if length is None or role != "decode":
        return []
    return [
        f"SGLANG_SIMULATE_ACC_LEN={length}",
        "SGLANG_SIMULATE_ACC_METHOD=match-expected",
        "SGLANG_SIMULATE_ACC_TOKEN_MODE=real-draft-token",
    ]


def services(t: Target, role: str, ports: Ports, timeouts: Timeouts) -> list[Service]:
    return [_sglang_service(t, role, ports, timeouts)]


def _role_env(t: Target, role: str) -> list:
    """`env NAME=VALUE ...` of a role's own engine line: a DP-attention worker's environment (the model's),
    MoRI's budgets over MoRI (dispatch's from env.sh), and the MTP acceptance an agentic run simulates; from
    a recipe, the recipe's environment for the role, less the site's."""
    if t.srt is not None:
        recipe_env = [word(f"{k}={v}") for k, v in srt.role_env(t, role).items()]
        return ["env", *recipe_env] if recipe_env else []
    env = dict(t.dp_env(role))
    mori = _over_mori(t) and role in reg.ROLES
    if mori:
        env["SGLANG_MORI_COMBINE_DTYPE"] = t.recipe.mori.role(role).combine_dtype
        moe = t.recipe.mori.moe_max_input_tokens(role)
        if moe is not None:
            env["SGLANG_MORI_MOE_MAX_INPUT_TOKENS"] = moe
        if TWO_BATCH_OVERLAP_FLAG in map(str, t.model_args(role)):
            env["MORI_ENABLE_SDMA"] = "true"  # two-batch overlap's all-to-all on the SDMA engines, as it ran
    words = [word(f"{k}={v}") for k, v in env.items()]
    if mori:  # last of MoRI's: its value is env.sh's
        words.append(word("SGLANG_MORI_NUM_MAX_DISPATCH_TOKENS_PER_RANK=", Ref(DISPATCH_TOKENS_VAR[role])))
    words += [word(x) for x in _acceptance_env(t, role)]
    return ["env", *words] if words else []


def _parallel_args(t: Target, role: str) -> list:
    """TP; EP over the worker's GPUs (lint refuses an ep other than 1 or tp); DP attention, a rank a GPU."""
    w = t.worker(role)
    return [
        *("--tp-size", w.tp),
        *(("--ep-size", w.ep) if splits_experts(w) else ()),
        *(("--dp-size", w.tp, "--enable-dp-attention") if w.dp_attn else ()),
    ]


def _mtp_args(t: Target) -> list:
    """MTP's draft steps on both roles: the draft layers take part in prefill's KV as well as decode's
    verification, so the two must match (SGLang refuses a mismatch since 0.5.15). A launch runs them exactly
    when spec-decoding is mtp: render refuses the two disagreeing."""
    n = t.mtp_steps
    if not n:
        return []
    draft = t.recipe.mtp_draft_model
    path = ["--speculative-draft-model-path", f"{t.launch.model_root}/{draft}"] if draft else []
    return [*path, "--speculative-num-steps", n, "--speculative-num-draft-tokens", n + 1]


def _model_args(t: Target, role: str, ports: Ports) -> list:
    """The engine line as the model's facts (configs/models.yaml) and the entry's settings make it."""
    s = t.settings(role)
    args = [
        *_role_env(t, role),
        "python3",
        "-m",
        "sglang.launch_server",
        "--model-path",
        t.model_path,
        "--served-model-name",
        t.entry.model,
        "--host",
        NODE_ADDR,
        "--port",
        ports.engine,
        *_parallel_args(t, role),
        *(["--trust-remote-code"] if t.model.remote_code else []),
        *t.model_args(role),
        *_mtp_args(t),
        *_hicache_args(t, role),
    ]
    if _dep(t, role):  # over MoRI only (check), which derives it in env.sh
        args += [MAX_RUNNING_FLAG, Ref(MAX_RUNNING_VAR)]
    for flag, name in (
        ("--mem-fraction-static", "MEM_FRACTION_STATIC"),
        ("--context-length", "MAX_MODEL_LEN"),
    ):
        if s[name] is not None:
            args += [flag, s[name]]
    args += [x for flag, value in reg.flag_values(s) for x in ((flag,) if value is True else (flag, value))]
    return args


def _recipe_args(t: Target, role: str, ports: Ports) -> list:
    """The engine line of a point run from its srt-slurm recipe: the launch's model, addresses and
    parallelism (the recipe's agree: srt.check), then the recipe's own flags."""
    return [
        *_role_env(t, role),
        *("python3", "-m", "sglang.launch_server", "--model-path", t.model_path),
        *("--served-model-name", t.entry.model, "--host", NODE_ADDR, "--port", ports.engine),
        *_parallel_args(t, role),
        *srt.engine_args(t, role),
    ]


def _sglang_service(t: Target, role: str, ports: Ports, timeouts: Timeouts) -> Service:
    args = _model_args(t, role, ports) if t.srt is None else _recipe_args(t, role, ports)
    args.append("--enable-metrics")  # the KV proof and the report read them
    if role in reg.ROLES:
        args += ["--disaggregation-mode", role, "--disaggregation-transfer-backend", t.kv_transfer]
        if role == "prefill":
            args += ["--disaggregation-bootstrap-port", ports.mooncake_bootstrap]
        if uses_rdma(t):
            args += ["--disaggregation-ib-device", ",".join(t.launch.nic_devices)]
    return Service(
        name="sglang",
        argv=argv(*args),
        ready_url=word("http://", NODE_ADDR, f":{ports.engine}/health"),
        ready_timeout=timeouts.engine_ready,
    )


def engine_env(t: Target, ports: Ports) -> dict:
    """SGLang reads its PD settings from flags; MoRI's knobs, where its collectives and RDMA go and the
    traffic class RDMA is marked with (the runner's), from the environment; then the model's own. From a
    recipe, only the site's part: the recipe's own environment is on each engine's line."""
    env: dict[str, str | int] = {}
    budget = mori_budget(t)  # None unless over MoRI
    if budget is not None:
        env.update(MORI_ENV)
        env["SGLANG_MORI_DISPATCH_INTER_KERNEL_SWITCH_THRESHOLD"] = budget.switch_threshold
    if _over_mori(t):
        iface, tc = t.launch.data_plane_interface, t.launch.rdma_traffic_class
        assert iface is not None and tc is not None, "check() refuses MoRI without them"
        env["GLOO_SOCKET_IFNAME"] = env["NCCL_SOCKET_IFNAME"] = iface
        env["NCCL_IB_HCA"] = ",".join(t.launch.nic_devices)
        env["MORI_RDMA_TC"] = env["MORI_IO_TC"] = tc.traffic_class
        env["MORI_RDMA_SL"] = env["MORI_IO_SL"] = tc.priority
    if t.srt is None:
        env.update(t.recipe.env)
    return env


def uses_rdma(t: Target) -> bool:
    """Its Mooncake and MoRI backends move KV over the runner's RDMA devices when it names them (the PD
    flags)."""
    return t.disagg and bool(t.launch.nic_devices)


def transport(t: Target) -> tuple:
    """SGLang's Mooncake backend takes its devices from flags (--disaggregation-ib-device): no setting."""
    return ()


# MoRI's failures that do not end the engine (scripts/logwatch.py fails the job on them instead): upstream
# reports say a prefill whose KV pool MoRI cannot register may hang rather than exit (ROCm/mori#497), and a
# transfer whose NIC ran out of retries fails only when SGLANG_DISAGGREGATION_WAITING_TIMEOUT expires (an
# hour in MORI_ENV; 300 s in sgl-project/sglang#29127, where one faulty NIC failed every transfer).
MORI_REGISTER_FAILED = {
    "issue": "mori-rdma-register-failed",
    "title": "MoRI could not register the engine's KV memory for RDMA with the NIC",
    "regex": r"RegisterRdmaMemoryRegion failed!",
    "fix": "errno 22 (EINVAL): the NIC refuses the access flags MoRI asks for (AMD ionic NICs and remote "
    "atomics, ROCm/mori#497): a MoRI build without them; errno 14 (EFAULT): GPU memory cannot be pinned "
    "for RDMA on this node (no peer-memory module or dma-buf path)",
    "source": "recipes/sglang.py MORI_REGISTER_FAILED",
}
RDMA_RETRY_EXCEEDED = {
    "issue": "rdma-retry-exceeded",
    "title": "a NIC's RDMA retries to its peer ran out (work completion status 12, transport retry counter "
    "exceeded): the KV transfer failed and its request waits out SGLang's waiting timeout",
    "regex": r"cqe with error 12\b|transport retry counter exceeded",
    "fix": "the NIC named before it, or its link, is faulty, or it cannot reach the peer's (another subnet): "
    "check it with nicctl and ibv_devinfo on that node; the job's verdict excludes the node next time",
    "source": "recipes/sglang.py RDMA_RETRY_EXCEEDED",
}


def watch_signatures(t: Target) -> tuple:
    """MoRI's failures that leave the engine up (no LMCache server on SGLang nodes: check() refuses an
    offload backend)."""
    return (MORI_REGISTER_FAILED, RDMA_RETRY_EXCEEDED) if _over_mori(t) else ()


def l1_budget(t: Target):
    """The DRAM budget HiCache's host pool is sized from (None: no HiCache, or sized by ratio)."""
    return hicache_budget(t)


def shell_env(t: Target) -> tuple:
    """MoRI's derived budgets (MoriBudget), which the engine lines expand; nothing without MoRI."""
    budget = mori_budget(t)
    return () if budget is None else tuple(sorted((k, str(v)) for k, v in budget.values().items()))


def shell_notes(t: Target) -> tuple:
    budget = mori_budget(t)
    notes = (*(() if budget is None else budget.notes()), *_hicache_notes(t), *_acceptance_notes(t))
    return (*notes, *srt.notes(t))


def _hicache_notes(t: Target) -> tuple:
    if not _hicache(t):
        return ()
    role = _offload_role(t)
    if t.recipe.hicache_sizing == "ratio":
        return (
            f"HiCache on {role}: host pool = HICACHE_RATIO {t.settings(role)['HICACHE_RATIO']} x the GPU KV "
            "pool (the model's",
            "recipe sizes it by ratio: its hybrid KV pool refuses an absolute --hicache-size).",
        )
    b = hicache_budget(t)
    return (
        f"HiCache on {role}: the server's KV-offload DRAM budget, {b.budget_gb} GB "
        f"(min({b.available_mib} MiB available, {b.cap_mib} MiB cap) x",
        f"dram-utilization {b.utilization} x {b.gpus_used}/{b.gpus_per_node} GPUs), over its "
        f"{_ranks_per_node(t)} ranks on the node: --hicache-size {hicache_size_gb(t)} (GB a rank).",
    )


def caveats(t: Target) -> tuple:
    """What the numbers of this launch compare only with: a simulated MTP acceptance."""
    length = simulated_acceptance(t)
    if length is None:
        return ()
    return (
        f"MTP acceptance simulated at the model's golden length {length} ({t.mtp_steps} draft steps), not "
        "measured: compare only with runs that simulate the same",
    )


def _acceptance_notes(t: Target) -> tuple:
    length = simulated_acceptance(t)
    if length is None:
        return ()
    return (
        f"MTP acceptance is simulated on decode at the model's golden length {length} for {t.mtp_steps} "
        "draft steps",
        "(SGLANG_SIMULATE_ACC_LEN): a trace replay does not reproduce real token traffic.",
    )


def router_service(t: Target, backends: list, ports: Ports, timeouts: Timeouts, counts: dict) -> Service:
    args = [
        "python3",
        "-m",
        "sglang_router.launch_router",
        "--pd-disaggregation",
        *backends,
        "--host",
        NODE_ADDR,
        "--port",
        ports.router,
        *(_policies(t) if t.srt is None else cli(t.srt.frontend_args)),
        "--prometheus-host",
        NODE_ADDR,
        "--prometheus-port",
        ports.router_metrics,
    ]
    if t.srt is None or "request-timeout-secs" not in t.srt.frontend_args:
        args += ["--request-timeout-secs", 1800]
    # Its /health answers 200 before any worker registered; /workers counts the registered ones
    # (a worker registers once its /health answers).
    url = word("http://", NODE_ADDR, f":{ports.router}/workers")
    expect = tuple(f"stats.{role}_count={n}" for role, n in counts.items())
    return Service("router", argv(*args), url, timeouts.router_ready, ready_expect=expect)


def _policies(t: Target) -> list:
    """As InferenceX's known-working MI355X launch routes: an agentic run's prefill workers (and each
    worker's DP ranks) chosen by a consistent hash of the request (its agentic launcher's
    PREFILL_ROUTER_POLICY: a session's turns reach the worker holding its prefix), the breaker off and a
    patient health check, so a busy long-context prefill is never ejected; a fixed-length sweep random for
    both roles with a short circuit breaker and retries."""
    if _agentic(t):
        return [
            *("--policy", "consistent_hashing", "--dp-aware"),
            *("--cache-threshold", "0.3", "--balance-abs-threshold", 2, "--balance-rel-threshold", "1.1"),
            "--disable-circuit-breaker",
            *("--health-failure-threshold", 100, "--health-check-timeout-secs", 600),
            *("--health-check-interval-secs", 30),
        ]
    return [
        *("--policy", "random", "--prefill-policy", "random", "--decode-policy", "random"),
        *("--cb-timeout-duration-secs", 15, "--retry-max-retries", 3),
    ]


def router_metrics_port(t: Target, ports: Ports) -> int:
    return ports.router_metrics


def served_model(t: Target) -> str:
    """The model's id (--served-model-name)."""
    return t.entry.model


def has_metrics(t: Target) -> bool:
    return True


def proof_roles(t: Target) -> tuple:
    """SGLang has no decode-side counter of KV received: the prefill's prompt tokens and the decode's
    generated ones."""
    return ("prefill", "decode")


def flushes_caches(t: Target) -> bool:
    """An agentic sweep empties every engine's caches before each concurrency (its radix and HiCache tiers:
    SGLang's /flush_cache), so each is measured cold, as InferenceX's known-working agentic launch does."""
    return _agentic(t)
