#!/usr/bin/env python3
"""Node-side proofs that the PD path works, not just that answers come back; stdlib only.

`smoke`: one chat request through the router with a known answer shape, and proof that its KV moved
prefill -> decode (the decode's external_kv_transfer prompt tokens rise): a proxy speaking the old
Mooncake contract gets correct answers while decode silently recomputes (FACTS §1).
`l2`: after the sweep, the prefill nodes' LMCache (a KV connector: vLLM's external prefix cache)
served hits; a dead LMCache server degrades to no-cache silently (FACTS §2).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import sys
import urllib.error
import urllib.request
import uuid

EXIT_PROOF = 11
KV_TRANSFER = ("vllm:prompt_tokens_by_source_total", 'source="external_kv_transfer"')
L2_HITS = ("vllm:external_prefix_cache_hits_total", "")
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)")
# Long enough to span several KV blocks, different every run so no cache already holds it.
SMOKE_WORDS = 600


class ProofError(Exception):
    """What the proof found missing."""


def metric_sum(text: str, name: str, label: str) -> float | None:
    """Sum of the samples of `name` whose labels contain `label`; None if there is none."""
    total = None
    for line in text.splitlines():
        sample = _SAMPLE.match(line)
        if sample and sample[1] == name and label in (sample[2] or ""):
            total = (total or 0.0) + float(sample[3])
    return total


def _opener() -> urllib.request.OpenerDirector:
    return urllib.request.build_opener(urllib.request.ProxyHandler({}))  # node-local: no proxies


def _get(url: str) -> str:
    try:
        with _opener().open(url, timeout=10) as response:
            return response.read().decode("utf-8", "replace")
    except (urllib.error.URLError, OSError, ValueError) as err:
        raise ProofError(f"{url}: {getattr(err, 'reason', err)}") from None


def _kv_tokens(urls: list[str]) -> float:
    total = 0.0
    for url in urls:
        value = metric_sum(_get(url), *KV_TRANSFER)
        if value is None:
            raise ProofError(f"{url} exports no {KV_TRANSFER[0]}{{{KV_TRANSFER[1]}}}")
        total += value
    return total


def _smoke_request(router: str, model: str) -> tuple[int, dict]:
    tag = uuid.uuid4().hex
    words = " ".join(f"w{tag[i % 32]}{i}" for i in range(SMOKE_WORDS))
    body = {
        "model": model,
        "messages": [{"role": "user", "content": f"Summarise this log in one line: {words}"}],
        "max_tokens": 8,
        "stream": False,
    }
    request = urllib.request.Request(
        f"{router}/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "X-Session-ID": f"smoke-{tag}"},
        method="POST",
    )
    try:
        with _opener().open(request, timeout=300) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        raise ProofError(
            f"smoke request: HTTP {err.code}: {err.read()[:300].decode('utf-8', 'replace')}"
        ) from None
    except (urllib.error.URLError, OSError, ValueError) as err:
        raise ProofError(f"smoke request: {getattr(err, 'reason', err)}") from None


def _answer_problem(answer: dict) -> str | None:
    try:
        content = answer["choices"][0]["message"]["content"]
        tokens = answer["usage"]["completion_tokens"]
    except (KeyError, IndexError, TypeError):
        return f"answer has no choices[0].message.content and usage: {json.dumps(answer)[:300]}"
    if not isinstance(content, str) or not content or not isinstance(tokens, int) or tokens < 1:
        return f"empty answer (content {content!r}, {tokens!r} completion tokens)"
    return None


def smoke(args: argparse.Namespace) -> str:
    before = _kv_tokens(args.decode_metrics)
    status, answer = _smoke_request(args.router, args.model)
    problem = _answer_problem(answer)
    if problem:
        raise ProofError(f"smoke request: {problem}")
    moved = _kv_tokens(args.decode_metrics) - before
    if moved <= 0:
        raise ProofError(
            "the answer came back but no KV moved prefill -> decode (decode external_kv_transfer tokens "
            "did not rise): decode recomputed the prompt; is the router speaking the vLLM >= 0.16 contract?"
        )
    tokens = answer["usage"]["completion_tokens"]
    return f"smoke: HTTP {status}, {tokens} tokens; KV moved: {moved:g} prompt tokens prefill -> decode"


def l2(args: argparse.Namespace) -> str:
    files = sorted(glob.glob(os.path.join(args.metrics_dir, f"{args.prefix}*.prom")))
    if not files:
        raise ProofError(f"no {args.prefix}*.prom in {args.metrics_dir}")
    hits = {}
    for path in files:
        with open(path, encoding="utf-8") as handle:
            hits[os.path.basename(path)] = metric_sum(handle.read(), *L2_HITS) or 0.0
    if not any(hits.values()):
        raise ProofError(
            f"LMCache served no prefix hit on any prefill node ({L2_HITS[0]} = 0): is its server alive?"
        )
    return "LMCache hits: " + ", ".join(
        f"{name.removesuffix('.prom')} {value:g} tokens" for name, value in hits.items()
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="proof.py", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("smoke", help="a request through the router, and the KV it moved")
    s.add_argument("--router", required=True, help="http://host:port")
    s.add_argument("--model", required=True, help="served model name")
    s.add_argument("--decode-metrics", required=True, action="append", help="a decode engine's /metrics URL")
    s.set_defaults(func=smoke)
    h = sub.add_parser("l2", help="LMCache hits on prefill nodes, from the end-of-run metrics snapshot")
    h.add_argument("--metrics-dir", required=True)
    h.add_argument("--prefix", default="prefill", help="snapshot files of prefill engines: <prefix>*.prom")
    h.set_defaults(func=l2)
    args = p.parse_args(argv)
    try:
        print(args.func(args))
    except ProofError as err:
        print(f"proof failed: {err}", file=sys.stderr)
        return EXIT_PROOF
    return 0


if __name__ == "__main__":
    sys.exit(main())
