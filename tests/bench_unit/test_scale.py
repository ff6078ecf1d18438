"""The parsing behind `make bench-scale` (tests/bench/scale_*.py) on hand-made run folders and /proc text:
no cluster needed, so `make test-unit` runs them."""

from __future__ import annotations

import os

import pytest

from scripts import statefiles
from tests.bench import bench_scale, scale_config, scale_measure, scale_memory

T0 = 1_800_000_000.0


def _node(run_dir, node: str, marks: list[tuple[float, str]], engine_started: float | None) -> None:
    state = run_dir / statefiles.FOLDER / node
    state.mkdir(parents=True)
    # the script's CPU: 10 ticks (0.1 s) a second of its life
    (state / statefiles.MARKS).write_text(
        "".join(f"{T0 + at:.6f} {round(at * 10)} {what}\n" for at, what in marks)
    )
    if engine_started is not None:
        pid = state / f"vllm{statefiles.PID_SUFFIX}"
        pid.write_text("123\n")
        os.utime(pid, (T0 + engine_started, T0 + engine_started))
    outcome = state / statefiles.OUTCOME
    outcome.write_text("rc=0\n")
    os.utime(outcome, (T0 + 30, T0 + 30))


def _job(tmp_path):
    """A 2-node job: sim1 (prefill, router, benchmark) and sim2 (decode), times in seconds from T0."""
    lead = [
        (0.0, "init"),
        (1.0, "step start barrier"),
        (2.5, "released start"),
        (2.6, "step prefill vllm"),
        (5.0, "ready vllm"),
        (5.1, "step ready barrier"),
        (6.5, "released ready"),
        (6.6, "step router"),
        (7.6, "ready router"),
        (7.7, "step smoke and KV proof"),
        (8.7, "step benchmark conc2"),
        (20.0, "step finish barrier"),
        (20.5, "released finish"),
    ]
    _node(tmp_path, "sim1", lead, engine_started=2.7)
    other = [
        (0.4, "init"),
        (2.0, "step start barrier"),
        (2.4, "released start"),
        (2.5, "step decode vllm"),
        (6.0, "ready vllm"),
        (6.1, "step ready barrier"),
    ]
    _node(tmp_path, "sim2", other, engine_started=3.0)
    records = tmp_path / "results" / "conc2"
    records.mkdir(parents=True)
    start, end = int((T0 + 10) * 1e9), int((T0 + 19) * 1e9)
    (records / "profile_export.jsonl").write_text(
        f'{{"metadata": {{"request_start_ns": {start + 10**9}, "request_end_ns": {end - 10**9}}}}}\n'
        f'{{"metadata": {{"request_start_ns": {start}, "request_end_ns": {end}}}}}\n'
    )
    return tmp_path


def test_timings_of_a_job_from_its_marks(tmp_path):
    launch = scale_measure.LaunchCpu({"sim1": 40, "sim2": 30}, read_at=T0 + 3.1)  # 0.1 s after sim2's engine
    t = scale_measure.timings(_job(tmp_path), 2, job_end=T0 + 32, cpus=2, launch=launch)
    assert t.missing == []
    expect = {
        "launch_skew_s": 0.4,
        "preflight_s": 2.0,  # the last node entered the start barrier 2 s after the first script started
        "barrier_s": 1.5,  # first in (1.0) -> last released (2.5)
        "barrier_fanin_s": 1.0,
        "barrier_release_s": 0.5,
        "engine_own_max_s": 3.0,  # sim2: started at 3.0, healthy at 6.0
        "engine_spawn_max_s": 0.5,
        "all_ready_s": 6.0,
        "overhead_s": 3.0,
        "ready_barrier_s": 0.5,
        "router_ready_s": 1.0,
        "first_request_s": 7.7,
        "smoke_and_scrape_s": 1.0,
        "first_benchmark_request_s": 10.0,
        "after_benchmark_s": 1.0,
        "teardown_s": 11.5,
        "nodes_done_to_end_s": 2.0,
        "node_cpu_s": 0.25,  # sim2 entered its engine step at 2.5 s: 25 ticks
        "leader_cpu_s": 0.26,
        "script_floor_s": 0.255,  # (0.25 + 0.26) / 2 CPUs
        "launch_cpu_s": 0.3,  # sim2's processes when the last engine was launched
        "launch_read_late_s": 0.1,
        "cpu_floor_s": 0.25,  # (0.4 + 0.3) / 2 CPUs, less what 0.1 s of the host's time can have added
        "shared_cpu_s": 0.0,  # two nodes on two CPUs: no node waited for a CPU
        "overhead_unshared_s": 3.0,
        "overhead_unshared_scripts_s": 3.0,
    }
    got = t.as_dict()
    assert {k: round(got[k], 3) for k in expect} == expect


def test_a_missing_node_or_engine_is_said_not_guessed(tmp_path):
    _node(tmp_path, "sim1", [(0.0, "init"), (1.0, "step start barrier")], engine_started=None)
    t = scale_measure.timings(tmp_path, 2, job_end=None)
    assert t.missing == ["marks of 1 of 2 nodes", "sim1: engine start or ready"]
    assert t.overhead_s is None and t.teardown_s is None and t.barrier_s is None


def test_marks_skip_torn_lines_and_the_leader_timeline_starts_at_the_first_script(tmp_path):
    assert scale_measure.read_marks("1.5 3 init\ngarbage\n2.25 7 step x y\n3 4\n4 x y") == [
        (1.5, "init"),
        (2.25, "step x y"),
    ]
    timeline = scale_measure.leader_timeline(_job(tmp_path))
    assert timeline[0] == (0.0, "init") and timeline[-1] == (20.5, "released finish")


def test_request_span_and_ratio():
    assert scale_measure.request_span(b"") == (None, None)
    assert scale_measure.request_span(b'"request_start_ns": 2000000000, "request_end_ns":3000000000') == (
        2.0,
        3.0,
    )
    assert scale_measure.ratio(3.0, 1.5) == 2.0
    assert scale_measure.ratio(3.0, 0.0) is None and scale_measure.ratio(None, 1.0) is None


def test_processes_are_told_apart_by_command_line():
    kinds = {
        "slurmd -D -N sim4 -f /x/slurm.conf": "slurmd",
        "slurmstepd: [12.0]": "slurmstepd",
        "/work/.venv/bin/python /work/sim/bin/vllm serve /m --port 8000": "engine",
        "python3 -m proxy --host 127.0.0.11": "router",
        "/work/.venv-bench/bin/python /work/.venv-bench/bin/aiperf profile": "benchmark",
        "bash /run/recipe/server_vllm.sh": "node script",
        "/bin/bash /x/run-service.sh vllm": "node script",
        "python3 /run/scripts/logwatch.py --plan p": "tools",
    }
    assert {c: scale_memory.kind_of(c) for c in kinds} == kinds


def test_a_process_belongs_to_a_node_by_its_slurmd_or_its_job():
    ours = f"{scale_memory.MARKER}=/w/.cluster".encode()
    assert scale_memory.node_of("slurmd -D -N sim7 -f c", ours + b"\0PATH=/bin", "/w/.cluster", "5") == "sim7"
    task = b"SLURM_JOB_ID=5\0SLURMD_NODENAME=sim3\0"
    assert scale_memory.node_of("bash s.sh", task, "/w/.cluster", "5") == "sim3"
    assert scale_memory.node_of("bash s.sh", task, "/w/.cluster", "6") is None  # another job
    assert scale_memory.node_of("slurmd -D -N sim7", b"X=1", "/w/.cluster", "5") is None  # another cluster


def test_memory_per_node_is_the_median_of_its_sums():
    assert scale_memory.memory_of(b"Rss:   2048 kB\nPss:    1024 kB\nPss_Anon: 5 kB\n") == (2048, 1024)
    P = scale_memory.Proc
    samples = [
        [P(1, "sim1", "engine", 100 * 1024, 50 * 1024), P(2, "sim2", "engine", 60 * 1024, 30 * 1024)],
        [P(1, "sim1", "engine", 110 * 1024, 55 * 1024), P(2, "sim2", "engine", 70 * 1024, 35 * 1024)],
        [P(1, "sim1", "engine", 90 * 1024, 45 * 1024), P(3, "sim2", "tools", 10 * 1024, 5 * 1024)],
    ]
    by_node = {n.node: n for n in scale_memory.per_node(samples)}
    assert (by_node["sim1"].rss_mib, by_node["sim1"].pss_mib) == (100.0, 50.0)
    assert by_node["sim2"].rss_mib == 60.0 and by_node["sim2"].by_kind_rss_mib == {
        "engine": 65.0,
        "tools": 10.0,
    }
    s = scale_memory.summary(list(by_node.values()), "sim1")
    assert s["node_rss_mib"] == 60.0 and s["leader_rss_mib"] == 100.0 and s["total_rss_mib"] == 160.0


def test_the_scale_configs_are_half_prefill_half_decode():
    assert scale_config.shape(32) == (16, 16)
    assert scale_config.variant_of(4) == "fsl1k64_p2x8_d2x8"
    with pytest.raises(ValueError, match="even number"):
        scale_config.shape(5)
    points = scale_config.entry([4, 8])[scale_config.KEY]["scenarios"]["fixed-seq-len"][0]["search-space"]
    assert [(p["prefill"]["num-worker"], p["decode"]["num-worker"]) for p in points] == [(2, 2), (4, 4)]


def test_the_fault_is_on_the_last_node_and_the_summary_line_names_the_largest_n():
    fault = bench_scale.last_node_fault(16)
    assert fault.node == "sim16" and fault.env["SIM_FAULT_HOST"] == "127.0.0.26"
    assert fault.failure.name == "decode-crash-mid-stream" and fault.env["SIM_FAULT_ROLE"] == "decode"
    runs = [
        {
            "nodes": 4,
            "clean": {"timings": {"overhead_s": 2.0, "overhead_unshared_s": 1.5}},
            "fault": {"detection_s": 1.0, "verdict": "ok"},
        },
        {
            "nodes": 8,
            "clean": {"timings": {"overhead_s": 5.0, "overhead_unshared_s": 1.8}},
            "fault": {"detection_s": 1.5, "verdict": "ok"},
        },
    ]
    cpus = os.cpu_count()
    assert bench_scale.summary_line(runs) == (
        f"scale: 8 nodes, overhead ratio 1.20 (as measured 2.50, with 8 nodes' own start work sharing {cpus} "
        "CPUs), fault detection 1.50 s, verdict ok"
    )


def test_bench_arguments_refuse_odd_and_too_many_nodes():
    assert bench_scale.parse_args(["--nodes", "8,4"]).counts == [4, 8]
    for bad in ("3", "4,34"):
        with pytest.raises(SystemExit):
            bench_scale.parse_args(["--nodes", bad])


def test_the_overhead_without_sharing_takes_off_only_the_least_that_sharing_cost(tmp_path):
    """Four nodes of 1 s of CPU each on 2 CPUs need at least 2 s where each would need 1 s on its own host."""
    for i in range(4):
        _node(
            tmp_path, f"sim{i + 1}", [(0.0, "init"), (10.0, "step decode vllm"), (20.0, "ready vllm")], 10.0
        )
        marks = tmp_path / statefiles.FOLDER / f"sim{i + 1}" / statefiles.MARKS
        marks.write_text(marks.read_text().replace(" 100 step", " 100 step"))  # 10 s x 10 ticks = 1 s of CPU
    launch = scale_measure.LaunchCpu({f"sim{i + 1}": 100 for i in range(4)}, read_at=T0 + 10.0)
    t = scale_measure.timings(tmp_path, 4, job_end=None, cpus=2, launch=launch)
    assert (t.node_cpu_s, t.cpu_floor_s, t.shared_cpu_s) == (1.0, 2.0, 1.0)
    assert (t.overhead_s, t.overhead_unshared_s) == (10.0, 9.0)
    # read 0.5 s late: up to 0.5 s of the host's CPUs may be in the sum, so the floor is 0.5 s lower
    late = scale_measure.LaunchCpu(launch.ticks, read_at=T0 + 10.5)
    t = scale_measure.timings(tmp_path, 4, job_end=None, cpus=2, launch=late)
    assert (t.launch_read_late_s, t.cpu_floor_s, t.shared_cpu_s, t.overhead_unshared_s) == (
        0.5,
        1.5,
        0.5,
        9.5,
    )
    # more taken off than the overhead leaves: never below the busiest node script's own CPU (1 s here)
    heavy = scale_measure.LaunchCpu({f"sim{i + 1}": 400 for i in range(4)}, read_at=T0 + 10.0)
    t = scale_measure.timings(tmp_path, 4, job_end=None, cpus=1, launch=heavy)
    assert (t.cpu_floor_s, t.shared_cpu_s, t.overhead_unshared_s) == (16.0, 12.0, 1.0)
    assert t.overhead_unshared_scripts_s == 7.0  # the scripts alone: 4 s on 1 CPU, 3 s of it shared
    # without every node's CPU at the launch, nothing is taken off: the overhead without sharing is unknown
    partial = scale_measure.LaunchCpu({"sim1": 100}, read_at=T0 + 10.0)
    for missing in (None, partial):
        t = scale_measure.timings(tmp_path, 4, job_end=None, cpus=2, launch=missing)
        assert (t.cpu_floor_s, t.overhead_unshared_s) == (None, None)
        assert t.missing == ["every node's CPU at the last engine's launch"]


def test_a_nodes_cpu_is_every_process_under_its_job_step(tmp_path):
    """/proc/<pid>/stat read for ppid and utime+stime+cutime+cstime (a command name may hold ') '); a node's
    CPU is the tree under the slurmstepd whose node script started its engine; its slurmd is not in it."""
    stat = b"42 (odd) name) S 7 42 42 0 -1 4194560 1 2 3 4 10 20 30 40 20 0 1 0 99 1 2\n"
    assert scale_memory.stat_fields(stat) == (7, 100)
    proc = tmp_path / "proc"
    rows = {  # pid: (ppid, ticks)
        1: (0, 5),
        10: (1, 50),  # slurmd of sim1: not the job's
        11: (1, 3),  # slurmstepd of sim1's job step (daemonized)
        12: (11, 40),  # sim1's node script
        13: (12, 7),  # its engine's service wrapper (the pid file's)
        14: (13, 25),  # the engine
        15: (12, 4),  # a log watcher
        21: (1, 2),  # sim2's slurmstepd
        22: (21, 30),
        23: (22, 1),
    }
    for pid, (ppid, ticks) in rows.items():
        (proc / str(pid)).mkdir(parents=True)
        (proc / str(pid) / "stat").write_bytes(
            f"{pid} (x) S {ppid} 0 0 0 0 0 0 0 0 0 {ticks} 0 0 0 0".encode()
        )
    (proc / "self").mkdir()  # not a pid
    (proc / "99").mkdir()  # ended while listed: no stat
    stats = scale_memory.read_stats(proc)
    assert stats == rows
    assert scale_memory.job_cpu(stats, {"sim1": 13, "sim2": 23}) == {"sim1": 3 + 40 + 7 + 25 + 4, "sim2": 33}
    assert scale_memory.job_cpu(stats, {"sim3": 77}) == {}  # its engine gone: no guess


def test_host_busy_is_the_cpu_share_between_the_samples_around_the_start_phase(tmp_path):
    """/proc/stat's first line read as (busy, total) ticks; the share over job start -> every engine ready
    from the samples just outside that span; samples that do not cover it say nothing."""
    assert scale_measure.read_cpu_times("cpu  10 1 5 80 4 0 0 0 0 0\ncpu0 5 0 2 40 2 0 0 0 0 0\n") == (
        16,
        100,
    )
    assert scale_measure.read_cpu_times("intr 1 2 3\n") is None
    assert scale_measure.read_cpu_times("cpu 1 two 3 4\n") is None
    job = _job(tmp_path)  # job start T0, every engine ready T0 + 6
    samples = [(T0 - 0.2, 100, 200), (T0 + 3, 250, 400), (T0 + 6.1, 460, 600), (T0 + 9, 470, 900)]
    t = scale_measure.timings(job, 2, job_end=T0 + 32, cpus=2, cpu_samples=samples)
    assert t.host_busy == (460 - 100) / (600 - 200)  # 0.9: T0 - 0.2 -> T0 + 6.1
    assert scale_measure.busy_share(samples[1:], T0, T0 + 6) is None  # no sample at or before the start
    assert scale_measure.timings(job, 2, job_end=T0 + 32, cpus=2).host_busy is None


def test_repeated_runs_show_the_median_one_and_their_spread():
    def run(job: str, unshared: float, ok: bool = True) -> dict:
        return {
            "job_id": job,
            "ok": ok,
            "timings": {
                "overhead_unshared_s": unshared,
                "overhead_unshared_scripts_s": unshared + 1,
                "overhead_s": unshared + 5,
            },
        }

    repeats = [run("1", 2.0), run("2", 9.0, ok=False), run("3", 1.0), run("4", 3.0)]
    assert bench_scale.median_run(repeats)["job_id"] == "1"  # 1.0, 2.0, 3.0 of the good runs
    assert bench_scale.median_run([run("5", 1.0, ok=False)])["job_id"] == "5"
    lines = bench_scale.spread_lines(
        [{"nodes": 4, "repeats": repeats}, {"nodes": 8, "repeats": [run("6", 1.0)]}]
    )
    assert lines == [
        "overhead at 4 nodes over 3 runs: without sharing 2.00 [1.00-3.00], taking off the node scripts' CPU "
        "only 3.00 [2.00-4.00], as measured 7.00 [6.00-8.00] s"
    ]
