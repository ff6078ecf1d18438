"""Simulated `nicctl` (AMD's NIC control tool) for the local cluster's host preflight: two AMD NICs per node,
printed in the shape the real tool prints `show qos`, `show dcqcn` and `show version firmware|host-software`
(sections `NIC : <id> (<bus>)`, `key : value` lines; the shape of the recorded outputs tests/scripts/
test_nics.py holds, not their values). RoCE-ready by default: DSCP classification, PFC no-drop priority 3
(bitmap 0x8), DCQCN enabled with CNP DSCP 46.

SIM_NIC_FAULT breaks it on the node SIM_FAULT_HOST names (every node when unset): pfc-off (no no-drop
priority, bitmap 0x0), dcqcn-off (the second NIC's DCQCN disabled), cnp-mismatch (the second NIC's CNP DSCP
48), dscp-moved (the second NIC maps DSCP 26 to the no-drop priority, 24 to priority 0: RDMA marked 24 would
drop there), no-nics (the line the real tool prints when it reaches no NIC, exit code 0 as it does)."""

from __future__ import annotations

import os
import sys

NICS = (
    ("42424650-4c32-3533-3330-313934000000", "0000:06:00.0", "ionic_0"),
    ("42424650-4c32-3533-3731-303830000000", "0000:16:00.0", "ionic_1"),
)
FIRMWARE = "1.117.5-a-45"  # every simulated NIC's (what the RDMA device's fw_ver says too)
FAULTS = ("pfc-off", "dcqcn-off", "cnp-mismatch", "dscp-moved", "no-nics")
RULE = "-" * 90


def _fault() -> str:
    fault = os.environ.get("SIM_NIC_FAULT", "")
    if fault and fault not in FAULTS:
        sys.exit(f"nicctl (simulated): SIM_NIC_FAULT={fault!r} is not one of {', '.join(FAULTS)}")
    host = os.environ.get("SIM_FAULT_HOST", "")
    here = os.environ.get("SLURMD_NODENAME", "")
    return fault if not host or host == here else ""


def qos(fault: str) -> str:
    bitmap, no_drop = ("0x0", "") if fault == "pfc-off" else ("0x8", "3")
    out = []
    for i, (nic, bus, _) in enumerate(NICS):
        moved = fault == "dscp-moved" and i == len(NICS) - 1
        dscp = 26 if moved else 24
        rest = f"0-{dscp - 1}, {dscp + 1}-45, 47-63"  # 46: the CNP DSCP, classified apart
        low = ((1 << 64) - 1) & ~(1 << dscp) & ~(1 << 46)
        out += [
            f"NIC  : {nic}  ({bus})",
            "",
            f"Port : {nic[:24]}11010000",
            "",
            "  Classification type         : DSCP",
            "",
            "  DSCP-to-priority :",
            f"    DSCP bitmap               : {low:#018x} ==> priority : 0",
            f"    DSCP                      : {rest} ==> priority : 0",
            f"    DSCP bitmap               : {1 << dscp:#018x} ==> priority : 3",
            f"    DSCP                      : {dscp} ==> priority : 3",
            "",
            "  PFC :",
            f"    PFC priority bitmap       : {bitmap}",
            f"    PFC no-drop priorities    : {no_drop}",
            "",
            "  Scheduling :",
            "    --------------------------------------------",
            "    Priority  Scheduling  Bandwidth Rate-limit",
            "              Type        (in %age) (in Gbps)",
            "    --------------------------------------------",
            "    0         DWRR        1         N/A",
            "    3         DWRR        99        N/A",
            "",
        ]
    return "\n".join(out)


def dcqcn(fault: str) -> str:
    out = []
    for i, (nic, bus, device) in enumerate(NICS):
        last = i == len(NICS) - 1
        status = "Disabled" if fault == "dcqcn-off" and last else "Enabled"
        cnp = 48 if fault == "cnp-mismatch" and last else 46
        out += [
            f"NIC : {nic} ({bus})",
            RULE,
            "",
            f"Lif id                                     : {nic}",
            f"ROCE device                                : {device}",
            "  DCQCN profile id                         : 1",
            f"  Status                                   : {status}",
            "  Rate increase in AI phase                : 160",
            "  Rate increase byte count                 : 431068",
            "  Alpha update G value                     : 512",
            "  Alpha update interval                    : 1",
            "  Rate increase in HAI phase               : 300",
            "  Initial alpha value                      : 64",
            "  Rate reduce monitor period               : 1",
            "  Rate increase threshold                  : 1",
            "  Rate increase interval                   : 1",
            "  Token bucket size                        : 800000",
            f"  DSCP value used for CNP                  : {cnp}",
            "*" * 90,
        ]
    return "\n".join(out)


def firmware() -> str:
    out = []
    for nic, bus, _ in NICS:
        out += [
            f"NIC : {nic} ({bus})",
            "",
            "  CPLD                 : 3.16 (primary)",
            "  Boot0                : 21",
            f"  Uboot-A              : {FIRMWARE}",
            f"  Firmware-A           : {FIRMWARE}",
            "  Device config-A      : device_config_rdma_1x400G/1.0.0",
            RULE,
        ]
    return "\n".join(out)


def host_software() -> str:
    return "\n".join([f"nicctl                   : {FIRMWARE}", "IPC driver               : 1.117.5.a-45",
                      "ionic driver             : 25.08.4.004"])  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    fault = _fault()
    if fault == "no-nics":
        print("No AMD NICs found on this host")
        return 0
    shows = {
        ("show", "qos"): lambda: qos(fault),
        ("show", "dcqcn"): lambda: dcqcn(fault),
        ("show", "version", "firmware"): firmware,
        ("show", "version", "host-software"): host_software,
    }
    show = shows.get(tuple(args))
    if show is None:
        print(f"nicctl (simulated): {' '.join(args)!r} is not simulated; it knows: "
              + "; ".join(" ".join(k) for k in shows), file=sys.stderr)  # fmt: skip
        return 1
    print(show())
    return 0
