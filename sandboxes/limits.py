"""Resource limits for one sandbox; every field has a safe default."""

from __future__ import annotations

from dataclasses import dataclass

MiB = 1024 * 1024


@dataclass(frozen=True)
class Limits:
    """Hard limits applied to a sandbox when it starts.

    The defaults are small on purpose: 64 sandboxes with these limits fit on a
    2-core, 24 GiB machine. Raise a field explicitly when an env needs more.
    """

    cpus: float = 1.0
    """CPU quota in cores (Docker `--cpus`); the local backend cannot enforce
    a quota and caps CPU seconds per exec instead (see sandboxes/README.md)."""
    memory_bytes: int = 256 * MiB
    """Memory limit for everything in the sandbox, tmpfs contents included;
    swap is always off (memory-swap equals memory)."""
    pids: int = 128
    """Maximum number of processes and threads alive at once (fork-bomb guard)."""
    disk_bytes: int = 64 * MiB
    """Size of each writable tmpfs (the workdir and /tmp); writes past it fail with ENOSPC."""
    exec_timeout_s: float = 30.0
    """Default wall-clock limit of one exec; the process group is killed when it runs out."""
    lifetime_s: float = 3600.0
    """Wall-clock limit of the whole sandbox; a pool reset starts it afresh."""
    output_bytes: int = 1 * MiB
    """Cap on the bytes kept from each of stdout and stderr per exec; the rest is
    dropped and a visible truncation marker is appended."""

    def __post_init__(self) -> None:
        checks = [
            ("cpus", self.cpus > 0, "a positive number of cores, e.g. cpus=0.5"),
            ("memory_bytes", self.memory_bytes >= 16 * MiB, "at least 16 MiB (16 * 1024 * 1024)"),
            ("pids", self.pids >= 8, "at least 8 (the shell and the in-sandbox agent need some)"),
            ("disk_bytes", self.disk_bytes >= 1 * MiB, "at least 1 MiB"),
            ("exec_timeout_s", self.exec_timeout_s > 0, "a positive number of seconds"),
            ("lifetime_s", self.lifetime_s >= 1, "at least 1 second"),
            ("output_bytes", self.output_bytes >= 1024, "at least 1024 bytes"),
        ]
        for name, ok, rule in checks:
            if not ok:
                raise ValueError(f"Limits.{name}={getattr(self, name)!r} is invalid: it must be {rule}.")
        if 2 * self.disk_bytes >= self.memory_bytes:
            raise ValueError(
                f"Limits.disk_bytes={self.disk_bytes} is too large for memory_bytes={self.memory_bytes}: "
                "the workdir and /tmp are tmpfs charged to the sandbox's memory, so 2 * disk_bytes must stay "
                "below memory_bytes; raise memory_bytes or lower disk_bytes."
            )
