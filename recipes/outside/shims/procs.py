"""A process as /proc shows it, for the recorder's shims and its harness alike (stdlib only: the shims run
it as a sibling file, the harness imports it)."""

from __future__ import annotations

from pathlib import Path


def _stat(pid: int) -> list[str] | None:
    """/proc/PID/stat's fields after the command name (state first), or None when there is no such pid."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def started_at(pid: int) -> str | None:
    """When PID started (stat field 22): with the pid, a process's identity, as pids wrap. None when it is
    gone or only its zombie is left (which writes nothing)."""
    fields = _stat(pid)
    return None if fields is None or fields[0] == "Z" else fields[19]


def pgid(pid: int) -> int | None:
    """PID's process group (stat field 5)."""
    fields = _stat(pid)
    return None if fields is None else int(fields[2])
