"""The load of a variant: AIPerf per concurrency (a sweep) or phases of varied load (a soak), with the
result gate's thresholds. Lengths, tokenizer and traces come from the runner's launch profile."""

from __future__ import annotations

from .plan import Benchmark, ClientScenario, Ports, Staged
from .target import NODE_ADDR, Target, Unsupported
from .words import Ref, argv, word

MAX_ERROR_RATE = "0.10"  # AIPerf's --failed-request-threshold, and the result gate's (scripts/results.py)
SOAK_LENGTHS = (4, 2, 1)  # soak phases cycle the prompt through isl/4, isl/2 and isl
TEARDOWN_MARGIN_S = 600  # what a soak leaves of the time limit for start-up, proofs and teardown


def entry_url(t: Target, ports: Ports):
    """Where requests go: the router of a PD job, the one server of a single-node job."""
    return word("http://", NODE_ADDR, f":{ports.router if t.disagg else ports.engine}")


def concurrencies(t: Target) -> tuple:
    """The concurrencies this allocation runs: its one point's, or every one of the search-space point."""
    return (t.concurrency,) if t.concurrency is not None else expand_concurrencies(t.point.space)


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


def point_seconds(t: Target) -> int:
    """How long one concurrency is measured: an agentic point's replay duration, else the runner's."""
    if t.point.scenario == "agentic-coding":
        return t.launch.benchmark.agentic_replay.seconds
    return t.launch.benchmark.seconds


def sweep(t: Target, ports: Ports, model: str) -> tuple:
    """One benchmark per concurrency; `model`: the name the engines serve the model under."""
    seconds = point_seconds(t)
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
        *("env", "-u", "HF_HUB_OFFLINE", "-u", "TRANSFORMERS_OFFLINE", *client_env(t)),
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
    # InferenceX's <result>_conc<C>.json: a one-point allocation's variant already ends in _conc<C>
    result = (
        f"{t.key}_{t.variant}.json"
        if t.concurrency == c and name == f"conc{c}"
        else f"{t.key}_{t.variant}_{name}.json"
    )
    return Benchmark(
        concurrency=c,
        result=result,
        argv=argv(*args),
        max_error_rate=MAX_ERROR_RATE,
        min_duration=seconds // 2,
        name=name,
        gate=argv(*_gate(t)),
    )


def _gate(t: Target) -> list:
    """The result gate's check of the client's scenario lock (agentic runs)."""
    if t.point.scenario != "agentic-coding":
        return []
    verdict = "valid" if submission_valid(t) else "invalid"
    return ["--scenario", t.launch.benchmark.agentic_replay.scenario, "--submission", verdict]


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
# Where the client reads the staged corpus: a folder of the run holding only a link to the staged dataset
# (make submit writes it), so the site's cache stays read-only and exactly the hashed copy is read.
DATASETS_CACHE = "datasets-cache"


def client_env(t: Target) -> list:
    """NAME=value words the client's line sets: where the staged corpus is read from, and the configure
    timeouts of the agentic replay (the client's own are shorter than loading a real corpus takes)."""
    if t.point.scenario != "agentic-coding":
        return []
    seconds = t.launch.benchmark.agentic_replay.configure_seconds
    return [
        word("HF_DATASETS_CACHE=", Ref("RUN_DIR"), f"/{DATASETS_CACHE}"),
        f"AIPERF_DATASET_CONFIGURATION_TIMEOUT={seconds}",
        f"AIPERF_SERVICE_PROFILE_CONFIGURE_TIMEOUT={seconds}",
        *_session_routing_key(t),
    ]


def _session_routing_key(t: Target) -> list[str]:
    """SGLang's router hashes a request to a prefill DP rank by its X-SMG-Routing-Key: AIPerf sends the
    session's correlation id as that key, so a session's turns reach the rank holding its prefix (as
    InferenceX's trace_replay.sh turns it on for DP-attention prefill)."""
    if t.engine == "sglang" and t.worker("prefill").dp_attn:
        return ["AIPERF_HTTP_X_SMG_ROUTING_KEY_FROM_CORRELATION_ID=true"]
    return []


def _agentic_replay(t: Target) -> list:
    """The launch profile's agentic replay (InferenceX's scenario, warm-up and trajectory starts)."""
    replay = t.launch.benchmark.agentic_replay
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
    if not submission_valid(t):
        args.append("--unsafe-override")  # the run is then marked as no valid submission
    return args


def submission_valid(t: Target) -> bool:
    """Whether the client's scenario can stamp this run a valid submission: its full duration, no
    override. The local runners' short runs cannot (and their corpus is made up anyway)."""
    return t.launch.benchmark.agentic_replay.seconds >= SCENARIO_MIN_S


def expected_violations(t: Target) -> tuple:
    """The scenario lock's violations a run knowingly carries (downgraded by --unsafe-override): the
    client check refuses any other, and so does the result gate."""
    return () if submission_valid(t) else ("--benchmark-duration",)


def trace_set(t: Target) -> str:
    """AIPerf's --public-dataset name of the corpus: the config's WEKA_LOADER_OVERRIDE, else the runner's
    choice for the model's context."""
    bench = t.launch.benchmark
    chosen = t.settings(t.roles[0])["WEKA_LOADER_OVERRIDE"] or _default_trace_set(t)
    if chosen is None or bench.hf_cache is None:
        raise Unsupported(
            f"agentic-coding on runner {t.runner_label} needs a staged corpus: the config's "
            "WEKA_LOADER_OVERRIDE=<AIPerf public dataset> (or the runner's benchmark.default-trace-sets) and "
            "the runner's benchmark.hf-cache in configs/launch.yaml (nothing is fetched on a compute node)",
            at=t.point.path,
        )
    return chosen


def _default_trace_set(t: Target) -> str | None:
    """The runner's set for the model's context, where the config names none."""
    context = t.model.architecture.max_positions
    return next((c.set for c in t.launch.benchmark.default_trace_sets if context >= c.min_context), None)


def _trace_source(t: Target) -> list:
    return ["--public-dataset", trace_set(t)]


def staged_inputs(t: Target) -> tuple:
    """What the job reads that is not rendered: a tokenizer shipped with the run, the agentic corpus, staged
    into the site's hf-cache under AIPerf's public dataset name, and the graded eval's questions."""
    shipped = t.launch.benchmark.tokenizer
    out = [Staged("tokenizer", "shipped", shipped)] if shipped else []
    if t.point.scenario == "agentic-coding":
        hf_cache = t.launch.benchmark.hf_cache
        out.append(Staged("traces", "hf-dataset", hf_cache or "", trace_set(t)))
    from . import accuracy  # recipes/accuracy.py reads this module's URLs: imported here, against the cycle

    eval_set = accuracy.staged(t)
    return (*out, eval_set) if eval_set else tuple(out)


def client_scenario(t: Target) -> ClientScenario | None:
    """The scenario lock the client runs under, with the outcome the job expects of it."""
    if t.point.scenario != "agentic-coding":
        return None
    return ClientScenario(
        name=t.launch.benchmark.agentic_replay.scenario,
        corpus=t.launch.benchmark.corpus,
        dataset=trace_set(t),
        submission=submission_valid(t),
        allowed_violations=expected_violations(t),
    )
