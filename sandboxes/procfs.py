"""What /proc says of a host process (Linux): the fields of its stat line, and its children."""

from __future__ import annotations

import os


def stat_fields(pid: int | str) -> list[str] | None:
    """The fields of /proc/PID/stat after "pid (comm)": [0] the state, [1] the parent pid, [19] the start time in
    clock ticks since boot (`man 5 proc`, counted from its field 3). None when the process is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()  # comm may hold spaces and parentheses
    except (OSError, IndexError):
        return None


def children(pid: int) -> list[int]:
    """The pids whose parent is `pid` (a process gone meanwhile is skipped)."""
    found = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        fields = stat_fields(entry)
        if fields is not None and int(fields[1]) == pid:
            found.append(int(entry))
    return found
