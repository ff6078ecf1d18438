#!/usr/bin/env python3
"""Node-side proofs that the PD path works, not just that answers come back; stdlib only.

`smoke`: one chat request through the router with a known answer shape, and proof that its KV moved
prefill -> decode. vLLM (`--engine vllm`, the default): the decode's external_kv_transfer prompt tokens
rise; a proxy speaking the old Mooncake contract gets correct answers while decode silently recomputes
(docs/upstream-facts.md#mooncake-pd). SGLang (`--engine sglang`): SGLang exports no decode-side counter of KV
received, but its decode cannot recompute a prompt (a transfer that fails aborts the request), so the proof is
what can be seen: the answer came back, a prefill computed its prompt (sglang:prompt_tokens_total), the decode
generated its tokens (sglang:generation_tokens_total), and no decode transfer or bootstrap failed.
`same-answers`: the answers are right, not only fast. At temperature 0, each of a few distinct prompts is
answered through the router (prefill, KV moved, decode) and by one prefill engine serving it whole (no
transfer: a request without kv_transfer_params is an ordinary one there), twice; the disaggregated answer
must agree with the whole one at least as far as the engine agrees with itself. A KV path that corrupts
what it moves (a layout, page size or scale mismatch, a transfer bug) answers fast and plausibly, and fails
here, naming the first token that differs. Each request carries its own cache_salt: vLLM salts every block
hash with it and LMCache keys by it, so no request is served from another's cache and none of them can serve
the sweep a hit (the cold proof after it checks that).
`l2`: after the sweep, the prefill nodes' LMCache (a KV connector: vLLM's external prefix cache) served hits;
a dead LMCache server degrades to no-cache silently (docs/upstream-facts.md#multiconnector).
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import os
import sys
import time
import uuid

import promtext
import safejson
from bounds import METRICS_S, SAME_ANSWERS_S, SMOKE_ANSWER_S
from failures import EXIT_ANSWERS_DIFFER, EXIT_PROOF, WORDS, line, one_line
from httpget import FetchError, fetch
from nodeargs import http_url

KV_TRANSFER = ("vllm:prompt_tokens_by_source_total", 'source="external_kv_transfer"')
L2_HITS = "vllm:external_prefix_cache_hits_total"
PREFIX_HITS = "vllm:prefix_cache_hits_total"  # an engine's own (HBM) prefix cache
SGLANG_PROMPT = "sglang:prompt_tokens_total"
SGLANG_GENERATED = "sglang:generation_tokens_total"
# Counted by SGLang's decode when a handshake or a transfer fails (sglang/srt/metrics/collector.py); builds
# older than these counters lack them, so an absent series counts as 0.
SGLANG_FAILURES = ("sglang:num_transfer_failed_reqs_total", "sglang:num_bootstrap_failed_reqs_total")
# Long enough to span several KV blocks, different every run so no cache already holds it.
SMOKE_WORDS = 600
MAX_METRICS_BYTES = 64 << 20  # one /metrics read, all of it (METRICS_S); an engine's is ~100 kB
ANSWER_S, MAX_ANSWER_BYTES = SMOKE_ANSWER_S, 1 << 20  # the smoke answer


# The differential check: distinct prompts (so equal answers prove something), each long enough to span
# several KV blocks; the first ANSWER_TOKENS tokens of each answer compared.
ANSWER_PROMPTS, ANSWER_TOKENS, ANSWER_WORDS = 6, 16, 160
_VOCAB = (
    "river stone lantern copper violet harbor meadow signal orbit cedar quartz ember falcon tide marble "
    "canyon whisper glacier saddle prism thunder willow beacon cobalt fern summit anchor velvet comet "
    "lattice"
).split()


class ProofError(Exception):
    """What the proof found missing."""


class AnswersDiffer(ProofError):
    """A quality failure, not a missing proof: the answers came back, and are wrong (its own exit code)."""


def _get(url: str) -> str:
    try:
        response = fetch(url, timeout=METRICS_S, max_bytes=MAX_METRICS_BYTES)
    except FetchError as err:
        raise ProofError(f"{url}: {err}") from None
    if response.status != 200:
        raise ProofError(f"{url}: HTTP {response.status}")
    return response.body.decode("utf-8", "replace")


def _sum(urls: list[str], name: str, label: str = "", *, required: bool = True) -> float:
    """The metric summed over engines; one that does not export it fails the proof unless not required."""
    total = 0.0
    for url in urls:
        value = promtext.total(_get(url), name, *([label] if label else []))
        shown = f"{name}{{{label}}}" if label else name
        if value is None and required:
            raise ProofError(f"{url} exports no {shown} (is the engine started with --enable-metrics?)")
        if value is not None and not math.isfinite(value):  # NaN would pass every comparison below
            raise ProofError(f"{url} reports {shown} = {value}: a counter is a finite number")
        total += value or 0.0
    return total


def _kv_tokens(urls: list[str]) -> float:
    return _sum(urls, *KV_TRANSFER)


def _sglang_counts(args: argparse.Namespace) -> tuple[float, float, float]:
    failed = sum(_sum(args.decode_metrics, name, required=False) for name in SGLANG_FAILURES)
    return _sum(args.prefill_metrics, SGLANG_PROMPT), _sum(args.decode_metrics, SGLANG_GENERATED), failed


def _smoke_request(router: str, model: str) -> tuple[int, dict]:
    """(HTTP status, answer) of one chat request through the router; an error or empty answer fails."""
    status, answer = _post_smoke(router, model)
    problem = _answer_problem(answer)
    if problem:
        raise ProofError(f"smoke request: {problem}")
    return status, answer


def _post_smoke(router: str, model: str) -> tuple[int, dict]:
    tag = uuid.uuid4().hex
    words = " ".join(f"w{tag[i % 32]}{i}" for i in range(SMOKE_WORDS))
    body = {
        "model": model,
        "messages": [{"role": "user", "content": f"Summarise this log in one line: {words}"}],
        "max_tokens": 8,
        "stream": False,
    }
    try:
        response = fetch(
            f"{router}/v1/chat/completions",
            timeout=ANSWER_S,
            max_bytes=MAX_ANSWER_BYTES,
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json", "X-Session-ID": f"smoke-{tag}"},
        )
    except FetchError as err:
        raise ProofError(f"smoke request: {err}") from None
    text = response.body.decode("utf-8", "replace")
    if response.status != 200:
        raise ProofError(f"smoke request: HTTP {response.status}: {one_line(text)}")
    try:
        return response.status, safejson.loads(response.body)
    except ValueError as err:
        raise ProofError(
            f"smoke request: the answer is not JSON we read ({err}): {one_line(text, 200)}"
        ) from None


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
    if args.engine == "atom":
        return _smoke_atom(args)
    if not args.decode_metrics:  # a single-node job: nothing moves between engines, the answer is the proof
        status, answer = _smoke_request(args.router, args.model)
        return (
            f"smoke: HTTP {status}, {answer['usage']['completion_tokens']} tokens (one server: no KV to move)"
        )
    if args.engine == "sglang":
        return _smoke_sglang(args)
    before = _kv_tokens(args.decode_metrics)
    status, answer = _smoke_request(args.router, args.model)
    moved = _kv_tokens(args.decode_metrics) - before
    if moved <= 0:
        raise ProofError(WORDS["no-kv-moved"])
    tokens = answer["usage"]["completion_tokens"]
    return f"smoke: HTTP {status}, {tokens} tokens; KV moved: {moved:g} prompt tokens prefill -> decode"


def _smoke_atom(args: argparse.Namespace) -> str:
    """ATOM's server exports no counters: what shows the PD path is the answer through atomesh, which sends a
    request to decode only with the kv_transfer_params its prefill returned (and answers 502 without)."""
    status, answer = _smoke_request(args.router, args.model)
    tokens = answer["usage"]["completion_tokens"]
    return (
        f"smoke: HTTP {status}, {tokens} tokens through atomesh (prefill's KV handed to decode; ATOM exports "
        "no counters to show more)"
    )


def _smoke_sglang(args: argparse.Namespace) -> str:
    prompt_before, generated_before, failed_before = _sglang_counts(args)
    status, answer = _smoke_request(args.router, args.model)
    prompt_after, generated_after, failed_after = _sglang_counts(args)
    prompt, tokens = answer["usage"].get("prompt_tokens"), answer["usage"]["completion_tokens"]
    computed, generated = prompt_after - prompt_before, generated_after - generated_before
    if failed_after > failed_before:
        raise ProofError(
            f"a decode KV transfer or bootstrap failed during the smoke request ({SGLANG_FAILURES})"
        )
    if not isinstance(prompt, int) or computed < prompt:
        raise ProofError(
            f"no prefill computed the prompt ({SGLANG_PROMPT} rose by {computed:g} on the prefills, the "
            f"answer reports {prompt!r} prompt tokens): does the router send it through a prefill "
            "(--pd-disaggregation)?"
        )
    if generated < tokens:
        raise ProofError(
            f"the decodes generated {generated:g} tokens ({SGLANG_GENERATED}) but the answer has {tokens}: "
            "the answer did not come from a decode named by --decode-metrics"
        )
    return (
        f"smoke: HTTP {status}, {tokens} tokens; KV moved: a prefill computed {computed:g} prompt tokens, "
        f"the decode generated {generated:g} and no transfer failed (an SGLang decode never recomputes)"
    )


def _answer_prompt(i: int) -> str:
    """Prompt i: words of a fixed vocabulary in an order of its own (reproducible, different per prompt)."""
    words = " ".join(_VOCAB[(i * 7 + j * (2 * i + 3) + j * j) % len(_VOCAB)] for j in range(ANSWER_WORDS))
    return f"Continue this list of words with more of them: {words}"


def _answer_tokens(
    url: str, model: str, prompt: str, tokens: int, salt: str, where: str, deadline: float
) -> list[str]:
    """The tokens (logprobs content) of a greedy answer of TOKENS tokens from URL, before DEADLINE (the
    monotonic clock's: the whole check is bounded, SAME_ANSWERS_S)."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise ProofError(f"same answers: not done within {SAME_ANSWERS_S:g} s (the check's bound)")
    body = {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": tokens,
        "temperature": 0,
        "ignore_eos": True,
        "logprobs": True,
        "cache_salt": salt,
        "stream": False,
    }
    try:
        response = fetch(
            f"{url}/v1/chat/completions",
            timeout=min(ANSWER_S, left),
            max_bytes=MAX_ANSWER_BYTES,
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json", "X-Session-ID": f"answers-{salt}"},
        )
    except FetchError as err:
        raise ProofError(f"same answers, {where}: {err}") from None
    if response.status != 200:
        text = one_line(response.body.decode("utf-8", "replace"))
        raise ProofError(f"same answers, {where}: HTTP {response.status}: {text}")
    try:
        content = safejson.loads(response.body)["choices"][0]["logprobs"]["content"]
        out = [item["token"] for item in content]
    except (ValueError, KeyError, IndexError, TypeError):
        raise ProofError(
            f"same answers, {where}: the answer carries no per-token logprobs (choices[0].logprobs.content): "
            "its tokens cannot be compared"
        ) from None
    if not all(isinstance(t, str) for t in out):
        raise ProofError(f"same answers, {where}: a logprobs token is not text")
    return out


def _agree(a: list[str], b: list[str]) -> int:
    """How many leading tokens two answers share."""
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def same_answers(args: argparse.Namespace) -> str:
    tag, deadline = uuid.uuid4().hex[:12], time.monotonic() + SAME_ANSWERS_S
    whole, repeat, routed = [], [], []

    def ask(url: str, prompt: str, salt: str, where: str) -> list[str]:
        return _answer_tokens(url, args.model, prompt, args.tokens, f"{tag}{salt}", where, deadline)

    for i in range(args.prompts):
        prompt = _answer_prompt(i)
        whole.append(ask(args.direct, prompt, f"w{i}", "served whole"))
        if len(whole[-1]) != args.tokens:
            raise ProofError(
                line("not-served-whole", got=len(whole[-1]), tokens=args.tokens, url=args.direct)
            )
        routed.append(ask(args.router, prompt, f"r{i}", "the router"))
        repeat.append(ask(args.direct, prompt, f"a{i}", "served whole"))
    if len({tuple(w) for w in whole}) < 2:
        raise ProofError(line("answers-alike", prompts=args.prompts))
    own = [_agree(whole[i], repeat[i]) for i in range(len(whole))]
    if sum(1 for n in own if n == 0) * 2 > len(own):
        raise ProofError(line("answers-unrepeatable", differ=sum(1 for n in own if n == 0), prompts=len(own)))
    for i in range(len(whole)):
        w, r, n = whole[i], routed[i], own[i]
        at = _agree(w, r)
        if at < n or (at == n == len(w) and len(r) != len(w)):
            got = r[at] if at < len(r) else "<none>"
            want = w[at] if at < len(w) else "<none>"
            raise AnswersDiffer(
                line(
                    "answers-differ",
                    prompt=i,
                    token=at,
                    routed=json.dumps(got),
                    whole=json.dumps(want),
                    own=n,
                )
            )
    full = sum(1 for n in own if n == args.tokens)
    return (
        f"same answers: {args.prompts} prompts x {args.tokens} tokens through the router match the prefill "
        f"serving them whole (the engine repeated its own answer in full on {full}/{len(own)}; the shortest "
        f"agreement {min(own)} tokens)"
    )


def _snapshots(metrics_dir: str, prefix: str) -> list:
    """(engine name, Prometheus text) of every <prefix>*.prom of a metrics snapshot folder, in name order."""
    out = []
    for path in sorted(glob.glob(os.path.join(metrics_dir, f"{prefix}*.prom"))):
        try:
            with open(path, encoding="utf-8", errors="replace") as handle:
                out.append((os.path.basename(path)[: -len(".prom")], handle.read()))
        except OSError as err:
            raise ProofError(f"cannot read {path}: {err.strerror}") from None
    return out


def l2(args: argparse.Namespace) -> str:
    snapshots = _snapshots(args.metrics_dir, args.prefix)
    if not snapshots:
        raise ProofError(f"no {args.prefix}*.prom in {args.metrics_dir}")
    hits = {}
    for name, text in snapshots:
        value = promtext.total(text, L2_HITS) or 0.0
        if not math.isfinite(value):
            raise ProofError(f"{name}.prom reports {L2_HITS} = {value}: a counter is a finite number")
        hits[name] = value
    if not any(hits.values()):
        raise ProofError(line("no-l2-hits", metric=L2_HITS))
    return "LMCache hits: " + ", ".join(f"{name} {value:g} tokens" for name, value in hits.items())


# What an engine served from a cache: its prefix cache (HBM) and, on a prefill, the external one (LMCache). A
# decode's external hits are the KV it received from the prefill (the smoke's own transfer), not a cache.
COLD_COUNTERS = {"prefill": (PREFIX_HITS, L2_HITS), "decode": (PREFIX_HITS,)}


def cold(args: argparse.Namespace) -> str:
    """Every engine's cache counters at the point's start (the snapshot after the smoke request): nothing was
    served from a cache yet, so the point's first request finds the caches as a fresh allocation leaves them
    (the smoke's prompt is the only thing stored, and the client's cache bust keeps its prompts apart)."""
    served, read = [], 0
    for role, counters in COLD_COUNTERS.items():
        for name, text in _snapshots(args.metrics_dir, role):
            read += 1
            for counter in counters:
                value = promtext.total(text, counter) or 0.0
                if not math.isfinite(value) or value != 0:
                    served.append(f"{name} {counter} = {value:g}")
    if not read:
        raise ProofError(f"no prefill*.prom or decode*.prom in {args.metrics_dir}")
    if served:
        raise ProofError(line("not-cold", served=", ".join(served)))
    names = ", ".join(sorted({c for cs in COLD_COUNTERS.values() for c in cs}))
    return f"cold start: {read} engines served no cache hit before the point ({names} = 0)"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="proof.py", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("smoke", help="a request through the router, and the KV it moved")
    s.add_argument("--router", required=True, type=http_url, help="http://host:port")
    s.add_argument("--model", required=True, help="served model name")
    s.add_argument(
        "--decode-metrics",
        action="append",
        default=[],
        type=http_url,
        help="a decode engine's /metrics URL (none: a single-node job, only the answer is checked)",
    )
    s.add_argument(
        "--engine", choices=["vllm", "sglang", "atom"], default="vllm", help="what the engines are"
    )
    s.add_argument(
        "--prefill-metrics",
        action="append",
        default=[],
        type=http_url,
        help="a prefill engine's /metrics URL (sglang only)",
    )
    s.set_defaults(func=smoke)
    a = sub.add_parser(
        "same-answers", help="greedy answers through the router equal a prefill engine's served whole"
    )
    a.add_argument("--router", required=True, type=http_url, help="http://host:port")
    a.add_argument("--direct", required=True, type=http_url, help="a prefill engine, http://host:port")
    a.add_argument("--model", required=True, help="served model name")
    a.add_argument("--prompts", type=int, default=ANSWER_PROMPTS, choices=range(2, 65), metavar="N")
    a.add_argument("--tokens", type=int, default=ANSWER_TOKENS, choices=range(1, 1025), metavar="N")
    a.set_defaults(func=same_answers)
    h = sub.add_parser("l2", help="LMCache hits on prefill nodes, from the end-of-run metrics snapshot")
    h.add_argument("--metrics-dir", required=True)
    h.add_argument("--prefix", default="prefill", help="snapshot files of prefill engines: <prefix>*.prom")
    h.set_defaults(func=l2)
    c = sub.add_parser(
        "cold", help="no engine served a cache hit yet, from the snapshot at the point's start"
    )
    c.add_argument("--metrics-dir", required=True)
    c.set_defaults(func=cold)
    args = p.parse_args(argv)
    pd = args.command == "smoke" and bool(args.decode_metrics)
    if pd and (args.engine == "sglang") != bool(args.prefill_metrics):
        p.error(
            "--prefill-metrics is required with --engine sglang and --decode-metrics, and only used there"
        )
    if args.command == "smoke" and args.prefill_metrics and not args.decode_metrics:
        p.error("--prefill-metrics without --decode-metrics: a PD job names both, a single-node job neither")
    try:
        print(args.func(args))
    except ProofError as err:
        print(line("proof-failed", reason=one_line(err, 1000)), file=sys.stderr)
        return EXIT_ANSWERS_DIFFER if isinstance(err, AnswersDiffer) else EXIT_PROOF
    return 0


if __name__ == "__main__":
    sys.exit(main())
