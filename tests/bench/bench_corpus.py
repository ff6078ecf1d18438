"""`make bench-corpus`: `make lint` and `make render` on a 1,000-entry master file, time and peak memory per
cold process, side by side with InferenceX's own validator on the same file."""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.bench.corpus import corpus  # noqa: E402
from tests.paths import reference  # noqa: E402

OUT = ROOT / "out" / "bench"
# Seed entries both tools accept: this repository's own, and the reference amd-master entries our strict
# profile renders (the others use settings the renderer refuses; `make lint` on that file says which).
SEEDS: dict[str, tuple[str, ...] | None] = {
    "configs/amd-master.yaml": None,  # every entry
    "configs/local-master.yaml": ("local-sim-vllm-disagg-agentic", "local-container-vllm-disagg-agentic"),
    "ref:amd-master.yaml": (
        "dsr1-fp4-mi355x-sglang-disagg",
        "dsr1-fp4-mi355x-sglang-disagg-8k1k-mtp",
        "dsr1-fp4-mi355x-sglang-disagg-mtp",
        "dsr1-fp8-mi355x-sglang-disagg",
        "dsr1-fp8-mi355x-sglang-disagg-mtp",
        "dsv4-fp4-mi355x-atom-disagg",
        "dsv4-fp4-mi355x-sglang",
        "dsv4-fp4-mi355x-sglang-disagg",
        "dsv4-fp4-mi355x-sglang-disagg-agentic-hicache-mtp",
        "dsv4-fp4-mi355x-sglang-disagg-mtp",
        "qwen3.5-fp4-mi355x-sglang",
        "qwen3.5-fp4-mi355x-sglang-disagg",
        "qwen3.5-fp8-mi355x-sglang",
        "qwen3.5-fp8-mi355x-sglang-disagg",
    ),
}
# InferenceX's validator as each of its tools runs it first: the master files, then the runner file.
IX_VALIDATE = (
    "import sys; sys.path.insert(0, sys.argv[1]); import validation as v; "
    "v.load_config_files([sys.argv[2]]); v.load_runner_file(sys.argv[3])"
)
# One verdict per entry (its loader stops at the first bad entry): how many of the corpus it accepts.
IX_COUNT = (
    "import sys, yaml; sys.path.insert(0, sys.argv[1]); import validation as v\n"
    "bad = []\n"
    "for key, entry in yaml.safe_load(open(sys.argv[2])).items():\n"
    "    try: v.validate_master_config({key: entry})\n"
    "    except ValueError as exc: bad.append(str(exc).splitlines()[0])\n"
    "print(len(bad)); print('\\n'.join(bad[:5]))"
)


@dataclass(frozen=True)
class Run:
    seconds: float
    max_rss_mib: float
    returncode: int
    stdout: str


# Runs the measured command and writes its wall time, own peak RSS (KiB) and exit code to argv[1]. A thin
# process of its own: Linux carries a parent's RSS high-water mark over fork and exec into the child's, so a
# child of this bench (which holds the parsed corpus) would report the bench's memory, not its own.
LAUNCH = (
    "import os, subprocess, sys, time\n"
    "start = time.perf_counter(); child = subprocess.Popen(sys.argv[2:])\n"
    "_, status, usage = os.wait4(child.pid, 0)\n"
    "seconds = time.perf_counter() - start\n"
    "open(sys.argv[1], 'w').write(f'{seconds} {usage.ru_maxrss} {os.waitstatus_to_exitcode(status)}')"
)


def measure(cmd: list[str], cwd: Path) -> Run:
    """One cold process, started by a thin launcher (LAUNCH): wall time and the process's own peak RSS."""
    log, numbers = OUT / "corpus-child.log", OUT / "corpus-child.numbers"
    with log.open("w") as sink:
        subprocess.run(
            [sys.executable, "-c", LAUNCH, str(numbers), *cmd], cwd=cwd, stdout=sink, stderr=sink, check=True
        )
    seconds, kib, code = numbers.read_text().split()
    return Run(float(seconds), int(kib) / 1024, int(code), log.read_text())


def seeds() -> dict[str, dict]:
    out: dict[str, dict] = {}
    for source, keys in SEEDS.items():
        path = reference(source[4:]) if source.startswith("ref:") else ROOT / source
        entries = yaml.safe_load(path.read_text())
        for key in keys or sorted(entries):
            if key not in entries:
                raise SystemExit(f"bench-corpus: seed {key!r} is not in {path}")
            out[key] = entries[key]
    return out


def write_corpus(size: int) -> Path:
    path = OUT / f"corpus-{size}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(corpus(seeds(), size), sort_keys=False, width=120))
    return path


def refused_by_us(stdout: str, path: Path, keys: list[str]) -> set[str]:
    """Corpus keys our lint output has findings for (a finding line: FILE:LINE: KEY.PATH: message)."""
    refused = set()
    for line in stdout.splitlines():
        if line.startswith(f"{path}:"):
            where = line.split(": ", 2)[1] if line.count(": ") >= 2 else ""
            refused |= {
                k for k in keys if where == k or where.startswith(f"{k}.") or where.startswith(f"{k}[")
            }
    return refused


def inferencex(flag: str | None) -> tuple[Path | None, str]:
    """The InferenceX checkout to run (its utils/matrix_logic/validation.py), or None and why not."""
    where = flag or os.environ.get("INFERENCEX_SRC")
    if not where:
        return None, "no checkout given: set INFERENCEX_SRC=<InferenceX checkout> or pass --inferencex"
    src = Path(where).resolve()
    if not (src / "utils" / "matrix_logic" / "validation.py").is_file():
        return None, f"{src} has no utils/matrix_logic/validation.py"
    return src, ""


def commit_of(src: Path) -> str:
    shown = subprocess.run(["git", "-C", str(src), "rev-parse", "HEAD"], capture_output=True, text=True)
    return shown.stdout.strip() if shown.returncode == 0 else "unknown (not a git checkout)"


def cases(path: Path, key: str, src: Path | None) -> dict[str, tuple[list[str], Path]]:
    py = sys.executable
    rendered = OUT / "corpus-render"
    out = {
        "ours: make lint CONFIGS=<corpus>": ([py, "-m", "schemas.lint", str(path)], ROOT),
        "ours: make render CONFIG=<key> CONFIGS=<corpus>": (
            [py, "-m", "recipes.render", key, "--configs", str(path), "--out", str(rendered)],
            ROOT,
        ),
        "ours: make render CONFIGS=<corpus> (all keys)": (
            [py, "-m", "recipes.render", "--configs", str(path), "--out", str(rendered)],
            ROOT,
        ),
    }
    if src is not None:
        ix_py = os.environ.get("INFERENCEX_PYTHON", py)
        utils = str(src / "utils" / "matrix_logic")
        runners = str(ROOT / "configs" / "runners.yaml")  # InferenceX's shape; names every corpus runner
        out["InferenceX: validation (master + runners)"] = (
            [ix_py, "-c", IX_VALIDATE, utils, str(path), runners],
            src,
        )
        sweep = [ix_py, f"{utils}/generate_sweep_configs.py", "full-sweep", "--config-files", str(path)]
        out["InferenceX: generate_sweep_configs full-sweep"] = ([*sweep, "--runner-config", runners], src)
    return out


def summarize(name: str, runs: list[Run]) -> dict:
    secs = [r.seconds for r in runs]
    rss = [r.max_rss_mib for r in runs]
    return {
        "case": name,
        "runs": len(runs),
        "seconds_median": statistics.median(secs),
        "seconds_min": min(secs),
        "seconds_max": max(secs),
        "max_rss_mib_median": statistics.median(rss),
        "max_rss_mib_max": max(rss),
        "exit_codes": sorted({r.returncode for r in runs}),
    }


def run_cases(todo: dict, runs: int) -> tuple[list[dict], dict[str, Run]]:
    rows, first = [], {}
    for name, (cmd, cwd) in todo.items():
        results = []
        for _ in range(runs):
            if "render" in name:  # every render writes from scratch; the last one's folders are counted
                shutil.rmtree(OUT / "corpus-render", ignore_errors=True)
            results.append(measure(cmd, cwd))
        first[name] = results[0]
        rows.append(summarize(name, results))
        print(f"  measured {name}: median {rows[-1]['seconds_median']:.2f} s", flush=True)
    return rows, first


def table(rows: list[dict]) -> None:
    print(f"{'case':50} {'median':>8} {'min':>8} {'max':>8} {'peak RSS':>10} {'exit':>5}")
    for r in rows:
        times = f"{r['seconds_median']:>7.2f}s {r['seconds_min']:>7.2f}s {r['seconds_max']:>7.2f}s"
        codes = ",".join(str(c) for c in r["exit_codes"])
        print(f"{r['case']:50} {times} {r['max_rss_mib_median']:>6.0f} MiB {codes:>5}")


def ix_refusals(src: Path, path: Path) -> tuple[int, list[str]]:
    py = os.environ.get("INFERENCEX_PYTHON", sys.executable)
    utils = str(src / "utils" / "matrix_logic")
    done = subprocess.run([py, "-c", IX_COUNT, utils, str(path)], capture_output=True, text=True, check=True)
    count, *why = done.stdout.splitlines()
    return int(count), [w for w in why if w]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench-corpus", description=__doc__.splitlines()[0])
    p.add_argument("--size", type=int, default=1000, help="entries in the corpus (default 1000)")
    p.add_argument("--runs", type=int, default=3, help="cold processes per case (default 3)")
    p.add_argument("--inferencex", help="InferenceX checkout (default: $INFERENCEX_SRC)")
    args = p.parse_args(argv)
    path = write_corpus(args.size)
    keys = list(yaml.safe_load(path.read_text()))
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    size = path.stat().st_size
    print(f"corpus: {path.relative_to(ROOT)}: {len(keys)} entries, {size} bytes, sha256 {digest[:16]}")
    src, why_not = inferencex(args.inferencex)
    result: dict = {"date": time.strftime("%Y-%m-%d"), "size": len(keys), "corpus_sha256": digest}
    if src is None:
        print(f"InferenceX validator: not measured ({why_not})")
        result["inferencex"] = {"measured": False, "why": why_not}
    else:
        refused, why = ix_refusals(src, path)
        result["inferencex"] = {"measured": True, "commit": commit_of(src), "refused": refused, "why": why}
        print(
            f"InferenceX {result['inferencex']['commit']}: accepts {len(keys) - refused}, refuses {refused}"
        )
        print("".join(f"  {w}\n" for w in why), end="")
    rows, first = run_cases(cases(path, keys[0], src), args.runs)
    ours = refused_by_us(first["ours: make lint CONFIGS=<corpus>"].stdout, path, keys)
    rendered = len(list((OUT / "corpus-render").rglob("plan.json")))
    result.update(
        rows=rows, ours_refused=sorted(ours), rendered_variants=rendered, python=sys.version.split()[0]
    )
    print(
        f"ours: accepts {len(keys) - len(ours)}, refuses {len(ours)}; render of all keys: {rendered} variants"
    )
    table(rows)
    out = OUT / "corpus.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"JSON: {out.relative_to(ROOT)}")
    print(summary(rows, len(keys)))
    return 0 if all(r["exit_codes"] == [0] for r in rows) and not ours else 1


def summary(rows: list[dict], size: int) -> str:
    """The one-line result: each case's median seconds and peak memory."""
    cells = [
        f"{SHORT[r['case']]} {r['seconds_median']:.1f} s {r['max_rss_mib_median']:.0f} MiB" for r in rows
    ]
    return f"bench-corpus ({size} entries): " + "; ".join(cells)


SHORT = {
    "ours: make lint CONFIGS=<corpus>": "lint",
    "ours: make render CONFIG=<key> CONFIGS=<corpus>": "render one key",
    "ours: make render CONFIGS=<corpus> (all keys)": "render all",
    "InferenceX: validation (master + runners)": "InferenceX validation",
    "InferenceX: generate_sweep_configs full-sweep": "InferenceX full-sweep",
}


if __name__ == "__main__":
    sys.exit(main())
