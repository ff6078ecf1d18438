"""`sync.py nic-check` and scripts/hostcheck.sh: the host preflight of a runner's data-plane NICs.

The nicctl listings below have the shape AMD's `nicctl` prints (sections `NIC : <id> (<bus>)`, padded
`key : value` lines, one DCQCN section per RoCE device closed by a row of '*'), as recorded in AMD's own
node-scraper test fixtures for `show qos` (a NIC with PFC off: bitmap 0x0, no no-drop priority), `show dcqcn`
(a RoCE device with DCQCN disabled) and `show version`, and as the field names InferenceX's rdma_check.sh
reads ("Classification type", "PFC priority bitmap", "PFC no-drop priorities", "ROCE device", "Status",
"DSCP value used for CNP"). The ids and values are ours. The sysfs trees are laid out as the kernel lays
out /sys/class/net and /sys/class/infiniband; the loopback test reads this machine's real one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from schemas.launch import NicCheck
from tests.scripts.conftest import REPO as ROOT
from tests.scripts.conftest import hostcheck, stub_squeue, sync

NIC_A = ("1b4e0c2a-4c32-3533-3330-313934000000", "0000:06:00.0")
NIC_B = ("1b4e0c2a-4c32-3533-3731-303830000000", "0000:16:00.0")


def qos_section(nic: tuple[str, str], *, kind="DSCP", bitmap="0x8", no_drop="3") -> str:
    return f"""NIC  : {nic[0]}  ({nic[1]})

Port : 0490814a-6c40-4242-4242-000011010000

  Classification type         : {kind}

  DSCP-to-priority :
    DSCP bitmap               : 0xfffffffffeffffff ==> priority : 0
    DSCP                      : 0-23, 25-63 ==> priority : 0
    DSCP bitmap               : 0x0000000001000000 ==> priority : 3
    DSCP                      : 24 ==> priority : 3


  PFC :
    PFC priority bitmap       : {bitmap}
    PFC no-drop priorities    : {no_drop}

  Scheduling :
    --------------------------------------------
    Priority  Scheduling  Bandwidth Rate-limit
              Type        (in %age) (in Gbps)
    --------------------------------------------
    0         DWRR        1         N/A
    3         DWRR        99        N/A
"""


def dcqcn_section(nic: tuple[str, str], device: str, *, status="Enabled", cnp="46") -> str:
    return f"""NIC : {nic[0]} ({nic[1]})
------------------------------------------------------------------------------------------

Lif id                                     : {nic[0]}
ROCE device                                : {device}
  DCQCN profile id                         : 1
  Status                                   : {status}
  Rate increase in AI phase                : 160
  Token bucket size                        : 800000
  DSCP value used for CNP                  : {cnp}
******************************************************************************************
"""


FIRMWARE = f"""NIC : {NIC_A[0]} ({NIC_A[1]})

  CPLD                 : 3.16 (primary)
  Uboot-A              : 1.117.5-a-45
  Firmware-A           : 1.117.5-a-45
-------------------------------------------------------------------------------------
NIC : {NIC_B[0]} ({NIC_B[1]})

  CPLD                 : 3.16 (primary)
  Uboot-A              : 1.117.5-a-45
  Firmware-A           : 1.117.5-a-45
-------------------------------------------------------------------------------------
"""
HOST_SOFTWARE = "nicctl                   : 1.117.5-a-45\nIPC driver               : 1.117.5.a-45\n"
GOOD_QOS = qos_section(NIC_A) + qos_section(NIC_B)
GOOD_DCQCN = dcqcn_section(NIC_A, "ionic_0") + dcqcn_section(NIC_B, "ionic_1")


@pytest.fixture
def nicctl(tmp_path: Path):
    """A `nicctl` that prints what the test gives it for each `show ...`, and an exit code."""

    def make(qos=GOOD_QOS, dcqcn=GOOD_DCQCN, *, firmware=FIRMWARE, code=0) -> Path:
        folder = tmp_path / "nicctl-out"
        folder.mkdir(exist_ok=True)
        for name, text in {
            "qos": qos,
            "dcqcn": dcqcn,
            "firmware": firmware,
            "host-software": HOST_SOFTWARE,
        }.items():
            (folder / name).write_text(text)
        tool = tmp_path / "nicctl"
        tool.write_text(f'#!/bin/sh\ncat "{folder}/${{3:-$2}}"\nexit {code}\n')
        tool.chmod(0o755)
        return tool

    return make


TIMEOUT = ("--timeout", str(NicCheck().timeout))  # the rendered line always gives the runner's


def check(*args: str | Path) -> subprocess.CompletedProcess:
    return sync("nic-check", *TIMEOUT, *map(str, args), timeout=60)


def link(net: Path, name: str, *, operstate="up", flags="0x1003", carrier="1") -> None:
    folder = net / name
    folder.mkdir(parents=True)
    for key, value in {"operstate": operstate, "flags": flags, "carrier": carrier, "mtu": "9000"}.items():
        (folder / key).write_text(value + "\n")


def rdma_device(rdma: Path, name: str, state="4: ACTIVE") -> None:
    port = rdma / name / "ports" / "1"
    port.mkdir(parents=True)
    (port / "state").write_text(state + "\n")
    (rdma / name / "fw_ver").write_text("1.117.5\n")


# ---------------------------------------------------------------- nicctl QoS / DCQCN


def test_roce_ready_nics_pass_and_say_what_was_checked(nicctl, tmp_path):
    facts = tmp_path / "facts.json"
    done = check("--priority", "3", "--cnp-dscp", "46", "--facts-out", facts, "--nicctl", nicctl())
    assert done.returncode == 0, done.stderr
    assert done.stdout == (
        "NICs ready: QoS DSCP with PFC no-drop priority 3 on 2 NICs; "
        "DCQCN enabled on 2 RoCE devices, CNP DSCP 46\n"
    )
    recorded = json.loads(facts.read_text())
    assert recorded["nicctl"]["firmware"][NIC_A[1]]["Firmware-A"] == "1.117.5-a-45"
    assert recorded["nicctl"]["host_software"]["nicctl"] == "1.117.5-a-45"
    assert recorded["qos"][NIC_B[1]] == {"classification": "DSCP", "no_drop": "3", "pfc_bitmap": "0x8"}


def test_pfc_off_as_recorded_names_every_nic_and_its_bitmap(nicctl):
    off = qos_section(NIC_A, bitmap="0x0", no_drop="") + qos_section(NIC_B)
    done = check("--nicctl", nicctl(qos=off))
    assert done.returncode == 1
    assert (
        done.stderr == f"NICs not ready: NIC {NIC_A[1]}: no PFC no-drop priority (PFC priority bitmap 0x0)\n"
    )


@pytest.mark.parametrize(
    ("section", "said"),
    [
        ({"kind": "PCP"}, "classification type is PCP, RoCE needs DSCP"),
        ({"bitmap": "0x1"}, "PFC priority bitmap 0x1 does not cover no-drop priority 3"),
        ({"bitmap": "0x9", "no_drop": "0,3,9"}, "PFC priority bitmap 0x9 does not cover no-drop priority 9"),
        ({"bitmap": "zz"}, "PFC no-drop priorities '3', bitmap 'zz' are not numbers"),
    ],
)
def test_each_qos_fault_is_named_with_its_nic_and_value(nicctl, section, said):
    done = check("--nicctl", nicctl(qos=qos_section(NIC_A) + qos_section(NIC_B, **section)))
    assert done.returncode == 1
    assert f"NIC {NIC_B[1]}: {said}" in done.stderr


def test_several_no_drop_priorities_covered_by_the_bitmap_pass(nicctl):
    both = qos_section(NIC_A, bitmap="0x9", no_drop="0,3") + qos_section(NIC_B, bitmap="0x9", no_drop="0,3")
    assert check("--nicctl", nicctl(qos=both)).returncode == 0


def test_a_site_priority_other_than_the_nics_is_refused(nicctl):
    done = check("--priority", "5", "--nicctl", nicctl())
    assert done.returncode == 1
    assert f"NIC {NIC_A[1]}: PFC no-drop priorities 3, the site's are 5" in done.stderr


def test_the_runners_rdma_traffic_class_passes_where_every_nic_holds_it_no_drop(nicctl):
    done = check("--rdma-dscp", "24", "--rdma-priority", "3", "--nicctl", nicctl())
    assert done.returncode == 0, done.stderr
    assert "QoS DSCP with PFC no-drop priority 3 on 2 NICs, RDMA's DSCP 24 on it;" in done.stdout


@pytest.mark.parametrize(
    ("dscp", "priority", "said"),
    [
        # the site marks RDMA with another DSCP than its NICs hold no-drop: MoRI's packets would drop
        ("26", "3", "DSCP 26 maps to priority 0, the runner's rdma-traffic-class has priority 3"),
        ("24", "5", "DSCP 24 maps to priority 3, the runner's rdma-traffic-class has priority 5"),
    ],
)
def test_a_traffic_class_the_nics_do_not_carry_no_drop_is_named_per_nic(nicctl, dscp, priority, said):
    done = check("--rdma-dscp", dscp, "--rdma-priority", priority, "--nicctl", nicctl())
    assert done.returncode == 1
    assert f"NIC {NIC_A[1]}: {said}" in done.stderr
    assert f"NIC {NIC_B[1]}: {said}" in done.stderr


def test_a_traffic_class_on_a_priority_pfc_does_not_hold_is_refused(nicctl):
    # DSCP 24 maps to priority 3 on both NICs, but the second NIC's PFC holds only priority 0 no-drop
    lossy = qos_section(NIC_A) + qos_section(NIC_B, bitmap="0x1", no_drop="0")
    done = check("--rdma-dscp", "24", "--rdma-priority", "3", "--nicctl", nicctl(qos=lossy))
    assert done.returncode == 1
    assert done.stderr == (
        f"NICs not ready: NIC {NIC_B[1]}: rdma-traffic-class priority 3 is not a PFC no-drop priority here\n"
    )


def test_the_simulated_nics_hold_the_local_runners_class_until_one_moves_it():
    nicctl, args = str(ROOT / "sim" / "bin" / "nicctl"), ("--rdma-dscp", "24", "--rdma-priority", "3")
    assert check(*args, "--nicctl", nicctl).returncode == 0
    moved = sync(
        "nic-check", *TIMEOUT, *args, "--nicctl", nicctl, env={**os.environ, "SIM_NIC_FAULT": "dscp-moved"}
    )
    assert moved.returncode == 1
    assert moved.stderr == (
        "NICs not ready: NIC 0000:16:00.0: DSCP 24 maps to priority 0, the runner's rdma-traffic-class has "
        "priority 3\n"
    )


def test_a_traffic_class_is_checked_only_with_the_map_nicctl_shows(tmp_path):
    done = check("--interface", "lo", "--rdma-dscp", "24", "--rdma-priority", "3")
    assert done.returncode == 2
    assert "--rdma-dscp and --rdma-priority go together, and with --nicctl" in done.stderr


def test_dcqcn_disabled_as_recorded_names_the_roce_device(nicctl):
    done = check(
        "--nicctl",
        nicctl(dcqcn=dcqcn_section(NIC_A, "ionic_0") + dcqcn_section(NIC_B, "ionic_1", status="Disabled")),
    )
    assert done.returncode == 1
    assert done.stderr == f"NICs not ready: RoCE device ionic_1 (NIC {NIC_B[1]}): DCQCN is Disabled\n"


def test_cnp_dscp_must_be_one_value_and_the_sites(nicctl):
    mixed = dcqcn_section(NIC_A, "ionic_0") + dcqcn_section(NIC_B, "ionic_1", cnp="48")
    done = check("--nicctl", nicctl(dcqcn=mixed))
    assert (
        "CNP DSCP differs across RoCE devices: ionic_0 (NIC 0000:06:00.0) 46, ionic_1 (NIC 0000:16:00.0) 48"
        in done.stderr
    )
    done = check("--cnp-dscp", "26", "--nicctl", nicctl())
    assert done.returncode == 1
    assert "CNP DSCP is 46 on every RoCE device, the site's is 26" in done.stderr


def test_a_listing_without_nics_or_roce_devices_is_no_pass(nicctl):
    assert "nicctl show qos listed no NIC: (nothing printed)" in check("--nicctl", nicctl(qos="")).stderr
    done = check("--nicctl", nicctl(dcqcn="no dcqcn profile\n"))
    assert "nicctl show dcqcn listed no RoCE device: no dcqcn profile" in done.stderr


def test_nicctl_that_reaches_no_nic_fails_although_it_exits_0(nicctl):
    tool = nicctl(firmware="No AMD NICs found\n")
    done = check("--nicctl", tool)
    assert done.returncode == 1
    assert (
        done.stderr == f"NICs not ready: {tool} show version firmware: no NIC reachable (No AMD NICs found)\n"
    )


def test_nicctl_missing_refused_or_hung_is_a_failure_never_a_skip(nicctl, tmp_path):
    done = check("--nicctl", tmp_path / "absent", "-n", "nicctl")  # sudo -n nicctl's shape
    assert done.returncode == 1 and "absent not found (the runner's nic-check.nicctl is" in done.stderr
    done = check("--nicctl", nicctl(code=1))
    assert done.returncode == 1 and "show version firmware exited 1" in done.stderr
    sleeper = tmp_path / "sleeper"  # as sudo runs nicctl: a child that hangs, holding the output pipes
    sleeper.write_text("#!/bin/sh\nsleep 30\n")
    sleeper.chmod(0o755)
    done = check("--timeout", "0.5", "--nicctl", sleeper)
    assert done.returncode == 1 and "show version firmware did not answer within 0.5 s" in done.stderr


# ---------------------------------------------------------------- sysfs links


def test_the_interface_must_exist_and_be_up(tmp_path):
    net = tmp_path / "net"
    link(net, "eth0")
    link(net, "ens51np0", operstate="down", carrier="0")
    assert check("--net", net, "--interface", "eth0").stdout == "NICs ready: eth0 up\n"
    done = check("--net", net, "--interface", "ens51np0")
    assert done.stderr == "NICs not ready: data-plane interface ens51np0 is down (carrier 0)\n"
    done = check("--net", net, "--interface", "ens9")
    assert (
        done.stderr
        == "NICs not ready: data-plane interface ens9 does not exist (interfaces: ens51np0, eth0)\n"
    )


def test_unknown_operstate_is_up_only_when_administratively_up_with_carrier(tmp_path):
    net = tmp_path / "net"
    link(net, "tun0", operstate="unknown", flags="0x1091")
    link(net, "tun1", operstate="unknown", flags="0x1090")
    assert check("--net", net, "--interface", "tun0").returncode == 0
    assert "tun1 is unknown" in check("--net", net, "--interface", "tun1").stderr


def test_this_machines_loopback_is_up():
    """The real sysfs: loopback reports operstate "unknown", flags UP|LOOPBACK and a carrier."""
    done = check("--interface", "lo")
    assert done.returncode == 0 and done.stdout == "NICs ready: lo up\n", done.stderr


def test_every_rdma_device_needs_an_active_port(tmp_path):
    rdma = tmp_path / "infiniband"
    rdma_device(rdma, "rdma0")
    rdma_device(rdma, "rdma1", state="1: DOWN")
    done = check("--rdma", rdma, "--rdma-device", "rdma0", "--rdma-device", "rdma1", "--rdma-device", "rdma2")
    assert done.returncode == 1
    assert done.stderr == (
        "NICs not ready: RDMA device rdma1 has no active port (port 1 1: DOWN); "
        "RDMA device rdma2 does not exist (devices: rdma0, rdma1)\n"
    )
    assert check("--rdma", rdma, "--rdma-device", "rdma0").stdout == "NICs ready: 1 RDMA devices active\n"


def test_nothing_to_check_is_a_usage_error():
    done = check()
    assert done.returncode == 2 and "nothing to check" in done.stderr


# ---------------------------------------------------------------- hostcheck.sh


def host(run_dir: Path, *args: str | Path) -> subprocess.CompletedProcess:
    """hostcheck.sh as srun runs it on sim2 in job 77, with an `squeue` that says every job still runs (the
    leftover check it runs first: tests/scripts/test_leftovers.py)."""
    slurm = stub_squeue(run_dir.parent / "slurm")
    env = {**os.environ, "RUN_DIR": str(run_dir), "SLURMD_NODENAME": "sim2", "SLURM_JOB_ID": "77"}
    return hostcheck({**env, "PATH": f"{slurm}:{os.environ['PATH']}"}, *TIMEOUT, *args, timeout=60)


def test_a_failing_host_says_so_and_writes_the_outcome_the_verdict_names(nicctl, tmp_path):
    run_dir = tmp_path / "run"
    bad = nicctl(dcqcn=dcqcn_section(NIC_A, "ionic_0", status="Disabled"))
    done = host(run_dir, "--nicctl", bad)
    assert done.returncode == 1
    message = f"NICs not ready: RoCE device ionic_0 (NIC {NIC_A[1]}): DCQCN is Disabled"
    assert done.stderr == f"FAILED host preflight on sim2: {message}\n"
    fields = dict(x.split("=", 1) for x in (run_dir / "state/sim2/outcome").read_text().splitlines())
    assert fields | {"at": "t"} == {
        "rc": "1", "kind": "failure", "at": "t", "step": "host preflight", "cause": "nic-not-ready",
        "detail": message,
    }  # fmt: skip
    assert json.loads((run_dir / "state/sim2/nic-facts.json").read_text())["dcqcn"]
    verdict = subprocess.run(
        [sys.executable, str(ROOT / "scripts/outcome.py"), "--run-dir", str(run_dir),
         "--nodes", "sim1,sim2,sim3", "--srun-exit", "1"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert verdict.returncode == 1
    assert verdict.stderr == (
        "job failed: first failure on sim2 in step 'host preflight' (exit code 1)\n"
        f"cause: nic-not-ready ({message})\n"
    )


def test_a_ready_host_prints_one_line_and_writes_no_outcome(nicctl, tmp_path):
    run_dir = tmp_path / "run"
    done = host(run_dir, "--interface", "lo", "--nicctl", nicctl())
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(
        "host preflight on sim2: no process of an earlier job left\n"
        "host preflight on sim2: NICs ready: lo up; QoS DSCP"
    )
    assert not (run_dir / "state/sim2/outcome").exists()


def test_a_huge_problem_list_keeps_the_outcome_readable(nicctl, tmp_path):
    """Hundreds of NIC sections failing: the detail is cut so outcome.py's 4 KiB bound still reads it."""
    run_dir = tmp_path / "run"
    many = "".join(qos_section((f"id{i}", f"0000:{i:02x}:00.0"), kind="PCP") for i in range(200))
    assert host(run_dir, "--nicctl", nicctl(qos=many)).returncode == 1
    assert (run_dir / "state/sim2/outcome").stat().st_size < 4096


def test_what_a_tool_prints_reaches_the_line_printable_and_bounded(nicctl):
    hostile = qos_section(NIC_A, kind="PCP\x1b[2J\x07") + qos_section(NIC_B)
    done = check("--nicctl", nicctl(qos=hostile))
    assert done.returncode == 1 and "\x1b" not in done.stderr and "\\x1b[2J" in done.stderr
    many = "".join(qos_section((f"id{i}", f"0000:{i:02x}:00.0"), kind="PCP") for i in range(200))
    done = check("--nicctl", nicctl(qos=many))
    assert done.stderr.endswith("...\n") and len(done.stderr) < 2100
