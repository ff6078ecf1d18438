"""scripts/results.py: the gate a benchmark result must pass before the job counts it."""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import LOAD_SLACK_S, SCRIPTS, drip, http_answer, send

RESULTS = SCRIPTS / "results.py"
sys.path.insert(0, str(SCRIPTS))
import results  # noqa: E402 (scripts/ is not a package: it runs on the nodes)


def summary(**over) -> dict:
    """AIPerf 0.13.0's profile_export_aiperf.json, the keys the gate reads."""
    doc = {
        "request_count": {"avg": 100.0},
        "total_output_tokens": {"avg": 4000.0},
        "benchmark_duration": {"avg": 20.1},
        "was_cancelled": False,
        "is_complete": True,
    }
    doc.update(over)
    return {k: v for k, v in doc.items() if v is not None}


def check(tmp_path: Path, doc, *options: str) -> subprocess.CompletedProcess:
    path = tmp_path / "profile_export_aiperf.json"
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    options = options or ("--max-error-rate", "0.10", "--min-duration", "5")
    return subprocess.run(
        [sys.executable, str(RESULTS), "check", str(path), *options],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


@pytest.mark.parametrize(
    "extra",
    [
        {},
        # AIPerf 0.13.0 writes a statistic it could not compute (NaN) as null: absent, not wrong
        {"time_to_first_token": {"avg": 41.5, "p50": 40.0, "p99": None}, "request_latency": {"p90": None}},
    ],
)
def test_a_complete_run_passes(tmp_path, extra):
    done = check(tmp_path, summary(error_request_count={"avg": 5.0}, **extra))  # 5 of 105: under 10 %
    assert done.returncode == 0, done.stderr
    assert "100 requests, 4000 output tokens" in done.stdout


@pytest.mark.parametrize(
    "doc, reason",
    [
        (summary(request_count={"avg": 0.0}), "no successful request"),
        (summary(request_count=None), "no successful request"),
        (summary(total_output_tokens={"avg": 0.0}), "no output tokens"),
        (summary(error_request_count={"avg": 20.0}), "20 of 120 requests failed (more than 10%)"),
        (summary(was_cancelled=True, is_complete=False), "AIPerf cancelled the run"),
        (summary(benchmark_duration=None), "no benchmark duration"),
        (summary(benchmark_duration={"avg": 1.5}), "it measured 1.5 s, less than the 5 s a valid run takes"),
        ([], "not a JSON object"),
        ("{truncated", "unreadable"),
    ],
)
def test_the_gate_refuses_what_is_not_a_measurement(tmp_path, doc, reason):
    done = check(tmp_path, doc)
    assert done.returncode == 10
    assert reason in done.stderr


def failed_kind(count, code=None, kind=None, message="") -> dict:
    """One entry of AIPerf 0.13.0's error_summary (aiperf.common.models.error_models.ErrorDetailsCount)."""
    return {"error_details": {"code": code, "type": kind, "message": message}, "count": count}


def test_a_refusal_for_failed_requests_says_how_they_failed_most_frequent_first(tmp_path):
    kinds = [
        failed_kind(8, 502, "Bad Gateway", "decode leg failed:\nconnection reset"),
        failed_kind(60, 503, "Service Unavailable", "no healthy decode engine"),
        failed_kind(1, None, "ReadTimeout", ""),
        failed_kind(2, None, None, "x" * 5000),
    ]
    done = check(
        tmp_path, summary(error_request_count={"avg": 71.0}, was_cancelled=True, error_summary=kinds)
    )
    assert done.returncode == 10
    said = done.stderr.split("problems=", 1)[-1] if "problems=" in done.stderr else done.stderr
    assert (
        "71 of 171 requests failed (more than 10%), as: 60 x HTTP 503 Service Unavailable: no healthy decode "
        "engine; 8 x HTTP 502 Bad Gateway: decode leg failed: connection reset; 2 x " + "x" * 197 + "...; "
        "1 of other kinds; AIPerf cancelled the run"
    ) in said


@pytest.mark.parametrize(
    "summary_field",
    [None, "many", [], [1, None, "x"], [{"error_details": "x", "count": 3}], [failed_kind(True, 503)],
     [failed_kind(0, 503)], [{"error_details": {"code": "503"}, "count": 2}]],
)  # fmt: skip
def test_an_error_summary_of_another_shape_never_breaks_the_refusal(summary_field):
    shown = results.error_kinds(summary_field)
    assert shown in ("", "2 x no message")
    found = results.problems(
        summary(error_request_count={"avg": 50.0}, error_summary=summary_field), max_error_rate=0.1
    )
    assert found[0].startswith("50 of 150 requests failed (more than 10%)")


def literal(**over: str) -> str:
    """The summary as JSON text with some values replaced by literals json.dumps would never write."""
    text = json.dumps(summary(**{key: {"avg": f"@{key}@"} for key in over}))
    for key, value in over.items():
        text = text.replace(f'"@{key}@"', value)
    return text


@pytest.mark.parametrize(
    "doc, reason",
    [
        # Python's json reads these; JSON has none of them, and NaN compares false with every threshold
        (literal(request_count="NaN"), "request_count.avg is NaN, not a finite number"),
        (literal(benchmark_duration="NaN"), "benchmark_duration.avg is NaN, not a finite number"),
        (literal(total_output_tokens="Infinity"), "total_output_tokens.avg is Infinity, not a finite number"),
        (
            literal(error_request_count="-Infinity"),
            "error_request_count.avg is -Infinity, not a finite number",
        ),
        (literal(benchmark_duration="1e999"), "benchmark_duration.avg is 1e999, not a finite number"),
        (literal(request_count="1" + "0" * 400), "request_count.avg is 1000"),  # an int no float holds
        # ill-typed values of the fields the gate reads
        (summary(request_count={"avg": -100.0}), "request_count.avg is -100.0, not a finite number >= 0"),
        (summary(request_count={"avg": True}), "request_count.avg is True, not a number"),
        (summary(request_count={"avg": "100"}), "request_count.avg is '100', not a number"),
        (summary(request_count=[100]), "request_count is [100], not an object"),
        (
            summary(error_request_count={"avg": -5.0}),
            "error_request_count.avg is -5.0, not a finite number >= 0",
        ),
        (summary(total_output_tokens={"avg": False}), "total_output_tokens.avg is False, not a number"),
        (summary(benchmark_duration={"avg": "20s"}), "benchmark_duration.avg is '20s', not a number"),
        (summary(was_cancelled="true"), "was_cancelled is 'true', not true or false"),
        (summary(was_cancelled=0), "was_cancelled is 0, not true or false"),
        (summary(is_complete="false"), "is_complete is 'false', not true or false"),
        # what the report reads
        (summary(time_to_first_token={"avg": 5.0, "p99": -1.0}), "time_to_first_token.p99 is -1.0"),
        (summary(inter_token_latency={"p50": "fast"}), "inter_token_latency.p50 is 'fast', not a number"),
        (summary(request_latency="slow"), "request_latency is 'slow', not an object"),
        (summary(output_token_throughput={"avg": -3.5}), "output_token_throughput.avg is -3.5, not a finite"),
        # a document json.loads would recurse into until RecursionError
        ("[" * 100_000 + "]" * 100_000, "unreadable (nested deeper than 64 levels)"),
    ],
    ids=lambda value: str(value)[:50],  # short: pytest puts the id in the environment of subprocesses
)
def test_the_gate_refuses_non_finite_or_ill_typed_values_naming_the_field(tmp_path, doc, reason):
    done = check(tmp_path, doc)
    assert done.returncode == 10
    assert reason in done.stderr and done.stderr.count("\n") == 1, done.stderr


def test_the_gate_reads_only_floats_it_can_compare_even_in_memory():
    """problems() itself refuses NaN (a caller may hand it a document parsed another way)."""
    found = results.problems(
        summary(benchmark_duration={"avg": math.nan}), max_error_rate=0.1, min_duration=5
    )
    assert found == ["benchmark_duration.avg is nan, not a finite number >= 0"]


def test_the_report_reads_only_statistics_the_gate_checked():
    """recipes/report.py's latencies are among those the gate types."""
    from recipes import report

    assert set(report.LATENCIES.values()) <= set(results.REPORTED)
    assert set(report.PERCENTILES) <= set(results.STATS)


@pytest.mark.parametrize(
    "options",
    [
        ("--max-error-rate", "nan"),
        ("--max-error-rate", "1.5"),
        ("--max-error-rate", "0.1", "--min-duration", "nan"),
        ("--max-error-rate", "0.1", "--min-duration", "inf"),
    ],
)
def test_thresholds_that_let_everything_through_are_usage_errors(tmp_path, options):
    done = check(tmp_path, summary(), *options)
    assert done.returncode == 2 and "error: argument" in done.stderr


# ---------------------------------------------------------------- scrape


def scrape(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(RESULTS), "scrape", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_scrape_saves_each_endpoint(tmp_path, raw_http):
    url = raw_http(send(http_answer(b"vllm:x 1\n")))
    done = scrape("--out", str(tmp_path / "m"), f"decode0={url}/metrics", f"router={url}/metrics")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "m" / "decode0.prom").read_text() == "vllm:x 1\n"


def test_scrape_of_a_dripping_endpoint_fails_in_time_with_one_line(tmp_path, raw_http):
    url = raw_http(drip(http_answer(b"vllm:x 1\n" * 10_000))) + "/metrics"
    start = time.monotonic()
    done = scrape("--out", str(tmp_path / "m"), "--timeout", "2", f"decode0={url}")
    elapsed = time.monotonic() - start
    print(f"scrape --timeout 2 of a dripping endpoint: failed after {elapsed:.2f} s")
    assert done.returncode == 10
    assert done.stderr == f"metrics not collected from decode0 ({url}): no complete answer within 2 s\n"
    assert elapsed < 2 + LOAD_SLACK_S


@pytest.mark.parametrize(
    "answer, why",
    [
        (http_answer(b"busy", "503 Service Unavailable"), "HTTP 503"),
        (http_answer(b"x" * 5000), "larger than 1000"),
    ],
)
def test_scrape_refuses_an_error_or_an_endless_body(tmp_path, raw_http, monkeypatch, capsys, answer, why):
    monkeypatch.setattr(results, "MAX_METRICS_BYTES", 1000)
    url = raw_http(send(answer))
    args = argparse.Namespace(out=str(tmp_path / "m"), timeout=5.0, endpoints=[("prefill0", url)])
    assert results.scrape(args) == 10
    assert why in capsys.readouterr().err
