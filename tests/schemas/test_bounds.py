"""Absurd numbers get range errors naming the allowed range: concurrencies and how many per point,
sequence lengths, parallel sizes, token and LMCache settings, node DRAM and GPUs, waits. Each bound is far
above every real value (InferenceX's corpus and configs/) and documented in the field's description or the
settings registry, so docs/config-reference.md shows it."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from schemas import dram
from schemas import settings as reg
from schemas.config import Worker
from schemas.entries import dram_budget
from schemas.launch import LaunchProfile
from schemas.runners import Hardware, Runners

from .cases import AMDS, IX, Case, add, cases, check_accept, check_reject, s
from .conftest import SS, D, P, dump, rows, run_lint, runners_data, write

PS, DS = f"{P}.additional-settings", f"{D}.additional-settings"
TOKENS, CONC, PAR = 2**24, 65_536, 1024
FSL = [  # the agentic baseline as a fixed-seq-len scenario, for isl/osl
    ("del", f"{SS}.kv-offloading"),
    ("del", f"{SS}.kv-offload-backend"),
    ("rename", "scenarios.agentic-coding", "fixed-seq-len"),
    ("del", "scenarios.fixed-seq-len[0].dram-utilization"),
    s("scenarios.fixed-seq-len[0].isl", 8192),
    s("scenarios.fixed-seq-len[0].osl", 1024),
]
ISL, OSL = "scenarios.fixed-seq-len[0].isl", "scenarios.fixed-seq-len[0].osl"


def out_of(value, low, high) -> str:
    return f"{value} is out of range [{low}, {high}]"


# fmt: off
REJECT = [
    *cases("model",
        ("conc-item", [s(f"{SS}.conc-list", [8, CONC + 1])], f"{SS}.conc-list[1]", out_of(CONC + 1, 1, CONC),
         None, IX),
        ("conc-huge", [s(f"{SS}.conc-list", [10**30])], f"{SS}.conc-list[0]", out_of(10**30, 1, CONC)),
        # 20,000 concurrencies rendered a 21 MB script that bash could not run
        ("conc-count-20000", [s(f"{SS}.conc-list", list(range(1, 20_001)))], f"{SS}.conc-list",
         "at most 64 items", None, IX),
        ("conc-count-65", [s(f"{SS}.conc-list", list(range(1, 66)))], f"{SS}.conc-list", "at most 64 items"),
        ("conc-start", [("del", f"{SS}.conc-list"), s(f"{SS}.conc-start", CONC + 1), s(f"{SS}.conc-end", 1)],
         f"{SS}.conc-start", out_of(CONC + 1, 1, CONC)),
        ("conc-end", [("del", f"{SS}.conc-list"), s(f"{SS}.conc-start", 1), s(f"{SS}.conc-end", 10**9)],
         f"{SS}.conc-end", out_of(10**9, 1, CONC)),
        ("isl", FSL + [s(ISL, TOKENS + 1)], ISL, out_of(TOKENS + 1, 1, TOKENS), None, IX),
        ("osl-zero", FSL + [s(OSL, 0)], OSL, out_of(0, 1, TOKENS)),
        ("num-worker", [s(f"{P}.num-worker", PAR + 1)], f"{P}.num-worker", out_of(PAR + 1, 0, PAR), None, IX),
        ("num-worker-negative", [s(f"{D}.num-worker", -1)], f"{D}.num-worker", out_of(-1, 0, PAR), None, IX),
        ("tp", [s(f"{D}.tp", 10**6)], f"{D}.tp", out_of(10**6, 1, PAR)),
        ("pp", [s(f"{D}.pp", PAR + 1)], f"{D}.pp", out_of(PAR + 1, 1, PAR)),
        ("ep", [s(f"{P}.ep", PAR + 1)], f"{P}.ep", out_of(PAR + 1, 1, PAR)),
        ("dcp-size", [s(f"{D}.dcp-size", PAR + 1)], f"{D}.dcp-size", out_of(PAR + 1, 1, PAR)),
        ("pcp-size", [s(f"{P}.pcp-size", 0)], f"{P}.pcp-size", out_of(0, 1, PAR)),
        ("single-node-tp", [s(f"{SS}.tp", PAR + 1)], f"{SS}.tp", out_of(PAR + 1, 1, PAR), None, IX),
    ),
    *cases("_settings_known_and_typed",
        ("max-model-len", [add(PS, 1, f"MAX_MODEL_LEN={TOKENS + 1}")], f"{PS}[1]",
         f"MAX_MODEL_LEN: {out_of(TOKENS + 1, 1, TOKENS)}"),
        ("max-num-batched-tokens", [add(PS, 7, f"MAX_NUM_BATCHED_TOKENS={10**12}")], f"{PS}[7]",
         f"MAX_NUM_BATCHED_TOKENS: {out_of(10**12, 1, TOKENS)}"),
        ("max-num-seqs", [add(DS, 2, f"MAX_NUM_SEQS={CONC + 1}")], f"{DS}[2]",
         f"MAX_NUM_SEQS: {out_of(CONC + 1, 1, CONC)}"),
        ("l1-init-size", [add(PS, 7, "LMCACHE_L1_INIT_SIZE_GB=2794")], f"{PS}[7]",
         f"LMCACHE_L1_INIT_SIZE_GB: {out_of(2794, 1, 2793)}"),
        ("l1-read-ttl", [add(PS, 3, "LMCACHE_L1_READ_TTL_SECONDS=604801")], f"{PS}[3]",
         f"LMCACHE_L1_READ_TTL_SECONDS: {out_of(604801, 1, 604800)}"),
        ("chunk-size", [add(PS, 4, "LMCACHE_CHUNK_SIZE=65537")], f"{PS}[4]",
         f"LMCACHE_CHUNK_SIZE: {out_of(65537, 1, 65536)}"),
        ("mq-timeout", [add(PS, 6, "LMCACHE_MP_MQ_TIMEOUT=86401")], f"{PS}[6]",
         f"LMCACHE_MP_MQ_TIMEOUT: {out_of(86401, 1, 86400)}"),
        ("max-workers", [add(PS, 5, "LMCACHE_MAX_WORKERS=257")], f"{PS}[5]",
         f"LMCACHE_MAX_WORKERS: {out_of(257, 1, 256)}"),
        ("mtp-size", [add(DS, 2, "DECODE_MTP_SIZE=9")], f"{DS}[2]", f"DECODE_MTP_SIZE: {out_of(9, 0, 8)}"),
    ),
]
ACCEPT = [
    *cases("model",
        ("at-the-bounds", [s(f"{SS}.conc-list", list(range(CONC - 63, CONC + 1))), s(f"{P}.num-worker", PAR),
                           s(f"{D}.tp", PAR), s(f"{D}.pp", PAR), s(f"{P}.ep", PAR)], IX),
        ("conc-range-at-the-bound", [("del", f"{SS}.conc-list"), s(f"{SS}.conc-start", 1),
                                     s(f"{SS}.conc-end", CONC)]),
        ("sequence-lengths", FSL + [s(ISL, TOKENS), s(OSL, TOKENS)]),
    ),
    *cases("_settings_known_and_typed",
        ("at-the-bounds", [add(PS, 1, f"MAX_MODEL_LEN={TOKENS}"), add(DS, 1, f"MAX_MODEL_LEN={TOKENS}"),
                           add(PS, 7, f"MAX_NUM_BATCHED_TOKENS={TOKENS}"), add(DS, 2, f"MAX_NUM_SEQS={CONC}"),
                           add(PS, 3, "LMCACHE_L1_READ_TTL_SECONDS=604800"),
                           add(PS, 4, "LMCACHE_CHUNK_SIZE=65536"),
                           add(PS, 6, "LMCACHE_MP_MQ_TIMEOUT=86400")]),
        ("l1-init-size-on-the-largest-node", [add(PS, 7, "LMCACHE_L1_INIT_SIZE_GB=2793"),
                                              s("scenarios.agentic-coding[0].dram-utilization", 1.0)],
         {"runner_ops": (s(f"hardware.{AMDS}.available-cpu-dram-mib", 64 * 2**20),)}),
    ),
]
# fmt: on


@pytest.mark.parametrize("case", REJECT)
def test_reject(case: Case):
    check_reject(case)


@pytest.mark.parametrize("case", ACCEPT)
def test_accept(case: Case):
    check_accept(case)


# ---------------------------------------------------------------- runners.yaml and launch.yaml (model)

TIB64 = 64 * 2**20  # MiB


def server_of(tp: int) -> Worker:
    return Worker.model_validate({"num-worker": 1, "tp": tp})


DAY = 86_400


# fmt: off
@pytest.mark.parametrize(("hardware", "key", "fragment"), [
    pytest.param({"available-cpu-dram-mib": TIB64 + 1, "gpus-per-node": 8}, "available-cpu-dram-mib",
                 out_of(TIB64 + 1, 1, TIB64), id="dram-above-64-tib"),
    pytest.param({"available-cpu-dram-mib": 0, "gpus-per-node": 8}, "available-cpu-dram-mib",
                 out_of(0, 1, TIB64), id="dram-zero"),
    pytest.param({"available-cpu-dram-mib": 1, "gpus-per-node": 65}, "gpus-per-node", out_of(65, 1, 64),
                 id="gpus-65"),
])
# fmt: on
def test_runner_hardware_out_of_range_at_its_line(tmp_path, hardware, key, fragment):
    data = runners_data()
    data["hardware"][AMDS] = hardware
    file = write(tmp_path, "runners.yaml", dump(data))
    code, out, _ = run_lint("--runners", file)
    line = next(i for i, text in enumerate(file.read_text().splitlines(), 1) if text.strip().startswith(key)
                and str(hardware[key]) in text)
    assert code == 1
    assert rows(out, file) == [(line, f"hardware.{AMDS}.{key}", fragment, "")]


def test_runner_hardware_at_the_bounds():
    Hardware.model_validate({"available-cpu-dram-mib": TIB64, "gpus-per-node": 64})


def test_derived_l1_size_is_bounded_by_the_3_tb_cap():
    """LMCACHE_L1_SIZE_GB is InferenceX's DRAM budget of a server in GiB: at most what 3 TB gives, however
    large the node, and exactly the largest LMCACHE_L1_INIT_SIZE_GB a config may ask for."""
    largest = Hardware.model_validate({"available-cpu-dram-mib": TIB64, "gpus-per-node": 8})
    init = reg.REGISTRY["LMCACHE_L1_INIT_SIZE_GB"]
    whole_node = server_of(8)
    assert dram_budget(largest, 1.0, whole_node).l1_gib == dram.MAX_L1_GIB == 2793 == init.high


def test_every_int_setting_has_an_upper_bound():
    unbounded = [n for n, s in reg.REGISTRY.items() if s.kind in ("int", "float") and s.high is None]
    assert unbounded == []


REAL = {"gpu-vendor": "amd", "partition": "compute", "container-runtime": "docker", "model-root": "/models",
        "data-plane-interface": "ens51np0", "image-staging": {"archive": "/models/images"},
        "node-setup": {"python": "3.12", "platform": "manylinux_2_28_x86_64"}}


# fmt: off
@pytest.mark.parametrize(("changes", "where", "fragment"), [
    pytest.param({"timeouts": {"engine-ready": DAY + 1}}, "engine-ready", out_of(DAY + 1, 1, DAY),
                 id="engine"),
    pytest.param({"timeouts": {"barrier": 10**9}}, "barrier", out_of(10**9, 1, DAY), id="barrier"),
    pytest.param({"timeouts": {"lmcache-ready": 0}}, "lmcache-ready", out_of(0, 1, DAY), id="lmcache-zero"),
    pytest.param({"timeouts": {"router-ready": DAY + 1}}, "router-ready", out_of(DAY + 1, 1, DAY),
                 id="router"),
    pytest.param({"benchmark": {"seconds": DAY + 1}}, "seconds", out_of(DAY + 1, 1, DAY), id="benchmark"),
    pytest.param({"engine-env": {"vllm": {"X": 2**63}}}, "engine-env", "out of range", id="env-int-64-bit"),
    pytest.param({"time-limit": "\u0660\u0664:00:00"}, "time-limit", "is not a time limit",
                 id="arabic-hours"),
])
# fmt: on
def test_launch_out_of_range(changes, where, fragment):
    with pytest.raises(ValidationError) as error:
        LaunchProfile.model_validate({**REAL, **changes})
    assert where in str(error.value) and fragment in str(error.value)


def test_launch_at_the_bounds():
    waits = {k: DAY for k in ("barrier", "lmcache-ready", "engine-ready", "router-ready")}
    env = {"vllm": {"BIG": 2**63 - 1, "SMALL": -(2**63)}}
    profile = {**REAL, "timeouts": waits, "benchmark": {"seconds": DAY}, "engine-env": env}
    LaunchProfile.model_validate(profile)


def test_runners_reference_values_are_within_bounds():
    from schemas.yamlio import load_file
    from tests.paths import reference

    Runners.model_validate(load_file(reference("runners.yaml")).data)
