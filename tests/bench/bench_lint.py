"""`make bench-lint`: how long linting the whole InferenceX reference corpus takes (target: under 1 s)."""

from __future__ import annotations

import contextlib
import io
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from schemas import lint  # noqa: E402
from tests.paths import reference  # noqa: E402

RUNS = 7
TARGET_S = 1.0


def cases() -> dict[str, list[str]]:
    runners = str(reference("runners.yaml"))
    master = str(reference("amd-master.yaml"))
    return {
        "amd-master (inferencex)": ["--profile", "inferencex", "--runners", runners, master],
        "perf-changelog (772 entries)": [
            "--repo",
            "SemiAnalysisAI/InferenceX",
            "--profile",
            "inferencex",
            "--runners",
            runners,
            "--changelog",
            str(reference("perf-changelog.yaml")),
            master,
        ],
        "pr1924 + pr2326 entries (strict)": [
            "--runners",
            runners,
            str(reference("pr1924-kimi-agentic-entry.yaml")),
            str(reference("pr2326-entry.yaml")),
        ],
    }


def in_process(argv: list[str]) -> float:
    start = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        lint.main(argv)
    return time.perf_counter() - start


def cold(argv: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "schemas.lint", *argv], cwd=ROOT, capture_output=True, check=False)
    return time.perf_counter() - start


def main() -> int:
    rows = []
    for name, argv in cases().items():
        warm = [in_process(argv) for _ in range(RUNS)]
        rows.append(
            {
                "case": name,
                "warm_median_s": statistics.median(warm),
                "warm_min_s": min(warm),
                "cold_process_s": statistics.median(cold(argv) for _ in range(3)),
            }
        )
    everything = [a for argv in cases().values() for a in argv]
    total_cold = statistics.median(cold(everything) for _ in range(3))
    print(f"{'case':36} {'warm median':>12} {'warm min':>10} {'cold process':>13}")
    for r in rows:
        timings = f"{r['warm_median_s']:>11.3f}s {r['warm_min_s']:>9.3f}s {r['cold_process_s']:>12.3f}s"
        print(f"{r['case']:36} {timings}")
    print(f"{'whole corpus, one process':36} {'':>12} {'':>10} {total_cold:>12.3f}s")
    out = ROOT / "out" / "bench" / "lint.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {"runs": RUNS, "rows": rows, "whole_corpus_cold_s": total_cold, "target_s": TARGET_S}, indent=2
        )
        + "\n"
    )
    verdict = "meets" if total_cold < TARGET_S else "MISSES"
    where = out.relative_to(ROOT)
    print(f"whole corpus: {total_cold:.3f} s ({verdict} the {TARGET_S:.0f} s target); JSON: {where}")
    return 0 if total_cold < TARGET_S else 1


if __name__ == "__main__":
    sys.exit(main())
