"""MoRI-IO, simulated: what SGLang's MoRI KV-transfer backend (--disaggregation-transfer-backend mori) does
before a PD engine serves, and the lines it fails with.

Real SGLang (sglang/srt/disaggregation/mori/conn.py) sets MORI_RDMA_DEVICES from --disaggregation-ib-device
and creates MoRI's IOEngine with an RDMA backend: with no active RDMA device visible, MoRI's RdmaManager
asserts and the process aborts (ROCm/mori#316: a container without the verbs devices, or an RDMA userspace
that does not match the host driver); registering the KV pool with a NIC that refuses the access flags
aborts it too (ROCm/mori#497: AMD's ionic NICs and remote atomics, errno 22). MoRI marks its packets with the
traffic class MORI_RDMA_TC/MORI_IO_TC and service level MORI_RDMA_SL/MORI_IO_SL; unset, they travel at 0.
Bootstrap and transfer then follow SGLang's common PD protocol, which sim/sglang_pd.py simulates for both
backends.

Simulated: the named devices are present (the simulated host has them, its host check saw them active);
none named is MoRI's assertion; SIM_FAULT rdma-register-fails logs the registration failure and hangs. MoRI
aborts the process that logged it; whether the engine then exits or waits on a dead worker is the engine's
(ROCm/mori#497 saw the run hang as often as the engine core die): the hang is simulated because only the log
watcher can end it, while an exit is the engine crash any supervisor sees, classified by the same line. A
stalled transfer (SIM_FAULT kv-stall-after:N) logs what the ionic provider prints when a NIC's retries run
out.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping

from sim.config import StartupError

log = logging.getLogger("sim.mori")

EXIT_ABORT = 134  # 128 + SIGABRT, as the shell reports a process that called abort()
# glibc's assert line (program: file:line: function: Assertion `expr' failed.), its location simulated
NO_DEVICE = (
    "python3: (simulated) mori::io::RdmaManager::RdmaManager: Assertion `availDevices.size() > 0' failed."
)
REGISTER_FAILED = (
    "[application] [error] RegisterRdmaMemoryRegion failed! addr:0x738214000000, size:3607764992, "
    "accessFlag:15, errno:22 (Invalid argument)"
)
# What AMD's ionic RDMA provider prints when a work completion fails with IBV_WC_RETRY_EXC_ERR (12): the
# NIC's retries to its peer ran out (a faulty NIC or link, a peer on a subnet this NIC cannot reach).
RETRY_EXCEEDED = "ionic_comp_msn:1277: cqe with error 12 for 0x1 (msn)"
TRAFFIC = (("MORI_RDMA_TC", "MORI_IO_TC"), ("MORI_RDMA_SL", "MORI_IO_SL"))


def _byte(env: Mapping[str, str], name: str, top: int) -> int | None:
    raw = env.get(name, "").strip()
    if not raw:
        return None
    if not raw.isdigit() or int(raw) > top:
        raise StartupError(f"{name}={raw!r}: MoRI reads an integer within 0..{top}")
    return int(raw)


def traffic_class(env: Mapping[str, str]) -> tuple[int | None, int | None]:
    """(traffic class, service level) MoRI marks RDMA with; the RDMA and IO names must agree where both
    are set."""
    out = []
    for names, top in zip(TRAFFIC, (255, 7), strict=True):
        values = {name: _byte(env, name, top) for name in names}
        said = {v for v in values.values() if v is not None}
        if len(said) > 1:
            raise StartupError(f"{' and '.join(f'{k}={v}' for k, v in values.items())}: MoRI reads one value")
        out.append(said.pop() if said else None)
    return out[0], out[1]


def start(devices: tuple[str, ...], env: Mapping[str, str]) -> int | None:
    """MoRI's IOEngine and RDMA backend for a PD engine: an exit code when MoRI aborts, else None."""
    tc, sl = traffic_class(env)
    if not devices:
        print(NO_DEVICE, file=sys.stderr, flush=True)
        return EXIT_ABORT
    if tc is None:
        log.warning("MORI_RDMA_TC is unset: MoRI's RDMA packets are unmarked (DSCP 0, priority 0)")
    log.info(
        "Mori IOEngine (simulated) RDMA backend on %s: traffic class %s (DSCP %s), service level %s",
        ",".join(devices),
        "unset" if tc is None else tc,
        "0" if tc is None else tc >> 2,
        "unset" if sl is None else sl,
    )
    return None
