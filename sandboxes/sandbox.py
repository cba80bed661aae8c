"""Sandbox: the object callers hold, the same for every backend.

A backend starts an isolated process tree running the in-sandbox agent
(`sandboxes/agent.py`) and hands over a `Channel` to it plus a `Handle` that
can kill the sandbox and say why it died. Everything else (exec, files,
snapshots, lifetime, failures as data) lives here once.
"""

from __future__ import annotations

import base64
import logging
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from agentgym.sandboxes.channel import Channel, ChannelClosed
from agentgym.sandboxes.errors import AgentError, SandboxClosed
from agentgym.sandboxes.limits import Limits
from agentgym.sandboxes.result import ExecResult

log = logging.getLogger("sandboxes")

CONTROL_TIMEOUT_S = 120.0  # host-side deadline for file and snapshot calls
EXEC_GRACE_S = 10.0  # extra host-side wait beyond the exec timeout before declaring the sandbox dead


class Handle(Protocol):
    """What a backend gives the Sandbox: an id, a way to kill it, and a post-mortem."""

    id: str

    def kill(self) -> None:
        """Stop the sandbox and free everything it holds; safe to call twice."""
        ...

    def death_report(self) -> tuple[bool, str]:
        """(oom_killed, human-readable reason) after the agent stopped answering."""
        ...


@dataclass(frozen=True)
class Snapshot:
    """An opaque restore token: the tar of the writable dirs at snapshot time.

    It can be restored into the sandbox that made it or into another sandbox
    of the same image and workdir (to branch an episode).
    """

    sandbox_id: str
    tar: bytes = field(repr=False)
    mtimes_ns: dict[str, int] = field(repr=False, default_factory=dict)
    """Exact modification times (tar keeps them only to about a microsecond)."""
    taken_at: float = 0.0

    def payload(self) -> dict[str, Any]:
        """The fields of a restore request."""
        return {"tar": base64.b64encode(self.tar).decode("ascii"), "mtimes": self.mtimes_ns}


def agent_config(workdir: str, limits: Limits, writable: Sequence[str]) -> dict[str, Any]:
    """The JSON config handed to the agent on its command line."""
    return {
        "workdir": workdir,
        "writable": list(writable),
        "lifetime_s": limits.lifetime_s,
        "env": {
            "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "HOME": "/tmp",
            "LANG": "C.UTF-8",
            "USER": "agent",
            "TERM": "dumb",
            "PYTHONDONTWRITEBYTECODE": "1",
        },
    }


class Sandbox:
    """One live sandbox. Use as a context manager; `close()` frees it.

    `exec` never raises for what the command did: exit codes, timeouts, OOM
    kills and a dying sandbox all come back as an `ExecResult`.
    """

    def __init__(
        self,
        *,
        channel: Channel,
        handle: Handle,
        image: str,
        backend: str,
        limits: Limits,
        workdir: str,
        network: bool,
    ):
        self.channel, self.handle = channel, handle
        self.image, self.backend, self.limits = image, backend, limits
        self.workdir, self.network = workdir, network
        self.id = handle.id
        self._lock = threading.RLock()
        self._closed = False
        self._dead_reason: str | None = None
        self._dead_oom = False
        self._started = time.monotonic()  # the agent arms its own lifetime timer later than this
        self._baseline: Snapshot | None = None

    # ---- lifecycle -------------------------------------------------------

    def start(self, timeout: float) -> None:
        """Wait for the agent's hello and record the clean state; kills the sandbox on failure."""
        try:
            self.channel.receive(timeout)
            self._baseline = self.snapshot()
        except (ChannelClosed, AgentError) as exc:
            _, reason = self.handle.death_report()
            self.close()
            raise SandboxClosed(f"sandbox {self.id} ({self.image}) failed to start: {exc}; {reason}") from exc

    @property
    def alive(self) -> bool:
        """False once closed, dead, or past its lifetime."""
        return not self._closed and self._dead_reason is None and self._lifetime_left() > 0

    def close(self) -> None:
        """Kill the sandbox and release its resources; idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self.channel.close()
            self.handle.kill()

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("dead" if self._dead_reason else "alive")
        return f"<Sandbox {self.backend}:{self.id[:12]} image={self.image} {state}>"

    # ---- commands --------------------------------------------------------

    def exec(
        self,
        cmd: str | Sequence[str],
        *,
        stdin: bytes | str | None = None,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
    ) -> ExecResult:
        """Run `cmd` (a string for /bin/sh -c, or an argv list run directly) in the workdir."""
        argv = self._argv(cmd)
        limit = self.limits.exec_timeout_s if timeout is None else float(timeout)
        if limit <= 0:
            raise ValueError(f"exec timeout={timeout!r} must be a positive number of seconds")
        with self._lock:
            left = self._lifetime_left()
            if self._dead_reason is not None or (left <= 0 and not self._closed):
                return self._dead_result(0.0, timed_out=left <= 0)
            if self._closed:
                raise SandboxClosed(f"sandbox {self.id} is closed; open a new one (or use a Pool)")
            request: dict[str, Any] = {
                "op": "exec",
                "argv": argv,
                "timeout": min(limit, left),
                "cap": self.limits.output_bytes,
                "env": dict(env or {}),
                "cwd": cwd,
                "stdin": None if stdin is None else _b64(stdin),
            }
            start = time.monotonic()
            try:
                reply = self.channel.call(request, min(limit, left) + EXEC_GRACE_S)
            except ChannelClosed as exc:
                self._mark_dead(str(exc))
                return self._dead_result(time.monotonic() - start, timed_out=self._lifetime_left() <= 0)
        if not reply["ok"]:
            raise AgentError(f"exec of {argv!r} was rejected by the sandbox: {reply['error']}")
        return _exec_result(reply, self.limits.output_bytes, min(limit, left))

    def write_files(self, files: Mapping[str, bytes | str], *, mode: int | None = None) -> None:
        """Write files (paths relative to the workdir, or absolute inside a writable dir)."""
        self._call({"op": "write", "files": {p: _b64(d) for p, d in files.items()}, "mode": mode})

    def read_file(self, path: str) -> bytes:
        """The bytes of a file in the sandbox; FileNotFoundError/PermissionError like open()."""
        return base64.b64decode(self._call({"op": "read", "path": path})["data"])

    def snapshot(self) -> Snapshot:
        """Capture the workdir and /tmp (the only writable places) as a restore token."""
        reply = self._call({"op": "snapshot"})
        return Snapshot(self.id, base64.b64decode(reply["tar"]), reply["mtimes"], time.time())

    def restore(self, token: Snapshot) -> None:
        """Return the writable filesystem to `token` exactly; kills every running command first."""
        if not isinstance(token, Snapshot):
            raise TypeError(f"restore() takes a Snapshot from snapshot(), got {type(token).__name__}")
        self._call({"op": "restore", **token.payload()})

    def reset(self) -> None:
        """Back to the state right after start: clean files, no processes, a fresh lifetime."""
        if self._baseline is None:
            raise SandboxClosed(f"sandbox {self.id} never finished starting")
        started = time.monotonic()  # before the agent re-arms, so the host's deadline always comes first
        self._call({"op": "restore", **self._baseline.payload(), "rearm": True})
        self._started = started

    def ping(self) -> bool:
        """True when the agent answers."""
        try:
            self._call({"op": "ping"}, timeout=10.0)
        except SandboxClosed:
            return False
        return True

    # ---- internals -------------------------------------------------------

    def _call(self, request: dict[str, Any], timeout: float = CONTROL_TIMEOUT_S) -> dict[str, Any]:
        with self._lock:
            if self._closed or self._dead_reason is not None or self._lifetime_left() <= 0:
                why = self._dead_reason or ("closed" if self._closed else "past its lifetime")
                raise SandboxClosed(f"sandbox {self.id} cannot serve {request['op']!r}: {why}")
            try:
                reply = self.channel.call(request, timeout)
            except ChannelClosed as exc:
                self._mark_dead(str(exc))
                raise SandboxClosed(f"sandbox {self.id} died during {request['op']!r}: {self._dead_reason}") from exc
        if not reply["ok"]:
            raise _agent_exception(request, reply)
        return reply

    def _lifetime_left(self) -> float:
        return self.limits.lifetime_s - (time.monotonic() - self._started)

    def _mark_dead(self, why: str) -> None:
        oom, reason = self.handle.death_report()
        self._dead_reason = f"{why}; {reason}" + ("; the sandbox was OOM-killed" if oom else "")
        self._dead_oom = oom
        log.warning("sandbox %s died: %s", self.id[:12], self._dead_reason)
        self.close()

    def _dead_result(self, duration: float, *, timed_out: bool) -> ExecResult:
        if self._dead_reason is None:
            self._dead_reason = f"the sandbox lifetime of {self.limits.lifetime_s:g}s ran out"
            self.close()
        return ExecResult(
            exit_code=137,
            stdout="",
            stderr="",
            timed_out=timed_out,
            oom_killed=self._dead_oom,
            duration_s=duration,
            sandbox_died=True,
            error=f"sandbox {self.id[:12]} is dead: {self._dead_reason}",
        )

    @staticmethod
    def _argv(cmd: str | Sequence[str]) -> list[str]:
        if isinstance(cmd, str):
            return ["/bin/sh", "-c", cmd]
        argv = list(cmd)
        if not argv or not all(isinstance(a, str) for a in argv):
            raise TypeError(f"exec cmd must be a string or a non-empty list of strings, got {cmd!r}")
        return argv


def _b64(data: bytes | str) -> str:
    raw = data.encode() if isinstance(data, str) else bytes(data)
    return base64.b64encode(raw).decode("ascii")


def _decode(b64: str, dropped: int, cap: int) -> str:
    text = base64.b64decode(b64).decode("utf-8", errors="replace")
    if dropped:
        text += f"\n[agentgym: output truncated at {cap} bytes, {dropped} more bytes dropped]\n"
    return text


def _exec_result(reply: dict[str, Any], cap: int, limit: float) -> ExecResult:
    dropped_out, dropped_err = reply.get("stdout_dropped", 0), reply.get("stderr_dropped", 0)
    error = reply.get("error")
    if reply.get("timed_out"):
        error = f"the command ran past its timeout of {limit:g}s and was killed"
    elif reply.get("oom_killed"):
        error = "the command ran out of memory and was killed (raise Limits.memory_bytes if this is legitimate)"
    return ExecResult(
        exit_code=int(reply["exit_code"]),
        stdout=_decode(reply["stdout"], dropped_out, cap),
        stderr=_decode(reply["stderr"], dropped_err, cap),
        timed_out=bool(reply.get("timed_out")),
        oom_killed=bool(reply.get("oom_killed")),
        duration_s=float(reply["duration_s"]),
        truncated=bool(dropped_out or dropped_err),
        error=error,
    )


def _agent_exception(request: dict[str, Any], reply: dict[str, Any]) -> Exception:
    kind, message = reply.get("kind"), f"{request['op']} failed in the sandbox: {reply['error']}"
    if reply.get("errno"):  # an OSError inside: raise the same kind (FileNotFoundError, PermissionError...)
        return OSError(int(reply["errno"]), message)
    return AgentError(f"{message} ({kind})")
