"""`vllm serve` command lines: the rendered golden ones are accepted; what vLLM rejects is rejected."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from sim import cli, kvconfig
from sim.settings import SettingsError, load, parse_faults

from .conftest import GOLDEN, VLLM, make_model, sim_env
from .inproc import DECODE_KV, LMCACHE_CHILD, PREFILL_KV, multi_kv

# The simulator's lines; a cluster:local-cpu line (engine-build cpu) is judged by the real vLLM parser
# (tests/engines/test_real_engines.py, make check-engines) and run by tests/integration/test_cpu_engines.py.
GOLDEN_SCRIPTS = sorted(
    script
    for script in GOLDEN.glob("*/*/server_vllm.sh")
    if json.loads((script.parent / "plan.json").read_text())["engine_build"] != "cpu"
)


def golden_commands(script: Path, **values: str) -> list[list[str]]:
    """Each `start_service vllm <argv>` of a rendered node script, expanded by bash itself with env.sh
    sourced and the runtime variables set, so quoting is exactly what the node would run."""
    lines, commands, current = script.read_text().splitlines(), [], None
    for line in lines:
        text = line.strip()
        if current is None and text.startswith("start_service vllm "):
            current = text.removeprefix("start_service vllm ")
        elif current is not None:
            current += " " + text
        if current is not None and not current.endswith("\\"):
            commands.append(current)
            current = None
        elif current is not None:
            current = current[:-1]
    env = {"NODE_ADDR": "127.0.0.1", "LOCAL_ADDR": "127.0.0.1", **values}
    setup = "".join(f"{k}={v}; " for k, v in env.items())
    out = []
    for command in commands:
        script_text = f'source "{script.parent}/env.sh"; {setup}printf "%s\\0" {command}'
        raw = subprocess.run(["bash", "-c", script_text], capture_output=True, check=True).stdout
        out.append(raw.decode().split("\0")[:-1])
    return out


def serve_args(argv: list[str]) -> list[str]:
    """The arguments after `vllm serve` in `env VAR=... vllm serve ...`."""
    return argv[argv.index("vllm") + 2 :]


def test_golden_scripts_exist():
    assert len(GOLDEN_SCRIPTS) >= 2


@pytest.mark.parametrize("script", GOLDEN_SCRIPTS, ids=lambda p: p.parent.parent.name)
def test_golden_command_lines_are_accepted(script: Path, tmp_path: Path):
    commands = golden_commands(script, LMCACHE_MP_MQ_TIMEOUT="30")
    roles = []
    for argv in commands:
        assert argv[0] == "env" and argv[1].startswith("VLLM_HOST_IP=")
        args = cli.parse_serve_args(serve_args(argv))
        make_model(tmp_path, args.model_tag.lstrip("/"), max_position_embeddings=262144)
        config = cli.resolve(args, model_root=str(tmp_path))
        roles.append("prefill" if config.kv.produces else "decode" if config.kv.consumes else "plain")
        assert config.served_names == ("amd/Kimi-K2.5-MXFP4",) and config.block_size == 1
        if config.kv.produces:
            assert config.kv.lmcache == kvconfig.LMCache("127.0.0.1", 5555, 30.0, 10.0)
            assert config.kv.load_failure_policy == "recompute"
        else:
            assert config.kv.lmcache is None and config.kv.load_failure_policy == "fail"
    assert roles == ["prefill", "decode"]


def parse_error(args: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as exit_info:
        cli.parse_serve_args(args)
    assert exit_info.value.code == 2
    return capsys.readouterr().err


@pytest.mark.parametrize(
    "args, message",
    [
        (["/m", "--bogus-flag"], "unrecognized arguments: --bogus-flag"),
        # An abbreviation stands for the one real flag it starts (here with its value missing) ...
        (["/m", "--tensor-parallel"], "argument --tensor-parallel-size/-tp: expected one argument"),
        # ... and one of several is refused, as vLLM's argparse does.
        (["/m", "--max-num", "4"], "ambiguous option: --max-num could match"),
        (["/m", "-O", '{"mode": 3}'], 'unrecognized arguments: -O {"mode": 3}'),  # -O is a level
        (["/m", "--port", "eighty"], "argument --port: invalid int value"),
        (["/m", "--max-model-len", "lots"], "argument --max-model-len"),
        (["/m", "--kv-transfer-config", "{not json"], "invalid JSON"),
        (["/m", "--kv-transfer-config", "[]"], "must be a JSON object"),
        (
            ["/m", "--kv-transfer-config", '{"kv_connector": "MooncakeConnector", "kv_role": "producer"}'],
            "kv_role",
        ),
        (["/m", "--kv-transfer-config", '{"kv_connector": "MooncakeConnector"}'], "kv_role: required"),
        (
            ["/m", "--kv-transfer-config", '{"kv_connector": "X", "kv_role": "kv_both", "kv_roll": 1}'],
            "kv_roll: extra inputs are not permitted",
        ),
        (
            ["/m", "--kv-transfer-config", '{"kv_role": "kv_both", "kv_load_failure_policy": "retry"}'],
            "kv_load_failure_policy",
        ),
        ([], "required: model_tag"),
    ],
)
def test_usage_errors_exit_2(args, message, capsys):
    assert message in parse_error(args, capsys)


def test_what_vllm_takes_at_parse_time():
    """vLLM's preprocessing and parser: --model moved to the positional, -O3 a level, any block size,
    one or more API keys, on/off pairs with their --disable-/--no- forms."""
    args = cli.parse_serve_args(
        ["--model", "/m", "-O3", "--block-size", "3", "--api-key", "a", "b", "--disable-prefix-caching"]
    )
    assert (args.model_tag, args.optimization_level, args.block_size) == ("/m", "3", 3)
    assert (args.api_key, args.enable_prefix_caching) == (["a", "b"], False)
    args = cli.parse_serve_args(["/m", "-ep", "--no-trust-remote-code", "--enable-custom-all-reduce"])
    assert (args.enable_expert_parallel, args.trust_remote_code, args.disable_custom_all_reduce) == (
        True,
        False,
        False,
    )


@pytest.mark.parametrize(
    "args, message",
    [
        (["--kv-cache-dtype", "fp4"], "Invalid kv_cache_dtype: 'fp4'. Valid values are: ["),
        (["--distributed-executor-backend", "slurm"], "distributed_executor_backend: Input should be"),
        (["-tp", "3"], "Total number of attention heads (64) must be divisible by tensor parallel size (3)."),
        (["--enable-expert-parallel"], "Number of experts in the model must be greater than 0"),
        (["--max-model-len", "300000"], "User-specified max_model_len (300000) is greater than the derived"),
    ],
)
def test_what_vllm_refuses_when_building_its_config(args, message, tmp_path: Path):
    """Start-up errors (exit 1) in vLLM 0.33's words, checked against the model's config.json."""
    model = make_model(tmp_path, "m", max_position_embeddings=262144, num_attention_heads=64)
    with pytest.raises(cli.StartupError) as error:
        cli.resolve(cli.parse_serve_args([str(model), *args]))
    assert message in str(error.value)


def test_flexible_spelling_and_human_readable_ints():
    args = cli.parse_serve_args(
        [
            "/m",
            "--max_model_len=32k",
            "--tensor_parallel_size",
            "8",
            "-tp",
            "4",
            "--no-enable-prefix-caching",
            "--max-num-batched-tokens",
            "8K",
        ]
    )
    assert (args.max_model_len, args.tensor_parallel_size, args.enable_prefix_caching) == (32000, 4, False)
    assert args.max_num_batched_tokens == 8192


def kv_error(cfg: dict) -> str:
    with pytest.raises(kvconfig.KVConfigError) as error:
        kvconfig.resolve_connectors(kvconfig.parse_kv_transfer_config(json.dumps(cfg)))
    return str(error.value)


def with_children(*children: dict) -> dict:
    return {**multi_kv(), "kv_connector_extra_config": {"connectors": list(children)}}


LM_NO_PATH = {k: v for k, v in LMCACHE_CHILD.items() if k != "kv_connector_module_path"}
MOONCAKE_CHILD = {k: v for k, v in PREFILL_KV.items() if k != "kv_load_failure_policy"}


@pytest.mark.parametrize(
    "cfg, message",
    [
        ({**DECODE_KV, "kv_connector": "NoSuchConnector"}, "Unsupported connector type: NoSuchConnector"),
        ({**DECODE_KV, "kv_connector": "NixlConnector"}, "not simulated"),
        ({**DECODE_KV, "kv_connector_extra_config": {"mooncake_protocol": "rdma"}}, "needs RDMA devices"),
        ({**DECODE_KV, "kv_connector_extra_config": {"mooncake_protocol": "udp"}}, "mooncake_protocol"),
        (
            {**DECODE_KV, "kv_connector_extra_config": {"mooncake_protocol": "tcp", "num_workers": 0}},
            "num_workers",
        ),
        ({**DECODE_KV, "kv_connector_extra_config": {"mooncake_protocol": "tcp", "workers": 2}}, "unknown"),
        ({**multi_kv(), "kv_connector_extra_config": {}}, "connectors must be a non-empty list"),
        (with_children(MOONCAKE_CHILD, LM_NO_PATH), "kv_connector_module_path must be"),
        (with_children(MOONCAKE_CHILD, {**LMCACHE_CHILD, "kv_role": "kv_consumer"}), "never stores"),
        (with_children(MOONCAKE_CHILD, {**LMCACHE_CHILD, "kv_role": None}), "kv_role: required"),
        (with_children(MOONCAKE_CHILD, {**LMCACHE_CHILD, "extra": 1}), "extra inputs are not permitted"),
        (with_children(MOONCAKE_CHILD, MOONCAKE_CHILD), "at most one MooncakeConnector"),
        (multi_kv(lmcache={"lmcache.mp.host": "127.0.0.1"}), "lmcache.mp.host must be tcp://"),
        (multi_kv(lmcache={"lmcache.mp.port": "x"}), "must be numbers"),
    ],
)
def test_connector_setup_errors(cfg, message):
    assert message in kv_error(cfg)


def test_prefill_multiconnector_resolves_both_children():
    extra = {
        "lmcache.mp.host": "tcp://10.1.1.1",
        "lmcache.mp.port": 6000,
        "lmcache.mp.mq_timeout": 5,
        "lmcache.mp.bogus": 1,
    }
    kv = kvconfig.resolve_connectors(multi_kv(lmcache=extra))
    assert kv.produces and not kv.consumes and kv.mooncake.protocol == "tcp"
    assert kv.lmcache == kvconfig.LMCache("10.1.1.1", 6000, 5.0, 10.0)
    assert kv.warnings == ("LMCacheMPConnector: ignoring unknown extra config key 'lmcache.mp.bogus'",)


@pytest.mark.parametrize(
    "model, message",
    [
        ("/nowhere/model", "Invalid repository ID or local directory specified"),
        ("org/model", "cannot download from a hub"),
    ],
)
def test_model_must_be_a_local_directory(model, message):
    with pytest.raises(cli.StartupError, match=message):
        cli.resolve(cli.parse_serve_args([model]))


def test_model_dir_needs_config_json_and_max_model_len_fits(tmp_path: Path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(cli.StartupError, match="no config.json"):
        cli.resolve(cli.parse_serve_args([str(tmp_path / "empty")]))
    model = make_model(tmp_path, "m", max_position_embeddings=1024)
    with pytest.raises(cli.StartupError, match="greater than the derived max_model_len"):
        cli.resolve(cli.parse_serve_args([str(model), "--max-model-len", "2048"]))
    assert cli.resolve(cli.parse_serve_args([str(model)])).max_model_len == 1024


@pytest.mark.parametrize(
    "text, expected",
    [
        ("", {}),
        ("crash-at-start", {"crash_at_start": True}),
        ("crash-after:3", {"crash_after": 3}),
        ("exit0-after:2, error-rate:0.25", {"exit0_after": 2, "error_rate": 0.25}),
        ("hang-after:0", {"hang_after": 0}),
        ("kv-stall-after:4", {"kv_stall_after": 4}),
        ("error-after:5", {"error_after": 5}),
    ],
)
def test_fault_spec(text, expected):
    faults = parse_faults(text)
    assert {k: getattr(faults, k) for k in expected} == expected


@pytest.mark.parametrize(
    "env",
    [
        {"SIM_FAULT": "explode"},
        {"SIM_FAULT": "error-rate:2"},
        {"SIM_DECODE_S_PER_TOKEN": "fast"},
        {"SIM_FAULT_ROLE": "router"},
    ],
)
def test_bad_settings_are_named(env):
    with pytest.raises(SettingsError, match=next(iter(env))):
        load(env)


def test_faults_filtered_by_role_and_host():
    env = {"SIM_FAULT": "crash-at-start", "SIM_FAULT_ROLE": "decode", "SIM_FAULT_HOST": "127.0.0.3"}
    assert load(env, role="decode", host="127.0.0.3").faults.crash_at_start
    assert not load(env, role="prefill", host="127.0.0.3").faults.any
    assert not load(env, role="decode", host="127.0.0.2").faults.any


@pytest.mark.parametrize(
    "argv, code, message",
    [
        (
            ["serve", "{model}", "--no-such-flag"],
            2,
            "vllm serve: error: unrecognized arguments: --no-such-flag",
        ),
        (
            ["serve", "{model}", "--kv-transfer-config", '{"kv_connector": 1}'],
            2,
            "argument --kv-transfer-config",
        ),
        (["serve", "/no/such/model"], 1, "Invalid repository ID or local directory"),
        (["bench"], 2, "invalid choice: 'bench'"),
        (["--version"], 0, cli.VERSION),
    ],
)
def test_the_executable_exit_codes(argv, code, message, tmp_path: Path):
    """Through sim/bin/vllm on PATH, as the node scripts call it."""
    model = str(make_model(tmp_path))
    run = subprocess.run(
        ["vllm", *(a.replace("{model}", model) for a in argv)],
        env=sim_env(),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert run.returncode == code, run.stderr
    assert message in run.stdout + run.stderr
    assert VLLM.stat().st_mode & 0o111
