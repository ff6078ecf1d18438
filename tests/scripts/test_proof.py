"""scripts/proof.py: answers alone prove nothing; the KV must have moved and LMCache must have served.
The SGLang smoke proof runs here against a fake router and metrics; tests/sim/test_sglang_pd.py runs it
against simulated engines behind the real sglang-router."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from conftest import LOAD_SLACK_S, SCRIPTS, drip, http_answer, send

PROOF = SCRIPTS / "proof.py"
sys.path.insert(0, str(SCRIPTS))
import proof  # noqa: E402 (scripts/ is not a package: it runs on the nodes)
from promtext import total  # noqa: E402
from proof import main as proof_main  # noqa: E402

SNAPSHOT = """\
# HELP vllm:prompt_tokens_by_source_total Prompt tokens by source.
vllm:prompt_tokens_by_source_total{model_name="m",engine="0",source="local_compute"} 10.0
vllm:prompt_tokens_by_source_total{model_name="m",engine="0",source="external_kv_transfer"} 608.0
vllm:external_prefix_cache_hits_total{model_name="m",engine="0"} 512.0
"""


def test_metric_total_reads_only_the_labelled_samples():
    assert total(SNAPSHOT, "vllm:prompt_tokens_by_source_total", 'source="external_kv_transfer"') == 608
    assert total(SNAPSHOT, "vllm:external_prefix_cache_hits_total") == 512
    assert total(SNAPSHOT, "vllm:nothing") is None


def l2(tmp_path: Path, **snapshots: str) -> subprocess.CompletedProcess:
    for name, text in snapshots.items():
        (tmp_path / f"{name}.prom").write_text(text)
    return subprocess.run(
        [sys.executable, str(PROOF), "l2", "--metrics-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_l2_proof_passes_when_any_prefill_node_served_hits(tmp_path):
    done = l2(tmp_path, prefill0=SNAPSHOT, prefill1="", decode0=SNAPSHOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "LMCache hits: prefill0 512 tokens, prefill1 0 tokens"


@pytest.mark.parametrize("snapshots", [{"prefill0": "", "prefill1": ""}, {"decode0": SNAPSHOT}])
def test_l2_proof_fails_without_hits_or_snapshots(tmp_path, snapshots):
    done = l2(tmp_path, **snapshots)
    assert done.returncode == 11
    assert "proof failed" in done.stderr


class FakePD:
    """A router and one prefill and one decode /metrics endpoint, on one local HTTP server: each smoke request
    adds to the counters as `fate` says (ok: SGLang PD worked; the other fates break one piece of it)."""

    def __init__(self, fate: str = "ok", *, exported: bool = True) -> None:
        self.fate, self.exported = fate, exported
        self.counts = {"prompt": 100.0, "generated": 50.0, "failed": 0.0}
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def _handler(self):
        pd = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                c = pd.counts
                if self.path == "/prefill/metrics":
                    text = (
                        f'sglang:prompt_tokens_total{{model_name="m"}} {c["prompt"]}\n' if pd.exported else ""
                    )
                else:
                    text = f'sglang:generation_tokens_total{{model_name="m"}} {c["generated"]}\n'
                    text += f'sglang:num_transfer_failed_reqs_total{{model_name="m"}} {c["failed"]}\n'
                self._send(200, text.encode())

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                prompt, tokens = len(body["messages"][0]["content"].split()) + 2, body["max_tokens"]
                c = pd.counts
                c["prompt"] += {"no-prefill": 0}.get(pd.fate, prompt)
                c["generated"] += {"no-decode": 0}.get(pd.fate, tokens)
                c["failed"] += 1 if pd.fate == "transfer-failed" else 0
                answer = {
                    "choices": [{"message": {"content": "w0 w1"}}],
                    "usage": {"prompt_tokens": prompt, "completion_tokens": tokens},
                }
                self._send(200, json.dumps(answer).encode())

            def _send(self, status: int, data: bytes):
                self.send_response(status)
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        return Handler

    def argv(self, *extra: str) -> list[str]:
        return [
            *("smoke", "--engine", "sglang", "--router", self.url, "--model", "m"),
            *(
                "--prefill-metrics",
                f"{self.url}/prefill/metrics",
                "--decode-metrics",
                f"{self.url}/decode/metrics",
            ),
            *extra,
        ]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def fake_pd():
    made: list[FakePD] = []

    def make(*args, **kwargs) -> FakePD:
        made.append(FakePD(*args, **kwargs))
        return made[-1]

    yield make
    for pd in made:
        pd.close()


def test_sglang_smoke_proves_what_sglang_metrics_can(fake_pd, capsys):
    pd = fake_pd()
    assert proof_main(pd.argv()) == 0
    out = capsys.readouterr().out
    assert out.startswith("smoke: HTTP 200, 8 tokens; KV moved: a prefill computed 608 prompt tokens")
    assert "the decode generated 8" in out


@pytest.mark.parametrize(
    "fate, message",
    [
        ("transfer-failed", "a decode KV transfer or bootstrap failed"),
        ("no-prefill", "no prefill computed the prompt"),
        ("no-decode", "the decodes generated 0 tokens"),
    ],
)
def test_sglang_smoke_fails_when_a_piece_of_pd_did_not_work(fake_pd, capsys, fate, message):
    assert proof_main(fake_pd(fate).argv()) == 11
    assert message in capsys.readouterr().err


def test_sglang_smoke_needs_the_engines_metrics(fake_pd, capsys):
    assert proof_main(fake_pd(exported=False).argv()) == 11
    assert "exports no sglang:prompt_tokens_total (is the engine started with --enable-metrics?)" in (
        capsys.readouterr().err
    )


@pytest.mark.parametrize(
    "argv",
    [
        [
            "smoke",
            "--engine",
            "sglang",
            "--router",
            "http://x",
            "--model",
            "m",
            "--decode-metrics",
            "http://d",
        ],
        [
            "smoke",
            "--router",
            "http://x",
            "--model",
            "m",
            "--decode-metrics",
            "http://d",
            "--prefill-metrics",
            "http://p/metrics",
        ],
        [
            "smoke",
            "--engine",
            "trtllm",
            "--router",
            "http://x",
            "--model",
            "m",
            "--decode-metrics",
            "http://d",
        ],
    ],
)
def test_smoke_engine_usage_errors(argv, capsys):
    with pytest.raises(SystemExit) as exit_:
        proof_main(argv)
    assert exit_.value.code == 2 and "error:" in capsys.readouterr().err


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_a_single_node_smoke_checks_the_answer_only(fake_pd, capsys, engine):
    pd = fake_pd()
    assert proof_main(["smoke", "--engine", engine, "--router", pd.url, "--model", "m"]) == 0
    assert "(one server: no KV to move)" in capsys.readouterr().out


def test_an_atom_smoke_checks_the_answer_through_atomesh(fake_pd, capsys):
    """ATOM exports no counters: its proof is the answer through atomesh, said as such."""
    pd = fake_pd()
    assert proof_main(["smoke", "--engine", "atom", "--router", pd.url, "--model", "m"]) == 0
    assert "through atomesh (prefill's KV handed to decode" in capsys.readouterr().out


def test_prefill_metrics_without_decode_metrics_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_:
        proof_main(
            [
                "smoke",
                "--engine",
                "sglang",
                "--router",
                "http://x",
                "--model",
                "m",
                "--prefill-metrics",
                "http://p/",
            ]
        )
    assert exit_.value.code == 2 and "a PD job names both" in capsys.readouterr().err


# ---------------------------------------------------------------- servers that misbehave

ANSWER = {"choices": [{"message": {"content": "w0"}}], "usage": {"prompt_tokens": 9, "completion_tokens": 1}}


@pytest.mark.parametrize(
    "answer, reason",
    [
        (drip(http_answer(json.dumps(ANSWER).encode())), "smoke request: no complete answer within 1 s"),
        (send(http_answer(b"x" * 5000)), "smoke request: answer body larger than 1000 bytes"),
        (send(http_answer(b"[" * 400 + b"]" * 400)), "the answer is not JSON we read (nested deeper"),
        (send(http_answer(b"busy\r\n\x1b[31m", "503 Service Unavailable")), "smoke request: HTTP 503: busy"),
    ],
    ids=["dripping", "endless", "nested-400", "error-with-escapes"],
)
def test_the_smoke_request_is_bounded_in_time_and_size(raw_http, monkeypatch, capsys, answer, reason):
    monkeypatch.setattr(proof, "ANSWER_S", 1.0)
    monkeypatch.setattr(proof, "MAX_ANSWER_BYTES", 1000)
    router = raw_http(answer)
    start = time.monotonic()
    assert proof_main(["smoke", "--router", router, "--model", "m"]) == 11
    err = capsys.readouterr().err
    assert reason in err and err.count("\n") == 1 and "\x1b" not in err
    assert time.monotonic() - start < 1 + LOAD_SLACK_S


@pytest.mark.parametrize(
    "metrics, reason",
    [
        (drip(http_answer(b"x 1\n" * 1000)), "no complete answer within 1 s"),
        (
            send(http_answer(b'vllm:prompt_tokens_by_source_total{source="external_kv_transfer"} NaN\n')),
            "= nan",
        ),
        (
            send(http_answer(b'vllm:prompt_tokens_by_source_total{source="external_kv_transfer"} oops\n')),
            "exports no",
        ),
    ],
    ids=["dripping", "NaN", "unparsable"],
)
def test_a_decode_metrics_endpoint_cannot_hang_or_fool_the_kv_proof(
    raw_http, monkeypatch, capsys, metrics, reason
):
    """NaN compares false with 0: 'moved <= 0' would let a proof pass that saw no KV move."""
    monkeypatch.setattr(proof, "METRICS_S", 1.0)
    decode = raw_http(metrics)
    router = raw_http(send(http_answer(json.dumps(ANSWER).encode())))
    argv = ["smoke", "--router", router, "--model", "m", "--decode-metrics", f"{decode}/metrics"]
    assert proof_main(argv) == 11
    assert reason in capsys.readouterr().err


def test_l2_proof_reads_garbled_snapshots_without_a_traceback(tmp_path):
    (tmp_path / "prefill0.prom").write_bytes(b"\xff\xfe garbage\nvllm:external_prefix_cache_hits_total x\n")
    (tmp_path / "prefill1.prom").write_text("vllm:external_prefix_cache_hits_total NaN\n")
    done = subprocess.run(
        [sys.executable, str(PROOF), "l2", "--metrics-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert (
        done.returncode == 11
        and "prefill1.prom reports vllm:external_prefix_cache_hits_total = nan" in done.stderr
    )


# ---------------------------------------------------------------- same-answers, against a scripted server


class Answers(BaseHTTPRequestHandler):
    """Greedy answers by a rule per path prefix: /whole (the prefill served whole) and /router; the rule
    (server.rules[role]) maps (prompt, call count) to the answer's tokens, or None for an answer without
    logprobs."""

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        role = self.path.split("/")[1]
        prompt = body["messages"][0]["content"]
        calls = self.server.calls.setdefault((role, prompt), 0)
        self.server.calls[role, prompt] = calls + 1
        tokens = self.server.rules[role](prompt, calls, body["max_tokens"])
        choice = {"message": {"content": "".join(tokens or [])}}
        if tokens is not None:
            choice["logprobs"] = {"content": [{"token": t, "logprob": 0.0} for t in tokens]}
        payload = json.dumps(
            {"choices": [choice], "usage": {"completion_tokens": len(tokens or [])}}
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *_: object) -> None:
        pass


def greedy(prompt: str, calls: int, n: int) -> list[str]:
    return [f" {hash(prompt) % 1000 + i}" for i in range(n)]


@pytest.fixture
def answers():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Answers)
    server.calls, server.rules = {}, {"whole": greedy, "router": greedy}
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()


def same(server, capsys) -> tuple[int, str]:
    base = f"http://127.0.0.1:{server.server_address[1]}"
    argv = ["same-answers", "--router", f"{base}/router", "--direct", f"{base}/whole", "--model", "m"]
    code = proof_main([*argv, "--prompts", "4", "--tokens", "6"])
    out = capsys.readouterr()
    return code, out.out + out.err


def test_same_answers_pass_when_the_router_agrees_with_the_whole_answer(answers, capsys):
    code, said = same(answers, capsys)
    assert code == 0, said
    assert "4 prompts x 6 tokens through the router match" in said and "in full on 4/4" in said


# Each way the check fails, and its exit code: 17 a quality failure, 11 the check could not compare.
FAILURES = {
    "a token differs": (
        lambda p, c, n: greedy(p, c, n)[:3] + [" x"] + greedy(p, c, n)[4:],
        None,
        17,
        "answers differ: prompt 0 through the router gave token 3",
    ),
    "the router's answer is short": (lambda p, c, n: greedy(p, c, n)[:4], None, 17, 'token 4 "<none>"'),
    "no logprobs": (lambda p, c, n: None, None, 11, "no per-token logprobs"),
    "every prompt alike": (lambda p, c, n: [" a"] * n, lambda p, c, n: [" a"] * n, 11, "same answer"),
    "the engine does not repeat itself": (
        greedy,
        lambda p, c, n: [f" {c}{p[-3:]}"] * n,
        11,
        "does not repeat its own greedy answer",
    ),
    "the prefill serves one token": (greedy, lambda p, c, n: [" a"], 11, "answered 1 of 6 tokens"),
}


@pytest.mark.parametrize("failure", FAILURES)
def test_same_answers_fail_on_each_defect_with_its_exit_code(answers, capsys, failure):
    router, whole, code, text = FAILURES[failure]
    answers.rules["router"] = router
    answers.rules["whole"] = whole or greedy
    got, said = same(answers, capsys)
    assert (got, text in said) == (code, True), said


def test_same_answers_within_tolerance_pass(answers, capsys):
    """The engine repeats itself only 3 tokens deep on prompt 0: the router may differ after that."""

    def wobbly(prompt: str, calls: int, n: int) -> list[str]:
        out = greedy(prompt, calls, n)
        return out if calls == 0 or prompt != proof._answer_prompt(0) else out[:3] + [" y"] * (n - 3)

    answers.rules["whole"] = wobbly
    answers.rules["router"] = lambda p, c, n: greedy(p, c, n)[:3] + [" z"] * (n - 3)
    code, said = same(answers, capsys)
    assert code == 17 and "prompt 1 through the router gave token 3" in said  # prompt 0 passed
