"""Stand-ins for the programs a node script runs (vllm, lmcache, aiperf, lm-eval, scontrol, the proxy).

Each reads only the flags it needs from the real command line and misbehaves as the environment asks:
FAKE_<TOOL>=ok | never-healthy | exit-at-start:<code> | crash-before-health | exit0-after:<seconds> | hang |
say:<line> (logs the line, then serves as ok does);
vllm also: no-kv (its KV-transfer counters never rise); aiperf also: no-result | cancelled | cancelled-at:<C>;
lm-eval: ok (every question right) | score:<x> | exit-at-start:<code>.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


def flag(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


def mode(tool: str) -> tuple[str, str]:
    name, _, arg = os.environ.get(f"FAKE_{tool.upper().replace('-', '_')}", "ok").partition(":")
    return name, arg


ANSWER = {
    "choices": [{"message": {"role": "assistant", "content": "fine"}}],
    "usage": {"completion_tokens": 1},
}


def answer(body: bytes) -> dict:
    """The one answer, or, asked for logprobs (the same-answers proof), a greedy answer of the prompt: tokens
    that follow from it, the same through the router as served whole."""
    try:
        request = json.loads(body)
    except ValueError:
        return ANSWER
    if not isinstance(request, dict) or request.get("logprobs") is not True:
        return ANSWER
    seed = zlib.crc32(json.dumps(request.get("messages"), sort_keys=True).encode())
    tokens = [f" t{(seed >> (i % 24)) % 97}" for i in range(int(request.get("max_tokens") or 1))]
    content = [{"token": t, "logprob": 0.0, "top_logprobs": []} for t in tokens]
    return {
        "choices": [
            {"message": {"role": "assistant", "content": "".join(tokens)}, "logprobs": {"content": content}}
        ],
        "usage": {"completion_tokens": len(tokens)},
    }


def metrics_text(scrapes: int, rising: bool, warm: bool = False) -> bytes:
    """vLLM's KV-transfer and external-prefix counters: rising on every scrape unless told otherwise. LMCache
    hits start after the first scrape (a prefill's first is the snapshot at the point's start: nothing was
    served from a cache yet), or at once for an engine that was already warm."""
    moved = 100 * scrapes if rising else 0
    l2 = 100 * scrapes if warm else 100 * (scrapes - 1) if rising else 0
    return (
        f'vllm:prompt_tokens_by_source_total{{engine="0",source="external_kv_transfer"}} {moved}\n'
        f'vllm:external_prefix_cache_hits_total{{engine="0"}} {l2}\n'
    ).encode()


def serve(
    host: str, port: int, path: str, body: bytes, healthy: bool, rising: bool = True, warm: bool = False
) -> None:
    scrapes = [0]

    class Handler(BaseHTTPRequestHandler):
        def reply(self, status: int, payload: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
            if healthy and self.path == "/metrics":
                scrapes[0] += 1
                self.reply(200, metrics_text(scrapes[0], rising, warm))
            else:
                self.reply(200 if healthy and self.path == path else 503, body)

        def do_POST(self) -> None:  # noqa: N802
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            self.reply(200, json.dumps(answer(body)).encode())

        def log_message(self, *_: object) -> None:
            pass

    server = ThreadingHTTPServer((host, port), Handler)
    print(f"fake: serving {path} on {host}:{port}", flush=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()


def service(tool: str, host: str, port: int, path: str, body: bytes = b"{}") -> None:
    how, arg = mode(tool)
    if how == "exit-at-start":
        print(f"fake {tool}: fatal: cannot start (exit {arg})", file=sys.stderr, flush=True)
        sys.exit(int(arg))
    if how == "crash-before-health":
        time.sleep(0.3)
        print("Traceback (most recent call last):\nRuntimeError: fake engine core died", file=sys.stderr)
        sys.exit(1)
    if how == "say":
        print(arg, file=sys.stderr, flush=True)
    serve(host, port, path, body, healthy=how != "never-healthy", rising=how != "no-kv", warm=how == "warm")
    if how == "exit0-after":
        time.sleep(float(arg))
        print(f"fake {tool}: finished quietly", flush=True)
        sys.exit(0)
    while True:
        time.sleep(3600)


def aiperf(args: list[str]) -> None:
    how, arg = mode("aiperf")
    if how == "cancelled-at":
        how = "cancelled" if flag(args, "--concurrency") == arg else "ok"
    if how == "hang":
        time.sleep(3600)
    if how == "exit-at-start":
        sys.exit(int(arg))
    out = Path(flag(args, "--output-artifact-dir"))
    out.mkdir(parents=True, exist_ok=True)
    if how == "no-result":
        return
    # the shape of AIPerf 0.13.0's summary; "cancelled" is its failed-request-threshold abort, which exits 0
    cancelled = how == "cancelled"
    record = {
        "request_count": {"unit": "requests", "avg": 40.0},
        "error_request_count": {"unit": "requests", "avg": 9.0 if cancelled else 0.0},
        "total_output_tokens": {"unit": "tokens", "avg": 1600.0},
        "benchmark_duration": {"unit": "sec", "avg": 1.2 if cancelled else 10.0},
        "was_cancelled": cancelled,
        "is_complete": not cancelled,
        "concurrency": int(flag(args, "--concurrency")),
    }
    if "--scenario" in args and how != "no-scenario":  # AIPerf 0.13.0 stamps its scenario lock's verdict
        unsafe = "--unsafe-override" in args
        record["metadata"] = {
            "scenario": flag(args, "--scenario"),
            "submission_valid": not unsafe,
            **({"submission_invalid_reasons": ["unsafe_override"]} if unsafe else {}),
        }
    (out / "profile_export_aiperf.json").write_text(json.dumps(record))


def lm_eval(args: list[str]) -> None:
    """lm-evaluation-harness as scripts/accuracy.py runs it: its results file where lm-eval writes one."""
    how, arg = mode("lm-eval")
    if how == "exit-at-start":
        sys.exit(int(arg))
    limit = int(flag(args, "--limit")) if "--limit" in args else 64
    out = Path(flag(args, "--output_path")) / "served"
    out.mkdir(parents=True, exist_ok=True)
    score = float(arg) if how == "score" else 1.0
    record = {
        "results": {
            "gsm8k_staged": {"exact_match,strict-match": score, "exact_match,flexible-extract": score}
        },
        "n-samples": {"gsm8k_staged": {"original": 64, "effective": limit}},
        "lm_eval_version": "0.4.13",
    }
    (out / "results_2026-12-02T00-00-00.json").write_text(json.dumps(record))


def scontrol(args: list[str]) -> None:
    node = args[-1]
    addrs = dict(pair.split("=") for pair in os.environ["FAKE_NODEADDRS"].split(","))
    print(f"NodeName={node} Arch=x86_64 NodeAddr={addrs[node]} NodeHostName={node} State=ALLOCATED")


def main() -> None:
    tool, args = sys.argv[1], sys.argv[3:]  # argv[2] is the test's marker, to find leftovers
    if tool != "scontrol":  # its output is parsed
        print(f"fake {tool}: argv {json.dumps(args)}", flush=True)
    if tool == "vllm":
        service("vllm", flag(args, "--host"), int(flag(args, "--port")), "/health")
    elif tool == "lmcache":
        service("lmcache", flag(args, "--http-host"), int(flag(args, "--http-port")), "/healthcheck")
    elif tool == "proxy":
        counts = {
            "prefill": {"healthy": args.count("--prefill")},
            "decode": {"healthy": args.count("--decode")},
        }
        service(
            "proxy", flag(args, "--host"), int(flag(args, "--port")), "/health", json.dumps(counts).encode()
        )
    elif tool == "aiperf":
        aiperf(args)
    elif tool == "lm-eval":
        lm_eval(args)
    elif tool == "scontrol":
        scontrol(args)
    else:
        sys.exit(f"fake_tool: unknown tool {tool}")


if __name__ == "__main__":
    main()
