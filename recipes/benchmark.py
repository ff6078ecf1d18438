"""The load of a variant: AIPerf per concurrency (a sweep) or phases of varied load (a soak), with the
result gate's thresholds. Lengths, tokenizer and traces come from the runner's launch profile."""

from __future__ import annotations

from .plan import Benchmark, Ports
from .target import NODE_ADDR, Target, Unsupported
from .words import Ref, argv, word

MAX_ERROR_RATE = "0.10"  # AIPerf's --failed-request-threshold, and the result gate's (scripts/results.py)
SOAK_LENGTHS = (4, 2, 1)  # soak phases cycle the prompt through isl/4, isl/2 and isl
TEARDOWN_MARGIN_S = 600  # what a soak leaves of the time limit for start-up, proofs and teardown


def entry_url(t: Target, ports: Ports):
    """Where requests go: the router of a PD job, the one server of a single-node job."""
    return word("http://", NODE_ADDR, f":{ports.router if t.disagg else ports.engine}")


def concurrencies(t: Target) -> tuple:
    return expand_concurrencies(t.point.space)


def expand_concurrencies(space) -> tuple:
    """A point's concurrencies as InferenceX runs them: conc-list as written, or conc-start doubling up to
    conc-end, which is inclusive: 4..48 runs 4, 8, 16, 32, 48 (its CONFIGS.md; the last step is clamped)."""
    if space.conc_list is not None:
        return tuple(space.conc_list)
    out, c = [space.conc_start], space.conc_start
    while c < space.conc_end:
        c = min(c * 2, space.conc_end)
        out.append(c)
    return tuple(out)


def seconds_of(hms: str) -> int:
    h, m, s = (int(x) for x in hms.split(":"))
    return h * 3600 + m * 60 + s


def parse_duration(text: str) -> int:
    """Seconds of '90m', '2h', '600s', '600' or 'HH:MM:SS' (the soak option); ValueError otherwise."""
    text = text.strip()
    if text.count(":") == 2 and all(p.isdigit() for p in text.split(":")):
        seconds = seconds_of(text)
    else:
        scale = {"s": 1, "m": 60, "h": 3600}.get(text[-1:], 1)
        number = text[:-1] if text[-1:] in "smh" else text
        if not number.isdigit():
            raise ValueError(f"{text!r} is not a duration (e.g. 90m, 2h, 600s, 01:30:00)")
        seconds = int(number) * scale
    if seconds <= 0:
        raise ValueError(f"{text!r} is not a positive duration")
    return seconds


def check_soak_fits(seconds: int, time_limit: str) -> None:
    room = seconds_of(time_limit) - TEARDOWN_MARGIN_S
    if seconds > room:
        raise Unsupported(
            f"a soak of {seconds} s does not fit the runner's time-limit {time_limit} (at most "
            f"{max(room, 0)} s leaves {TEARDOWN_MARGIN_S} s for start-up, proofs and teardown)"
        )


def sweep(t: Target, ports: Ports, model: str) -> tuple:
    """One benchmark per concurrency; `model`: the name the engines serve the model under."""
    seconds = t.launch.benchmark.seconds
    workload = _workload_args(t, t.scenario_params.get("isl"))
    return tuple(_benchmark(t, ports, model, f"conc{c}", c, seconds, workload) for c in concurrencies(t))


def soak(t: Target, ports: Ports, total: int, model: str) -> tuple:
    """Phases of one benchmark duration each, cycling concurrency and (fixed-seq-len) prompt length so
    the engine keeps changing batch shapes: late-onset bugs (CUDA-graph replay, buffer reuse) need that."""
    seconds = t.launch.benchmark.seconds
    concs = concurrencies(t)
    isl = t.scenario_params.get("isl")
    lengths = tuple(max(1, isl // d) for d in SOAK_LENGTHS) if isl else (None,)
    out = []
    for i in range(max(1, total // seconds)):
        c, length = concs[i % len(concs)], lengths[(i // len(concs) + i) % len(lengths)]
        name = f"soak{i + 1:03d}"
        out.append(_benchmark(t, ports, model, name, c, seconds, _workload_args(t, length)))
    return tuple(out)


def _shipped(path: str):
    return word(Ref("RECIPE_DIR"), f"/{path}")


def _benchmark(
    t: Target, ports: Ports, model: str, name: str, c: int, seconds: int, workload: list
) -> Benchmark:
    args = [
        # AIPerf 0.13.0 offline reads every tokenizer name as a Hub repo id and refuses a local folder
        # (HFValidationError); its tokenizer is always a local folder here, which it reads without the Hub.
        # Datasets stay offline (HF_DATASETS_OFFLINE).
        *("env", "-u", "HF_HUB_OFFLINE", "-u", "TRANSFORMERS_OFFLINE"),
        "aiperf",
        "profile",
        "--url",
        entry_url(t, ports),
        "--endpoint",
        "/v1/chat/completions",
        "--endpoint-type",
        "chat",
        "--streaming",
        "--model",
        model,
        "--tokenizer",
        tokenizer_path(t),
        *(["--tokenizer-trust-remote-code"] if t.model.remote_code else []),
        "--concurrency",
        c,
        "--benchmark-duration",
        seconds,
        *_grace(t),
        "--random-seed",
        42,
        "--failed-request-threshold",
        MAX_ERROR_RATE,
        "--use-server-token-count",
        "--no-gpu-telemetry",  # no DCGM on these nodes; the job reads the engines' own counters
        # The job scrapes every engine's and the router's counters after each benchmark itself (results.py
        # scrape); AIPerf's collector polls only the router, twice a second, and on a loaded node its
        # service missed heartbeats and failed a run that had measured fine (CI on the 2-core machine).
        "--no-server-metrics",
        # output lengths are sent as max_completion_tokens, a cap: without this, answers end early
        "--extra-inputs",
        "ignore_eos:true",
        "--output-artifact-dir",
        word(Ref("RESULTS_DIR"), f"/{name}"),
        *workload,
    ]
    return Benchmark(
        concurrency=c,
        result=f"{t.key}_{t.variant}_{name}.json",
        argv=argv(*args),
        max_error_rate=MAX_ERROR_RATE,
        min_duration=seconds // 2,
        name=name,
    )


def tokenizer_path(t: Target):
    """The client's tokenizer. Offline, AIPerf's "builtin" tokenizer still downloads: a shipped one, or the
    model's own folder."""
    shipped = t.launch.benchmark.tokenizer
    return _shipped(shipped) if shipped else t.model_path


def input_checks(t: Target) -> tuple:
    """Rank 0's preflight: every staged input as lock.json recorded it, and the client's tokenizer present
    (with the code its auto_map names, for a model that needs remote code)."""
    tool = word(Ref("SCRIPTS_DIR"), "/inputs.py")
    checks = []
    if staged_inputs(t):
        lock = word(Ref("RUN_DIR"), "/lock.json")
        recipe = word(Ref("RECIPE_DIR"))
        checks.append(argv("python3", tool, "verify", "--lock", lock, "--recipe-dir", recipe))
    remote = ["--remote-code"] if t.model.remote_code else []
    out = word(Ref("STATE_DIR"), "/tokenizer.json")
    checks.append(argv("python3", tool, "tokenizer", tokenizer_path(t), *remote, "--out", out))
    return tuple(checks)


def _grace(t: Target) -> list:
    """The runner's grace for answers in flight at the end (launch profile benchmark.grace-seconds)."""
    grace = t.launch.benchmark.grace_seconds
    return ["--benchmark-grace-period", grace] if grace else []


def _workload_args(t: Target, isl: int | None) -> list:
    bench = t.launch.benchmark
    if t.point.scenario == "agentic-coding":
        session = ["--session-header", "X-Session-ID"]  # lets the router keep a session on one prefill
        return [*session, *_agentic_replay(t), *_trace_source(t)]
    osl = t.scenario_params["osl"]
    args = [
        "--synthetic-input-tokens-mean",
        isl,
        "--synthetic-input-tokens-stddev",
        0,
        "--output-tokens-mean",
        osl,
        "--output-tokens-stddev",
        0,
    ]
    return args + (["--prompt-corpus", bench.prompt_corpus] if bench.prompt_corpus else [])


SCENARIO_MIN_S = 900  # AIPerf's inferencex-agentx-mvp lock: shorter runs need --unsafe-override


def _agentic_replay(t: Target) -> list:
    """The launch profile's agentic replay (InferenceX's scenario, warm-up and trajectory starts)."""
    replay = t.launch.benchmark.agentic_replay
    if replay is None:
        return []
    low, high = replay.trajectory_start
    args = [
        "--scenario",
        replay.scenario,
        "--trajectory-start-min-ratio",
        low,
        "--trajectory-start-max-ratio",
        high,
        "--agentic-cache-warmup-duration",
        replay.warmup_seconds,
        "--warmup-grace-period",
        replay.warmup_grace_seconds,
        "--trace-idle-gap-cap-seconds",
        replay.idle_gap_cap_seconds,
        "--stats-interval",
        30,  # AIPerf's rolling TTFT/ITL/throughput in the job log
        "--num-dataset-entries",
        replay.dataset_entries,
        "--slice-duration",
        "1.0",
    ]
    context = t.settings(t.roles[0])["MAX_MODEL_LEN"]
    if context is not None:  # traces longer than the engines' context would only fail
        args += ["--max-context-length", context]
    if t.launch.benchmark.seconds < SCENARIO_MIN_S:
        args.append("--unsafe-override")  # the run is then marked as no valid submission
    return args


def _traces(t: Target) -> tuple:
    """The agentic trace set, staged before the job (nothing is fetched on a compute node): (its path as the
    nodes see it, 'run' when shipped with the run or 'site' when in the site's trace cache, AIPerf's
    dataset type)."""
    bench = t.launch.benchmark
    if bench.agentic_input:
        return bench.agentic_input, "run", "multi_turn"
    trace_set = t.settings(t.roles[0])["WEKA_LOADER_OVERRIDE"] or _default_trace_set(t)
    if trace_set is None or bench.trace_cache is None:
        raise Unsupported(
            f"agentic-coding on runner {t.runner_label} needs a staged trace set: the config's "
            "WEKA_LOADER_OVERRIDE=<set> (or the runner's benchmark.default-trace-sets) and the runner's "
            "benchmark.trace-cache in configs/launch.yaml (nothing is fetched on a compute node)",
            at=t.point.path,
        )
    return f"{bench.trace_cache}/{trace_set}", "site", "weka_trace"


def _default_trace_set(t: Target) -> str | None:
    """The runner's set for the model's context, where the config names none."""
    context = t.model.architecture.max_positions
    return next((c.set for c in t.launch.benchmark.default_trace_sets if context >= c.min_context), None)


def _trace_source(t: Target) -> list:
    path, where, kind = _traces(t)
    return ["--input-file", _shipped(path) if where == "run" else path, "--custom-dataset-type", kind]


def staged_inputs(t: Target) -> tuple:
    """(name, path as the nodes see it, where submit hashes it) of what the benchmark reads that is not
    rendered: a shipped tokenizer and the trace set. Where: 'run' (the run's recipe folder) or 'site'."""
    shipped = t.launch.benchmark.tokenizer
    out = [("tokenizer", shipped, "run")] if shipped else []
    if t.point.scenario == "agentic-coding":
        path, where, _ = _traces(t)
        out.append(("traces", path, where))
    return tuple(out)
