"""The real-engine pass's engine logs read back, one record per Mooncake transfer: when the prefill got
its leg and finished it, when the decode got its leg, asked the prefill for the KV and had it, so that a
stall can be placed (before the decode leg arrived, or in the transfer) and told apart per router.

The lines are vLLM 0.32's with the bench's logging config (tests/bench/proxy_real.py logging_config):
`LEVEL HH:MM:SS.mmm pid=N [file.py:line] message`, the Mooncake connector's at DEBUG.
"""

from __future__ import annotations

import math
import re
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from tests.bench.proxy_report import Row, percentile

LINE = re.compile(
    r"^(?P<level>[A-Z]+) (?P<h>\d\d):(?P<m>\d\d):(?P<s>\d\d)\.(?P<ms>\d{3}) pid=\d+ \[[^\]]+\] (?P<msg>.*)$"
)
TRANSFER_ID = re.compile(r"'transfer_id': '([^']+)'")
QUOTED = re.compile(r"'([^']+)'")
RECEIVED = re.compile(r"^Received request (\S+): ")
ALLOC = re.compile(r"^MooncakeConnector update_state_after_alloc: req_id=(\S+) ")
FINISHED = re.compile(r"^MooncakeConnector request_finished, req_id=(\S+), request_status=(\S+),")
PULL_START = re.compile(r"^Sending kv transfer request for (\{.*\}) on path")
PULL_END = re.compile(r"^pulling kv_caches for (\[.*?\]) (finished|failed)")
SEND_DONE = re.compile(r"^Sending to (\S+) done, took ([0-9.e-]+)")
SEND_FAILED = re.compile(r"^Sending to (\S+) failed \(ret=(-?\d+)\) after ([0-9.e-]+)")
ACCESS = re.compile(r'^INFO: +\S+ - "(GET|POST) (\S+) HTTP/1\.1" (\d+)')
# A KV wait this long is a stall: on this machine a transfer that does not stall takes 5 to ~700 ms.
STALL_S = 2.0
# Anything the connector or the engine says about a transfer going wrong, counted by its first words.
TROUBLE = re.compile(
    r"(Timeout waiting for P side ready|expired before sending|timed out after \d+ seconds without being sent"
    r"|Missing transfer_id|Error in _sender_worker|Error processing Mooncake)"
)


@dataclass
class Transfer:
    """Seconds of the day (the logs' clock) of one transfer's steps; nan when not seen."""

    transfer_id: str
    prefill_received: float = math.nan
    prefill_finished: float = math.nan
    decode_received: float = math.nan
    pull_started: float = math.nan
    pull_ended: float = math.nan
    pull_failed: bool = False

    @property
    def decode_sent_after_prefill(self) -> float:
        """The decode leg's arrival minus the prefill's finish: the router's turn-around (negative if the
        decode leg was sent before the prefill finished)."""
        return self.decode_received - self.prefill_finished

    @property
    def kv_wait(self) -> float:
        """From the decode leg's arrival until its KV was in: what a Mooncake stall adds to TTFT."""
        return self.pull_ended - self.decode_received

    @property
    def pull(self) -> float:
        """The decode's pull request to the prefill until the KV was in."""
        return self.pull_ended - self.pull_started


@dataclass
class Trace:
    transfers: dict[str, Transfer] = field(default_factory=dict)
    sends: list[float] = field(default_factory=list)  # the prefill's Mooncake write durations (s)
    send_failures: list[str] = field(default_factory=list)  # "ret=R after S s"
    trouble: Counter[str] = field(default_factory=Counter)
    access: Counter[str] = field(default_factory=Counter)  # "GET /health" etc. on either engine

    def get(self, transfer_id: str) -> Transfer:
        return self.transfers.setdefault(transfer_id, Transfer(transfer_id))


def _clock(m: re.Match) -> float:
    return int(m["h"]) * 3600 + int(m["m"]) * 60 + int(m["s"]) + int(m["ms"]) / 1000


def read(prefill: Iterable[str], decode: Iterable[str]) -> Trace:
    """Both engines' log lines into one Trace, transfers keyed by their transfer_id."""
    trace = Trace()
    _read_side(trace, prefill, "prefill")
    _read_side(trace, decode, "decode")
    return trace


def _read_side(trace: Trace, lines: Iterable[str], role: str) -> None:
    by_req: dict[str, str] = {}  # the engine's request id (both forms) -> transfer_id
    for raw in lines:
        access = ACCESS.match(raw)
        if access:
            trace.access[f"{role} {access[1]} {access[2]}"] += 1
            continue
        line = LINE.match(raw.rstrip("\n"))
        if line is None:
            continue
        t, msg = _clock(line), line["msg"]
        if found := TROUBLE.search(msg):
            trace.trouble[f"{role}: {found[1]}"] += 1
        if (m := RECEIVED.match(msg)) and (tid := TRANSFER_ID.search(msg)):
            by_req[m[1]] = tid[1]
            step = trace.get(tid[1])
            setattr(step, f"{role}_received", t)
        elif (m := ALLOC.match(msg)) and (tid := TRANSFER_ID.search(msg)):
            by_req[m[1]] = tid[1]
        elif (m := FINISHED.match(msg)) and role == "prefill" and (tid := TRANSFER_ID.search(msg)):
            trace.get(tid[1]).prefill_finished = t
        elif m := PULL_START.match(msg):
            for req in QUOTED.findall(m[1]):
                if req in by_req:
                    trace.get(by_req[req]).pull_started = t
        elif m := PULL_END.match(msg):
            for req in QUOTED.findall(m[1]):
                if req in by_req:
                    step = trace.get(by_req[req])
                    step.pull_ended, step.pull_failed = t, m[2] == "failed"
        elif m := SEND_DONE.match(msg):
            trace.sends.append(float(m[2]))
        elif m := SEND_FAILED.match(msg):
            trace.send_failures.append(f"ret={m[2]} after {float(m[3]):.1f} s")


def window(trace: Trace, start: float, end: float) -> list[Transfer]:
    """The transfers whose prefill leg arrived within [start, end] (seconds of the day; a run across
    midnight has end < start)."""
    if end < start:
        return [
            t for t in trace.transfers.values() if t.prefill_received >= start or t.prefill_received <= end
        ]
    return [t for t in trace.transfers.values() if start <= t.prefill_received <= end]


def clock() -> float:
    """Now, in the logs' clock: seconds of the local day."""
    now = time.time()
    t = time.localtime(now)
    return t.tm_hour * 3600 + t.tm_min * 60 + t.tm_sec + now % 1


def summary(transfers: list[Transfer]) -> dict:
    """A run's transfers: KV waits, stalls (>= STALL_S), failed and unfinished pulls, and the routers'
    turn-around (prefill finished -> decode leg in)."""
    waits = [t.kv_wait for t in transfers if not math.isnan(t.kv_wait)]
    turn = [t.decode_sent_after_prefill for t in transfers if not math.isnan(t.decode_sent_after_prefill)]
    return {
        "transfers": len(transfers),
        "kv_wait_s": {q: percentile(waits, n) for q, n in (("p50", 50), ("p99", 99), ("max", 100))},
        "stalled": sum(w >= STALL_S for w in waits),
        "failed": sum(t.pull_failed for t in transfers),
        "unfinished": sum(math.isnan(t.pull_ended) for t in transfers),
        "turnaround_s": {q: percentile(turn, n) for q, n in (("p50", 50), ("p99", 99), ("max", 100))},
    }


def by_run(trace: Trace, rows: dict[tuple[str, int], Row]) -> dict[tuple[str, int], list[dict]]:
    """summary() of each run of each routed row, in run order (the transfers its window saw)."""
    return {
        key: [summary(window(trace, *m.clock)) for m in row.runs]
        for key, row in rows.items()
        if any(not math.isnan(m.clock[0]) for m in row.runs)
    }


def stalled_passes(runs: dict[tuple[str, int], list[dict]], conc: int) -> frozenset[int]:
    """The passes (run indexes) at `conc` in which either router's run had a stalled transfer."""
    out = set()
    for (_, c), summaries in runs.items():
        if c == conc:
            out.update(i for i, x in enumerate(summaries) if x["stalled"])
    return frozenset(out)


def lines(trace: Trace, runs: dict[tuple[str, int], list[dict]]) -> list[str]:
    """Per routed target: its transfers pooled over the runs; then what the logs say overall."""
    out = []
    for (target, conc), summaries in runs.items():
        n = sum(x["transfers"] for x in summaries)
        if not n:
            continue
        stalls = [x["stalled"] for x in summaries]
        worst = max(x["kv_wait_s"]["max"] for x in summaries)
        turn = max(x["turnaround_s"]["p99"] for x in summaries)
        out.append(
            f"  {target:12} {conc:>5}: {n} transfers, stalled (KV wait >= {STALL_S:g} s) per pass {stalls}, "
            f"longest KV wait {worst:.1f} s, failed {sum(x['failed'] for x in summaries)}, "
            f"unfinished {sum(x['unfinished'] for x in summaries)}; decode leg in <= {1000 * turn:.0f} ms "
            "(worst pass p99) after the prefill finished"
        )
    slow = ", ".join(f"{x:.1f}" for x in sorted(trace.sends, reverse=True)[:3])
    out.append(
        f"  Mooncake writes (prefill log): {len(trace.sends)} done, slowest {slow} s; "
        f"failed {len(trace.send_failures)} {trace.send_failures[:3]}; "
        f"connector warnings {dict(trace.trouble) or 'none'}"
    )
    return out
