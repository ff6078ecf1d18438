#!/usr/bin/env python3
"""`sync.py nic-check`: the node's data-plane NICs are what the job needs, checked on the host before any
container starts (scripts/hostcheck.sh). The data-plane interface exists and is up, each RDMA device of the
runner exists with an active port (sysfs), and, where the runner names AMD's `nicctl`, every NIC classifies
by DSCP with PFC on its no-drop priorities, maps the runner's RDMA traffic class (--rdma-dscp) to its
no-drop priority, and every RoCE device has DCQCN enabled with one CNP DSCP (the gates of InferenceX's
rdma_check.sh, and the class its launch reads: a NIC without them does not fail a transfer, it quietly slows
it, or drops it under congestion).
Each failure names the NIC and the value seen. What the node showed (link states, NIC firmware, nicctl and
driver versions, QoS and DCQCN per NIC) goes to --facts-out for the run's provenance. Stdlib only."""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
from pathlib import Path
from typing import Any

from failures import die, line, one_line
from gpus import read_value

EXIT_NIC = 1  # a preflight failure, as every other check of a preflight step
MAX_OUTPUT = 1 << 20  # one nicctl listing: a few KiB per NIC
MAX_SAID = 2000  # characters of the one line a node says (every NIC named, not a whole listing)
IFF_UP = 0x1
# nicctl exits 0 with no NIC it can reach (InferenceX's rdma_check.sh); these lines say so.
NO_NIC = re.compile(r"No AMD NICs|Invalid card handle|Failed to get NIC", re.IGNORECASE)
_NIC_HEADER = re.compile(r"^NIC\s*:\s*(\S+)\s*(?:\((\S+)\))?")
_FIELD = re.compile(r"^\s*([^:]+?)\s+:\s*(.*?)\s*$")
# `show qos`'s DSCP-to-priority map: "DSCP : 0-23, 25-63 ==> priority : 0" (the bitmap lines say it again)
_DSCP_MAP = re.compile(r"^\s*DSCP\s+:\s*([0-9,\s-]+?)\s*==>\s*priority\s*:\s*(\d+)\s*$")


class NicError(Exception):
    """A NIC, or what its tool printed, is not what the job needs; one line."""


# ---------------------------------------------------------------- sysfs: links


def interface_state(net: Path, name: str) -> tuple[str, dict]:
    """(problem or "", facts) of interface NAME under NET (/sys/class/net). Up is operstate "up", or
    "unknown" with the interface administratively up and a carrier (loopback and some virtual links never
    report "up")."""
    folder = net / name
    if not folder.is_dir():
        present = sorted(p.name for p in net.iterdir()) if net.is_dir() else []
        return f"data-plane interface {name} does not exist (interfaces: {', '.join(present) or 'none'})", {}
    state = read_value(folder / "operstate") or "?"
    flags, carrier = read_value(folder / "flags") or "", read_value(folder / "carrier")
    facts = {
        "operstate": state,
        "carrier": carrier,
        "mtu": read_value(folder / "mtu"),
        "speed": read_value(folder / "speed"),
    }
    admin_up = bool(re.fullmatch(r"0x[0-9a-fA-F]+", flags) and int(flags, 16) & IFF_UP)
    if state == "up" or (state == "unknown" and admin_up and carrier == "1"):
        return "", facts
    return f"data-plane interface {name} is {state} (carrier {carrier or 'unreadable'})", facts


def rdma_state(rdma: Path, name: str) -> tuple[str, dict]:
    """(problem or "", facts) of RDMA device NAME under RDMA (/sys/class/infiniband): it exists and one of
    its ports is ACTIVE (the kernel writes a port's state as "4: ACTIVE")."""
    folder = rdma / name
    if not folder.is_dir():
        present = sorted(p.name for p in rdma.iterdir()) if rdma.is_dir() else []
        return f"RDMA device {name} does not exist (devices: {', '.join(present) or 'none'})", {}
    ports = {p.name: read_value(p / "state") or "?" for p in sorted((folder / "ports").glob("*"))}
    facts = {"fw_ver": read_value(folder / "fw_ver"), "ports": ports}
    if any(state.endswith("ACTIVE") for state in ports.values()):
        return "", facts
    seen = ", ".join(f"port {n} {s}" for n, s in ports.items()) or "no port"
    return f"RDMA device {name} has no active port ({seen})", facts


# ---------------------------------------------------------------- nicctl


def nic_blocks(text: str) -> list[tuple[str, list[str]]]:
    """nicctl's per-NIC sections: (the NIC's PCI address, or its id when none is printed; its lines). A
    section starts at a line `NIC : <id> (<bus address>)`; lines before the first belong to none."""
    blocks: list[tuple[str, list[str]]] = []
    for raw in text.splitlines():
        header = _NIC_HEADER.match(raw)
        if header:
            blocks.append((header[2] or header[1], []))
        elif blocks:
            blocks[-1][1].append(raw)
    return blocks


def _fields(lines: list[str]) -> list[tuple[str, str]]:
    """`key : value` lines, in order (keys repeat: one DCQCN section per RoCE device)."""
    return [(m[1].strip(), m[2]) for m in map(_FIELD.match, lines) if m]


def dscp_priorities(lines: list[str]) -> dict[int, int]:
    """A NIC's DSCP-to-priority map as `show qos` prints it: DSCP value -> priority."""
    mapped = {}
    for m in filter(None, map(_DSCP_MAP.match, lines)):
        for part in m[1].replace(" ", "").split(","):
            low, _, high = part.partition("-")
            if low.isdigit() and (high or low).isdigit():
                mapped.update(dict.fromkeys(range(int(low), int(high or low) + 1), int(m[2])))
    return mapped


def traffic_problem(nic: str, lines: list[str], priorities: list[int], traffic: tuple[int, int]) -> str:
    """What is wrong with NIC's map for the runner's RDMA traffic class (DSCP, priority), or "": the DSCP
    must map to that priority, and PFC must hold the priority no-drop."""
    dscp, priority = traffic
    seen = dscp_priorities(lines).get(dscp)
    if seen != priority:
        at = "no priority" if seen is None else f"priority {seen}"
        return f"NIC {nic}: DSCP {dscp} maps to {at}, the runner's rdma-traffic-class has priority {priority}"
    if priority not in priorities:
        return f"NIC {nic}: rdma-traffic-class priority {priority} is not a PFC no-drop priority here"
    return ""


def qos_problems(
    text: str, want_priorities: list[int], traffic: tuple[int, int] | None = None
) -> tuple[list[str], dict]:
    """`nicctl show qos`: every NIC classifies by DSCP, has PFC no-drop priorities (the site's, when it
    names them) and a PFC priority bitmap that covers each of them; and, given the runner's RDMA traffic
    class (DSCP, priority), maps that DSCP to that no-drop priority."""
    blocks = nic_blocks(text)
    if not blocks:
        raise NicError(f"nicctl show qos listed no NIC: {_first_line(text)}")
    problems, facts = [], {}
    for nic, lines in blocks:
        fields = dict(_fields(lines))
        kind = fields.get("Classification type", "")
        raw = fields.get("PFC no-drop priorities", "")
        bitmap_text = fields.get("PFC priority bitmap", "")
        facts[nic] = {"classification": kind, "no_drop": raw, "pfc_bitmap": bitmap_text}
        if kind != "DSCP":
            problems.append(f"NIC {nic}: classification type is {kind or 'not shown'}, RoCE needs DSCP")
        try:
            priorities = [int(p) for p in raw.replace(" ", "").split(",") if p != ""]
            bitmap = int(bitmap_text, 16) if bitmap_text else 0
        except ValueError:
            problems.append(
                f"NIC {nic}: PFC no-drop priorities {raw!r}, bitmap {bitmap_text!r} are not numbers"
            )
            continue
        if not priorities:
            problems.append(
                f"NIC {nic}: no PFC no-drop priority (PFC priority bitmap {bitmap_text or 'not shown'})"
            )
            continue
        uncovered = [p for p in priorities if not 0 <= p <= 7 or not bitmap >> p & 1]
        if uncovered:
            problems.append(
                f"NIC {nic}: PFC priority bitmap {bitmap_text or 'not shown'} does not cover no-drop "
                f"priority {','.join(map(str, uncovered))}"
            )
        if want_priorities and sorted(priorities) != sorted(want_priorities):
            site = ",".join(map(str, want_priorities))
            problems.append(f"NIC {nic}: PFC no-drop priorities {raw}, the site's are {site}")
        if traffic is not None:
            problem = traffic_problem(nic, lines, priorities, traffic)
            problems += [problem] if problem else []
    return problems, facts


def dcqcn_problems(text: str, want_cnp: int | None) -> tuple[list[str], dict[str, dict[str, str]]]:
    """`nicctl show dcqcn`: every RoCE device has DCQCN enabled, and all use one CNP DSCP (the site's)."""
    problems: list[str] = []
    facts: dict[str, dict[str, str]] = {}
    cnp: dict[str, str] = {}
    for nic, lines in nic_blocks(text):
        device = None
        for key, value in _fields(lines):
            if key == "ROCE device":
                device = f"{value} (NIC {nic})"
                facts[device] = {}
            elif device is not None:
                facts[device][key] = value
    if not facts:
        raise NicError(f"nicctl show dcqcn listed no RoCE device: {_first_line(text)}")
    for device, fields in facts.items():
        status = fields.get("Status", "")
        if status != "Enabled":
            problems.append(f"RoCE device {device}: DCQCN is {status or 'not shown'}")
        cnp[device] = fields.get("DSCP value used for CNP", "")
    values = sorted(set(cnp.values()))
    if len(values) > 1 or values == [""]:
        problems.append(
            "CNP DSCP differs across RoCE devices: "
            + ", ".join(f"{d} {v or 'not shown'}" for d, v in cnp.items())
        )
    elif want_cnp is not None and values != [str(want_cnp)]:
        problems.append(f"CNP DSCP is {values[0]} on every RoCE device, the site's is {want_cnp}")
    return problems, facts


def versions(firmware: str, host: str) -> dict:
    """`show version firmware` (per NIC: Firmware-A, Uboot-A, ...) and `show version host-software`
    (nicctl, IPC and ionic driver versions), as printed."""
    per_nic = {nic: dict(_fields(lines)) for nic, lines in nic_blocks(firmware)}
    return {"firmware": per_nic, "host_software": dict(_fields(host.splitlines()))}


def _first_line(text: str) -> str:
    return one_line(next((s for s in text.splitlines() if s.strip()), "(nothing printed)"), 160)


def run_nicctl(prefix: list[str], args: list[str], timeout: float) -> str:
    """NICCTL ARGS's output; a missing tool, a non-zero exit, a hang or a "no NIC" line is a NicError."""
    command = " ".join([*prefix, *args])
    try:
        # its own session: a hung nicctl under sudo is ended with sudo, not left holding the pipes
        proc = subprocess.Popen(
            [*prefix, *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
    except FileNotFoundError:
        raise NicError(
            f"{prefix[0]} not found (the runner's nic-check.nicctl is {' '.join(prefix)})"
        ) from None
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise NicError(f"{command} did not answer within {timeout:g} s") from None
    out = stdout[:MAX_OUTPUT].decode(errors="replace")
    err = stderr[-4096:].decode(errors="replace")
    if proc.returncode != 0:
        raise NicError(f"{command} exited {proc.returncode}: {_first_line(err or out)}")
    found = NO_NIC.search(out + err)
    if found:
        raise NicError(f"{command}: no NIC reachable ({_first_line(found.string[found.start() :])})")
    return out


# ---------------------------------------------------------------- the check


def check(args: argparse.Namespace) -> tuple[list[str], dict, list[str]]:
    """(problems, facts, what passed)."""
    problems, facts, passed = [], {}, []
    if args.interface:
        problem, facts["interface"] = interface_state(Path(args.net), args.interface)
        problems += [problem] if problem else []
        passed += [] if problem else [f"{args.interface} up"]
    if args.rdma_device:
        rdma, down = {}, []
        for name in args.rdma_device:
            problem, rdma[name] = rdma_state(Path(args.rdma), name)
            down += [problem] if problem else []
        facts["rdma"] = rdma
        problems += down
        passed += [] if down else [f"{len(args.rdma_device)} RDMA devices active"]
    if args.nicctl:
        try:
            facts["nicctl"] = versions(
                run_nicctl(args.nicctl, ["show", "version", "firmware"], args.timeout),
                run_nicctl(args.nicctl, ["show", "version", "host-software"], args.timeout),
            )
            qos, facts["qos"] = qos_problems(
                run_nicctl(args.nicctl, ["show", "qos"], args.timeout), args.priority, _traffic(args)
            )
            dcqcn, facts["dcqcn"] = dcqcn_problems(
                run_nicctl(args.nicctl, ["show", "dcqcn"], args.timeout), args.cnp_dscp
            )
        except NicError as err:
            return [*problems, str(err)], facts, passed
        problems += qos + dcqcn
        if not qos:
            priorities = sorted({v["no_drop"] for v in facts["qos"].values()})
            passed.append(
                f"QoS DSCP with PFC no-drop priority {'/'.join(priorities)} on {len(facts['qos'])} NICs"
                + (f", RDMA's DSCP {args.rdma_dscp} on it" if _traffic(args) else "")
            )
        if not dcqcn:
            cnp = next(iter(facts["dcqcn"].values())).get("DSCP value used for CNP")
            passed.append(f"DCQCN enabled on {len(facts['dcqcn'])} RoCE devices, CNP DSCP {cnp}")
    return problems, facts, passed


def _traffic(args: argparse.Namespace) -> tuple[int, int] | None:
    return None if args.rdma_dscp is None else (args.rdma_dscp, args.rdma_priority)


def cmd_nic_check(args: argparse.Namespace) -> int:
    if not (args.interface or args.rdma_device or args.nicctl):
        die("nic-check: nothing to check (give --interface, --rdma-device or --nicctl)", 2)
    if (args.rdma_dscp is None) != (args.rdma_priority is None) or (
        args.rdma_dscp is not None and not args.nicctl
    ):
        die("nic-check: --rdma-dscp and --rdma-priority go together, and with --nicctl (the map it shows)", 2)
    problems, facts, passed = check(args)
    if args.facts_out:
        Path(args.facts_out).write_text(json.dumps(facts, indent=1, sort_keys=True) + "\n")
    # values come from a tool's output: one printable line, bounded, whatever it printed
    if problems:
        die(line("nic-not-ready", problems=one_line("; ".join(problems), MAX_SAID)), EXIT_NIC)
    print(one_line("NICs ready: " + "; ".join(passed), MAX_SAID))
    return 0


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "nic-check", help="the data-plane NICs exist, are up, and (nicctl) have RoCE QoS/DCQCN"
    )
    p.add_argument("--interface", help="the data-plane network interface")
    p.add_argument("--rdma-device", action="append", default=[], help="an RDMA device the job uses")
    # the rest of the line, options included: the command may be `sudo -n nicctl`
    p.add_argument(
        "--nicctl", nargs=argparse.REMAINDER, default=[], help="the command that runs nicctl (last)"
    )
    p.add_argument("--priority", type=int, action="append", default=[], help="a site PFC no-drop priority")
    p.add_argument("--cnp-dscp", type=int, help="the site's CNP DSCP")
    p.add_argument("--rdma-dscp", type=int, help="the DSCP the runner's RDMA traffic is marked with")
    p.add_argument("--rdma-priority", type=int, help="the no-drop priority the NICs must map it to")
    p.add_argument(
        "--timeout", type=float, required=True, help="seconds one nicctl command may take (the plan's)"
    )
    p.add_argument("--facts-out", help="write what the node showed here (JSON)")
    p.add_argument("--net", default="/sys/class/net", help="network interfaces (tests: a fake tree)")
    p.add_argument("--rdma", default="/sys/class/infiniband", help="RDMA devices (tests: a fake tree)")
    p.set_defaults(func=cmd_nic_check)
