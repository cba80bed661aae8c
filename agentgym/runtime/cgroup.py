"""What a whole container used: its cgroup's CPU seconds and peak memory, read from inside it.

An env server container reports these in ``/health`` (``cgroup``), so a user
sees a replica's whole cost (the server, every session's worker, whatever the
env started), next to the per-session usage the replies carry. Read where the
container's own cgroup is mounted at ``/sys/fs/cgroup`` (the engine does so in
a container): cgroup v2 (``cpu.stat`` ``usage_usec``, ``memory.peak``) or v1
(``cpuacct.usage``, ``memory.max_usage_in_bytes``). Outside a container that
directory is the machine's or a service's cgroup, so only the container entry
point turns the report on.
"""

from __future__ import annotations

import os

ROOT = "/sys/fs/cgroup"


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def _cpu_s(root: str) -> float | None:
    stat = _read(os.path.join(root, "cpu.stat"))  # v2
    if stat is not None:
        fields = dict(line.split(None, 1) for line in stat.splitlines() if " " in line)
        if "usage_usec" in fields:
            return int(fields["usage_usec"]) / 1e6
    usage = _read(os.path.join(root, "cpuacct", "cpuacct.usage"))  # v1, nanoseconds
    return int(usage) / 1e9 if usage and usage.strip().isdigit() else None


def _peak_mb(root: str) -> float | None:
    for name in ("memory.peak", os.path.join("memory", "memory.max_usage_in_bytes")):  # v2 (kernel 5.19+), v1
        value = _read(os.path.join(root, name))
        if value and value.strip().isdigit():
            return int(value) / 2**20
    return None


def cgroup_usage(root: str = ROOT) -> dict[str, float | None] | None:
    """``{"cpu_s", "peak_mb"}`` of the cgroup mounted at `root` (either may be None: not exposed); None: neither."""
    cpu, peak = _cpu_s(root), _peak_mb(root)
    if cpu is None and peak is None:
        return None
    return {"cpu_s": None if cpu is None else round(cpu, 3), "peak_mb": None if peak is None else round(peak, 1)}
