"""`make report RUN=<dir>` / `make compare A=<dir> B=<dir>`: a run folder's summary, Pareto plot and diff.

summary.json per concurrency: throughput per GPU, TTFT/ITL/E2E p50/p90/p99, prefix and LMCache (L2) hit
rates and KV moved, from the AIPerf results and the metrics snapshots the job took around each one.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

from scripts import promtext, statefiles

PERCENTILES = ("p50", "p90", "p99")
LATENCIES = {"ttft_ms": "time_to_first_token", "itl_ms": "inter_token_latency", "e2e_ms": "request_latency"}


class ReportError(Exception):
    """The run folder lacks what a summary needs."""


FACTS_BYTES = 1 << 20  # a node's node-facts.json: a few hundred bytes per GPU and NIC


def node_facts(run_dir: Path) -> dict:
    """Each node's state/<node>/node-facts.json (written by its GPU drain gate) with its host's NICs under
    "nics" (nic-facts.json, the host preflight's), each read with a size bound; a file that is not a JSON
    object is reported as such, not trusted."""
    out: dict[str, dict] = {}
    for name, key in ((statefiles.NODE_FACTS, None), (statefiles.NIC_FACTS, "nics")):
        for path in sorted((run_dir / statefiles.FOLDER).glob(f"*/{name}")):
            try:
                with path.open("rb") as handle:
                    raw = handle.read(FACTS_BYTES + 1)
                doc = json.loads(raw) if len(raw) <= FACTS_BYTES else None
            except (OSError, ValueError, RecursionError):
                doc = None
            doc = doc if isinstance(doc, dict) else {"error": f"{path.name} is not a JSON object"}
            node = out.setdefault(path.parent.name, {})
            node.update({key: doc} if key else doc)
    return out


IMAGE_BYTES = 4096  # state/<node>/image: three key=value lines (scripts/container.sh record_image)
_IMAGE_ID = re.compile(r"(?:sha256:)?[0-9a-f]{12,64}")
_REPO_DIGEST = re.compile(r"[A-Za-z0-9._/:-]{1,255}@sha256:[0-9a-f]{64}")


def node_images(run_dir: Path) -> dict:
    """What the job's image reference was on each node (docker runners): {node: {image, id, digests}}, or
    {node: {error}} for a file that is not what container.sh writes."""
    out = {}
    for path in sorted((run_dir / statefiles.FOLDER).glob(f"*/{statefiles.IMAGE}")):
        try:
            with path.open("rb") as handle:
                raw = handle.read(IMAGE_BYTES + 1)
            fields = dict(x.split("=", 1) for x in raw.decode().splitlines() if "=" in x)
            digests = [d for d in fields.get("digests", "").split(",") if d]
            good = (
                len(raw) <= IMAGE_BYTES
                and _IMAGE_ID.fullmatch(fields.get("id", ""))
                and all(_REPO_DIGEST.fullmatch(d) for d in digests)
                and fields.get("image", "").isprintable()
            )
        except (OSError, UnicodeDecodeError, ValueError):
            good = False
        out[path.parent.name] = (
            {"image": fields["image"], "id": fields["id"], "digests": digests}
            if good
            else {"error": "state/<node>/image is not what scripts/container.sh writes"}
        )
    return out


def image_caveat(images: dict) -> str | None:
    """One line when the nodes of one job did not run one image (a tag re-pushed between pulls)."""
    ids = {n: i.get("id") for n, i in images.items()}
    if len(set(ids.values())) <= 1:
        return None
    return "the nodes ran different images under one reference: " + ", ".join(
        f"{n} {i or 'unknown'}" for n, i in sorted(ids.items())
    )


def _role_sum(snapshot: Path, role: str, name: str, *labels: str) -> float:
    files = sorted(snapshot.glob(f"{role}*.prom"))
    return sum(promtext.total(p.read_text(), name, *labels) or 0.0 for p in files)


def _delta(after: Path, before: Path, role: str, name: str, *labels: str) -> float:
    return _role_sum(after, role, name, *labels) - _role_sum(before, role, name, *labels)


def _rate(hits: float, queries: float) -> float | None:
    return round(hits / queries, 4) if queries > 0 else None


CACHE_KEYS = ("prefix_hit_rate", "l2_hit_rate", "kv_moved_tokens")  # what cache_stats computes
RESUME_FILE = "resume.json"  # a resumed run's reused points (recipes/resume.py writes it at submission)


def cache_stats(after: Path, before: Path, engine: str = "vllm") -> dict:
    """What the engines counted during one concurrency (snapshot deltas); vLLM's counters only."""
    if engine != "vllm":
        return dict.fromkeys(CACHE_KEYS)
    d = lambda *a: _delta(after, before, *a)  # noqa: E731 (a local shorthand)
    return {
        "prefix_hit_rate": _rate(
            d("prefill", "vllm:prefix_cache_hits_total"), d("prefill", "vllm:prefix_cache_queries_total")
        ),
        "l2_hit_rate": _rate(
            d("prefill", "vllm:external_prefix_cache_hits_total"),
            d("prefill", "vllm:external_prefix_cache_queries_total"),
        ),
        "kv_moved_tokens": d("decode", "vllm:prompt_tokens_by_source_total", 'source="external_kv_transfer"'),
    }


def _avg(result: dict, key: str) -> float | None:
    value = result.get(key)
    return float(value["avg"]) if isinstance(value, dict) and "avg" in value else None


def row(result: dict, concurrency: int, gpus: int) -> dict:
    out: dict[str, Any] = {
        "concurrency": concurrency,
        "requests": _avg(result, "request_count"),
        "errors": _avg(result, "error_request_count") or 0.0,
        "duration_s": _avg(result, "benchmark_duration"),
        "requests_per_s": _avg(result, "request_throughput"),
        "output_tok_per_s": _avg(result, "output_token_throughput"),
    }
    out["output_tok_per_s_per_gpu"] = (
        round(out["output_tok_per_s"] / gpus, 3) if out["output_tok_per_s"] else None
    )
    for short, key in LATENCIES.items():
        stats = result.get(key) or {}
        for p in PERCENTILES:
            out[f"{short}_{p}"] = stats.get(p)
    itl = out["itl_ms_p50"]
    out["interactivity_tok_per_s_per_user"] = round(1000.0 / itl, 3) if itl else None
    meta = result.get("metadata")
    if isinstance(meta, dict) and meta.get("scenario"):  # the client's scenario lock and its verdict
        out["scenario"] = meta.get("scenario")
        out["submission_valid"] = meta.get("submission_valid")
        out["submission_invalid_reasons"] = meta.get("submission_invalid_reasons") or []
    return out


MADE_UP = "made-up corpus, not a submission"


def corpus_label(plan: dict, lock: dict) -> str | None:
    """What the agentic corpus was, said where the numbers are: a made-up stand-in under the pinned name is
    never a submission, whatever the client's scenario stamped."""
    staged = (lock.get("inputs") or {}).get("traces") or {}
    scenario = plan.get("client_scenario") or {}
    if staged.get("corpus") == "made-up" or scenario.get("corpus") == "made-up":
        return MADE_UP
    return None


def accuracy_of(plan: dict, results: Path) -> dict | None:
    """The graded eval's outcome (scripts/accuracy.py's accuracy.json, read as untrusted) beside what the plan
    asked of it; None where the job ran no eval."""
    step = plan.get("accuracy")
    if not step:
        return None
    found = results / "accuracy" / "accuracy.json"
    try:
        record = json.loads(found.read_text()) if found.is_file() else {}
    except (OSError, ValueError):
        record = {}
    record = record if isinstance(record, dict) else {}

    def fraction(key: str) -> float | None:
        v = record.get(key)
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v <= 1 else None

    samples = record.get("samples")
    passed = record.get("passed")
    error = record.get("error")
    return {
        "eval": step["eval"],
        "threshold": step["threshold"],
        "eval_set": step["eval_set"],
        "score": fraction("score"),
        "flexible_extract": fraction("flexible_extract"),
        "samples": samples if isinstance(samples, int) and not isinstance(samples, bool) else None,
        "passed": passed if isinstance(passed, bool) else None,
        "error": error[:1000] if isinstance(error, str) else None,
    }


def accuracy_line(acc: dict) -> str:
    """One line: the eval, its score on how many questions, the threshold and the verdict."""
    made_up = (
        " (made-up questions: a pipeline check, not the model's score)"
        if acc["eval_set"] == "made-up"
        else ""
    )
    if acc["score"] is None:
        why = acc.get("error") or "no accuracy.json (the job ended before the eval)"
        return f"accuracy: {acc['eval']} not scored, threshold {acc['threshold']:.2f}: {why}{made_up}"
    verdict = "passed" if acc["passed"] else "BELOW THRESHOLD"
    return (
        f"accuracy: {acc['eval']} {acc['score']:.4f} on {acc['samples']} questions, threshold "
        f"{acc['threshold']:.2f}: {verdict}{made_up}"
    )


def reused_points(run_dir: Path) -> dict[str, dict]:
    """A resumed run's reused points by benchmark name (each with measured_in and cache); {} otherwise."""
    path = run_dir / RESUME_FILE
    return {p["name"]: p for p in json.loads(path.read_text())["points"]} if path.is_file() else {}


def summarize(run_dir: Path) -> dict:
    plan_file, results = run_dir / "recipe" / "plan.json", run_dir / "results"
    if not plan_file.is_file():
        raise ReportError(
            f"{plan_file} not found: is {run_dir} a run folder (out/runs/<key>/<variant>/<id>)?"
        )
    plan = json.loads(plan_file.read_text())
    gpus = plan["slurm"]["nodes"] * plan["gpus_per_node"]
    rows, before, reused = [], results / "metrics" / "start", reused_points(run_dir)
    for bench in plan["benchmarks"]:
        result_file, c = results / bench["result"], bench["concurrency"]
        if not result_file.is_file():
            continue  # a failed or unfinished concurrency: the summary covers what finished
        r = row(json.loads(result_file.read_text()), c, gpus)
        point = reused.get(bench.get("name") or f"conc{c}")
        if point is not None:
            # Measured by another job, whose engines' counters this job's snapshots never saw: its cache
            # rates are the ones that job's snapshots gave, and the next delta starts from this job's start.
            r.update({k: point["cache"].get(k) for k in CACHE_KEYS}, resumed_from=point["measured_in"])
            rows.append(r)
            continue
        after = results / "metrics" / (bench.get("name") or f"conc{c}")
        if after.is_dir() and before.is_dir():
            r.update(cache_stats(after, before, plan.get("engine", "vllm")))
        before = after
        rows.append(r)
    if not rows:
        raise ReportError(f"no result in {results}: the job finished no concurrency")
    lock_file = run_dir / "lock.json"
    lock = json.loads(lock_file.read_text()) if lock_file.is_file() else {}
    lock["nodes"] = sorted(p.name for p in (run_dir / statefiles.FOLDER).glob("*") if p.is_dir())
    facts = node_facts(run_dir)
    images = node_images(run_dir)
    for node, image in images.items():
        facts.setdefault(node, {})["image"] = image
    if facts:
        lock["node_facts"] = facts  # driver, ROCm, NIC firmware, GPUs: what each node showed at preflight
    digests = {d for i in images.values() for d in i.get("digests", [])}
    if lock.get("image_digest") is None and len(digests) == 1 and image_caveat(images) is None:
        # the reference as every node resolved it: one image, one digest
        lock["image_digest"] = digests.pop().split("@", 1)[1]
    return {
        "config_key": plan["config_key"],
        "variant": plan["variant"],
        "run": run_dir.name,
        "gpus": gpus,
        "mode": plan.get("mode", "sweep"),
        "corpus": corpus_label(plan, lock),
        "client_scenario": plan.get("client_scenario"),
        # Known-issue workarounds change performance: such results compare only with runs of the same.
        "workarounds": [f"{w['issue']}: {w['workaround']}" for w in plan.get("workarounds", [])],
        "caveats": list(plan.get("caveats", [])),
        "comparable_with_inferencex": plan.get("not_comparable_with_inferencex") is None,
        "not_comparable_with_inferencex": plan.get("not_comparable_with_inferencex"),
        "rows": rows,
        "accuracy": accuracy_of(plan, results),
        "resumed": lock.get("resumed"),
        "image_caveat": image_caveat(images),
        "lock": lock,
    }


def caveats(summary: dict) -> list[str]:
    """Why these numbers do not compare with a plain sweep of the same config, one line each."""
    out = []
    if summary.get("corpus"):
        out.append(f"{summary['corpus']}: the agentic traces were made on this machine under the pinned name")
    invalid = [r for r in summary["rows"] if r.get("submission_valid") is False]
    if invalid and not summary.get("corpus"):
        out.append(
            "the client marked "
            + ", ".join(
                f"conc {r['concurrency']} ({', '.join(r['submission_invalid_reasons'])})" for r in invalid
            )
            + " no valid submission"
        )
    if summary.get("mode") == "soak":
        out.append("soak run: phases of varied load to catch late-onset engine bugs, not a sweep")
    for w in summary.get("workarounds", []):
        out.append(f"known-issue workaround applied ({w}): compare only with runs that apply it too")
    out += summary.get("caveats", [])
    if summary.get("not_comparable_with_inferencex"):
        out.append(summary["not_comparable_with_inferencex"])
    if summary.get("image_caveat"):
        out.append(summary["image_caveat"])
    reused = [r for r in summary["rows"] if r.get("resumed_from")]
    if reused:
        out.append(
            "resumed run: conc marked * reused from an earlier job ("
            + ", ".join(f"conc {r['concurrency']} from run {r['resumed_from']}" for r in reused)
            + "), same lock; the rest measured here"
        )
    return out


def _fmt(value, digits: int = 1) -> str:
    """digits -1: a rate shown as a percentage."""
    if value is None:
        return "-"
    if digits == -1:
        return f"{value:.1%}"
    return f"{value:,.{digits}f}" if isinstance(value, float) else str(value)


COLUMNS = [  # (header, key, digits; -1: a rate shown as %)
    ("conc", "concurrency", 0),
    ("req", "requests", 0),
    ("tok/s/gpu", "output_tok_per_s_per_gpu", 1),
    ("tok/s/user", "interactivity_tok_per_s_per_user", 1),
    ("ttft p50", "ttft_ms_p50", 1),
    ("ttft p99", "ttft_ms_p99", 1),
    ("itl p50", "itl_ms_p50", 2),
    ("e2e p99", "e2e_ms_p99", 0),
    ("prefix hit", "prefix_hit_rate", -1),
    ("L2 hit", "l2_hit_rate", -1),
    ("KV moved", "kv_moved_tokens", 0),
]


def table(summary: dict) -> str:
    lines = [
        f"{summary['config_key']} {summary['variant']} ({summary['run']}, {summary['gpus']} GPUs)",
        *(f"NOTE {c}" for c in caveats(summary)),
        *([accuracy_line(summary["accuracy"])] if summary.get("accuracy") else []),
        "  ".join(f"{h:>10}" for h, _, _ in COLUMNS),
    ]
    for r in summary["rows"]:
        cells = [_fmt(r.get(k), d) for _, k, d in COLUMNS]
        if r.get("resumed_from"):
            cells[0] += "*"  # the concurrency column: see the resumed-run note
        lines.append("  ".join(f"{c:>10}" for c in cells))
    return "\n".join(lines)


def plot(summary: dict, path: Path) -> None:
    """Throughput per GPU against interactivity, one labelled point per concurrency, frontier joined."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    points = sorted(
        (r["interactivity_tok_per_s_per_user"], r["output_tok_per_s_per_gpu"], r["concurrency"])
        for r in summary["rows"]
        if r["interactivity_tok_per_s_per_user"] and r["output_tok_per_s_per_gpu"]
    )
    reused = {r["concurrency"]: r["resumed_from"] for r in summary["rows"] if r.get("resumed_from")}
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=120)
    frontier = [
        p
        for p in points
        if not any(q[0] >= p[0] and q[1] > p[1] or q[0] > p[0] and q[1] >= p[1] for q in points)
    ]
    ax.plot(
        [p[0] for p in frontier], [p[1] for p in frontier], "-", color="tab:blue", alpha=0.5, label="Pareto"
    )
    here = [p for p in points if p[2] not in reused]
    ax.scatter([p[0] for p in here], [p[1] for p in here], color="tab:blue", zorder=3)
    earlier = [p for p in points if p[2] in reused]
    if earlier:  # hollow: measured by the earlier job this run resumed
        runs = ", ".join(sorted(set(reused.values())))
        ax.scatter(
            [p[0] for p in earlier],
            [p[1] for p in earlier],
            facecolors="none",
            edgecolors="tab:blue",
            zorder=3,
            label=f"resumed (run {runs})",
        )
    for x, y, c in points:
        label = f"conc {c} (resumed)" if c in reused else f"conc {c}"
        ax.annotate(label, (x, y), textcoords="offset points", xytext=(6, 6), fontsize=9)
    ax.set_xlabel("interactivity (output tokens/s per user, 1000 / ITL p50)")
    ax.set_ylabel("throughput (output tokens/s per GPU)")
    note = (
        "\n" + "; ".join(summary["workarounds"]) + " (workaround: not comparable)"
        if summary.get("workarounds")
        else ""
    )
    ax.set_title(
        f"{summary['config_key']}\n{summary['variant']} · {summary['gpus']} GPUs · {summary['run']}{note}",
        fontsize=10,
    )
    ax.grid(alpha=0.3)
    ax.margins(0.15)
    ax.legend(loc="upper right", fontsize=9)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def report(run_dir: Path) -> dict:
    summary = summarize(run_dir)
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
    plot(summary, run_dir / "pareto.png")
    return summary


def compare(a: dict, b: dict) -> str:
    keys = [
        ("tok/s/gpu", "output_tok_per_s_per_gpu"),
        ("ttft p99", "ttft_ms_p99"),
        ("itl p50", "itl_ms_p50"),
        ("L2 hit", "l2_hit_rate"),
    ]
    differ = []
    wa, wb = a.get("workarounds") or [], b.get("workarounds") or []
    if sorted(wa) != sorted(wb):
        differ.append(
            f"WARNING: A and B differ in known-issue workarounds (A: {', '.join(wa or ['none'])}; "
            f"B: {', '.join(wb or ['none'])}): the ratios mix unlike runs"
        )
    if a.get("mode", "sweep") != b.get("mode", "sweep"):
        differ.append(f"WARNING: A is a {a.get('mode', 'sweep')} run, B a {b.get('mode', 'sweep')} run")
    lines = [
        *differ,
        f"A: {a['config_key']} {a['variant']} ({a['run']})",
        f"B: {b['config_key']} {b['variant']} ({b['run']})",
        f"{'conc':>5}  " + "  ".join(f"{h + ' A':>12} {h + ' B':>12} {'B/A':>6}" for h, _ in keys),
    ]
    rows_b = {r["concurrency"]: r for r in b["rows"]}
    for ra in a["rows"]:
        rb = rows_b.get(ra["concurrency"], {})
        cells = []
        for _, k in keys:
            va, vb = ra.get(k), rb.get(k)
            ratio = f"{vb / va:.2f}" if va and vb is not None else "-"
            cells.append(f"{_fmt(va, 2):>12} {_fmt(vb, 2):>12} {ratio:>6}")
        lines.append(f"{ra['concurrency']:>5}  " + "  ".join(cells))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="report", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("report", help="write <run>/summary.json and <run>/pareto.png, print the table")
    r.add_argument("run", type=Path)
    c = sub.add_parser("compare", help="two runs side by side, per concurrency")
    c.add_argument("a", type=Path)
    c.add_argument("b", type=Path)
    args = p.parse_args(argv)
    try:
        if args.command == "report":
            summary = report(args.run)
            print(table(summary))
            print(f"summary: {args.run / 'summary.json'}\nplot: {args.run / 'pareto.png'}")
        else:
            print(compare(summarize(args.a), summarize(args.b)))
    except ReportError as exc:
        print(f"report: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
