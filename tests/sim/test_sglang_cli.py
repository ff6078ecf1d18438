"""`python3 -m sglang.launch_server ARGS` as the simulated MiniCPM-SALA build parses them: the command lines
the renderer emits are accepted, what SGLang rejects is rejected (usage errors exit 2, start-up errors 1)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from sim import sglang_cli
from sim.cli import StartupError

from .conftest import SGLANG, free_port, make_model, sim_env

MODEL = "/models/openbmb/MiniCPM-SALA"
# What the renderer emits for a prefill node (the optional flags included), as ARGS of launch_server.
PREFILL = (
    f"--model-path {MODEL} --served-model-name openbmb/MiniCPM-SALA --host 127.0.0.11 --port 8000 "
    "--tp-size 8 --trust-remote-code --disable-radix-cache --chunked-prefill-size 8192 "
    "--max-running-requests 32 --skip-server-warmup --attention-backend minicpm_flashinfer --dense-as-sparse "
    "--mem-fraction-static 0.85 --context-length 32768 --enable-metrics --disaggregation-mode prefill "
    "--disaggregation-transfer-backend mooncake --disaggregation-bootstrap-port 8998 "
    "--disaggregation-ib-device mlx5_0,mlx5_1"
).split()
DECODE = [a for a in PREFILL if a not in ("--disaggregation-bootstrap-port", "8998")]
DECODE[DECODE.index("prefill")] = "decode"
SINGLE = PREFILL[: PREFILL.index("--disaggregation-mode")]


def resolve(argv: list[str], root: Path, **hf: object) -> sglang_cli.SGLangConfig:
    make_model(root, MODEL.lstrip("/"), **(hf or {"max_position_embeddings": 65536}))
    return sglang_cli.resolve(sglang_cli.parse_args(argv), model_root=str(root))


def test_rendered_command_lines_resolve(tmp_path: Path):
    prefill, decode, single = (resolve(a, tmp_path) for a in (PREFILL, DECODE, SINGLE))
    assert (prefill.mode, decode.mode, single.mode) == ("prefill", "decode", "null")
    assert prefill.served_names == ("openbmb/MiniCPM-SALA",) and prefill.tensor_parallel == 8
    assert prefill.bootstrap_port == 8998 and prefill.ib_devices == ("mlx5_0", "mlx5_1")
    assert prefill.max_model_len == 32768 and prefill.max_running == 32 and not prefill.radix_cache
    # SGLang turns CUDA graphs off on a prefill server: the kv_indptr crash can only hit decode and single
    assert not prefill.cuda_graph and not prefill.kv_indptr_bug
    assert decode.kv_indptr_bug and single.kv_indptr_bug
    info = decode.server_args
    assert info["tp_size"] == 8 and info["disaggregation_mode"] == "decode" and info["dp_size"] == 1
    assert info["served_model_name"] == "openbmb/MiniCPM-SALA" and info["disable_radix_cache"] is True


@pytest.mark.parametrize(
    "extra, bug",
    [
        ([], True),
        (["--disable-cuda-graph"], False),
        (["--attention-backend", "minicpm_flashattn"], False),  # the later flag wins, as in argparse
    ],
)
def test_kv_indptr_bug_trigger_and_workarounds(extra, bug, tmp_path: Path):
    assert resolve(SINGLE + extra, tmp_path).kv_indptr_bug is bug
    without_sparse = [a for a in SINGLE if a != "--dense-as-sparse"]
    assert resolve(without_sparse, tmp_path).kv_indptr_bug is False


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--model-path", "m", "--no-such-flag"], "unrecognized arguments: --no-such-flag"),
        (["--port", "8000"], "the following arguments are required: --model-path/--model"),
        (
            ["--model-path", "m", "--disaggregation-mode", "both"],
            "argument --disaggregation-mode: invalid choice",
        ),
        (
            ["--model-path", "m", "--attention-backend", "flashattn"],
            "argument --attention-backend: invalid choice",
        ),
        (["--model-path", "m", "--disaggregation-transfer-backend", "tcp"], "invalid choice: 'tcp'"),
        (
            ["--model-path", "m", "--tp-size", "eight"],
            "argument --tp-size/--tensor-parallel-size: invalid",
        ),
        (["--model-path", "m", "--mem-fraction-static", "high"], "invalid float value: 'high'"),
        # A prefix of several real flags is refused, as SGLang's argparse does (one of one is taken).
        (
            ["--model-path", "m", "--disable-cuda"],
            "ambiguous option: --disable-cuda could match --disable-cuda-graph, --disable-cuda-graph-padding",
        ),
        (["--model-path", "m", "--attention-backend", "cutlass_mla"], "invalid choice: 'cutlass_mla'"),
        (["--model-path", "m", "--context-length", "32K"], "Invalid integer value: '32K'"),
        (["--model-path", "m", "--dense-as-sparse=1"], "ignored explicit argument"),
    ],
)
def test_usage_errors_exit_2(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        sglang_cli.parse_args(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: launch_server.py") and message in err


@pytest.mark.parametrize(
    "extra, message",
    [
        (
            ["--disaggregation-transfer-backend", "nixl"],
            "--disaggregation-transfer-backend nixl is not simulated",
        ),
        (["--dp-size", "2"], "data parallelism"),
        (
            ["--context-length", "131072"],
            "User-specified context_length (131072) is greater than the derived",
        ),
        (["--enable-hierarchical-cache"], "mutually exclusive"),
        (["--served-model-name", "a:b"], "cannot contain a colon"),
        (["--disaggregation-ib-device", "mlx5_0,"], "an empty device name"),
        (["--tp-size", "0"], "tp_size must be >= 1"),
    ],
)
def test_startup_errors(extra, message, tmp_path: Path):
    with pytest.raises(StartupError) as error:
        resolve(PREFILL + extra, tmp_path)
    assert message in str(error.value)


def test_decode_refuses_prefill_only_flags(tmp_path: Path):
    with pytest.raises(StartupError, match="Cannot set --disaggregation-decode-tp for the decode engine"):
        resolve([*DECODE, "--disaggregation-decode-tp", "4"], tmp_path)
    with pytest.raises(StartupError, match="one tp is multiple of the other"):
        resolve([*PREFILL, "--disaggregation-decode-tp", "3"], tmp_path)


def test_context_length_follows_the_model_config(tmp_path: Path, monkeypatch):
    argv = [a for a in SINGLE if a not in ("--context-length", "32768")]
    assert resolve(argv, tmp_path, max_position_embeddings=4096).max_model_len == 4096
    rope = {"factor": 4.0, "rope_type": "yarn"}
    assert resolve(argv, tmp_path, seq_length=8192, rope_scaling=rope).max_model_len == 32768
    monkeypatch.setenv("SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN", "1")
    assert (
        resolve([*argv, "--context-length", "9000"], tmp_path, max_position_embeddings=4096).max_model_len
        == 9000
    )


@pytest.mark.parametrize(
    "argv, code, message",
    [
        (
            ["--model-path", "/nowhere/model"],
            1,
            "ERROR [sim sglang] Invalid repository ID or local directory",
        ),
        (["--model-path", "m", "--bogus"], 2, "launch_server.py: error: unrecognized arguments: --bogus"),
    ],
)
def test_the_executable_exit_codes(argv, code, message):
    done = subprocess.run([str(SGLANG), *argv], env=sim_env(), capture_output=True, text=True, timeout=30)
    assert done.returncode == code, done.stderr
    lines = done.stderr.strip().splitlines()
    assert message in lines[-1]
    if code == 1:  # a start-up error is one line
        assert len(lines) == 1


def test_model_root_and_missing_config_json(tmp_path: Path):
    (tmp_path / "models" / "empty").mkdir(parents=True)
    argv = [str(SGLANG), "--model-path", "/models/empty", "--port", str(free_port())]
    done = subprocess.run(
        argv, env=sim_env(SIM_MODEL_ROOT=str(tmp_path)), capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 1 and "has no config.json" in done.stderr
