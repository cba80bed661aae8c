"""ExecResult: how one command in a sandbox ended, as data."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ExecResult:
    """The outcome of `Sandbox.exec`.

    A command that fails, times out, is OOM-killed or takes its sandbox down
    with it still returns an ExecResult; only caller mistakes raise.
    """

    exit_code: int
    """The process's exit status; 128 + N when it was killed by signal N
    (so 137 after a timeout or an OOM kill), -1 when it never started."""
    stdout: str
    """Standard output decoded as UTF-8 (invalid bytes replaced), capped at
    `Limits.output_bytes` with a truncation marker appended when cut."""
    stderr: str
    """Standard error, decoded and capped like stdout."""
    timed_out: bool = False
    """True when the per-exec timeout or the sandbox lifetime ran out."""
    oom_killed: bool = False
    """True when the kernel's OOM killer killed a process of this exec."""
    duration_s: float = 0.0
    """Wall-clock seconds from start to the end of the command."""
    truncated: bool = False
    """True when stdout or stderr was cut at the output cap."""
    sandbox_died: bool = False
    """True when the sandbox itself stopped during the exec; it must be replaced."""
    error: str | None = None
    """Why the exec did not run normally (sandbox died, command not found...), else None."""

    @property
    def ok(self) -> bool:
        """True when the command ran to completion with exit status 0."""
        return self.exit_code == 0 and not (self.timed_out or self.oom_killed or self.sandbox_died)
