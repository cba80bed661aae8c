"""`ProcessEnv`: one env in its own worker process, driven over a pipe.

Most real envs (text games, simulators, browsers) keep global state and are
not safe to step from several threads, even as separate instances. A
`ProcessEnv` gives each env instance a process of its own:

    env = ProcessEnv("my_pkg.game:GameEnv", {"level": 3}, env_id="Game-v0")
    obs, info = env.reset(seed=0)        # runs in the worker
    env.close()                          # ends the worker

- The worker is a fresh interpreter (``python -m agentgym.runtime.worker``)
  that imports what the parent can; the collector starts workers in
  parallel, and a worker lives as long as its proxy, across any number of
  episodes.
- Every call has a time limit (`call_timeout_s`): a worker that does not answer
  is killed (SIGKILL) and the call raises `EnvInfraError` (kind ``env_timeout``).
- A worker that dies (crash, OOM kill, segfault in a C extension) makes the
  call in flight raise `EnvInfraError` (kind ``env_worker_died``) naming its exit
  code or signal; only the episode on that worker ends.
- Exceptions the env raises travel back and are raised again here, so a
  `MalformedActionError` or the env's own `EnvInfraError` keep their meaning.
- Workers die with their parent: they read EOF when the parent's end of the
  pipe closes, and ask the kernel for SIGKILL when their parent dies.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

from agentgym.errors import EnvInfraError
from agentgym.runtime.proxy import ProxyEnv


def _start_worker(name: str, stderr: int | None = None) -> tuple[subprocess.Popen, Connection]:
    """A fresh ``python -m agentgym.runtime.worker`` holding one end of a socket pair.

    A new interpreter rather than a fork: the parent runs threads (the collector's pool, torch) that must not be
    forked, and unlike multiprocessing's spawn the user's ``__main__`` is never run again. The worker imports
    what the parent can (its ``sys.path`` becomes the worker's PYTHONPATH).
    """
    ours, theirs = socket.socketpair()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p or os.getcwd() for p in sys.path)}
    try:
        proc = subprocess.Popen([sys.executable, "-m", "agentgym.runtime.worker", str(theirs.fileno()), name],
                                pass_fds=(theirs.fileno(),), env=env, stdin=subprocess.DEVNULL, stderr=stderr)
    finally:
        theirs.close()
    return proc, Connection(ours.detach())


def _exit_text(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


class ProcessEnv(ProxyEnv):
    """An env in its own worker process; see the module docstring."""

    def __init__(self, entry_point: str | Callable[..., Any], kwargs: dict[str, Any] | None = None, *,
                 env_id: str = "", call_timeout_s: float | None = 60.0, start_timeout_s: float | None = 300.0,
                 render_mode: str | None = None):
        self.env_id = env_id or (entry_point if isinstance(entry_point, str) else repr(entry_point))
        self.call_timeout_s = call_timeout_s
        self._lock = threading.Lock()
        self._closed = False
        self._proc, self._conn = _start_worker(self.env_id)
        try:
            self._conn.send((self.env_id, entry_point, dict(kwargs or {})))
            status, value = self._receive("construction", start_timeout_s)
        except BaseException:
            self._kill()
            raise
        if status == "err":
            self._kill()
            raise value
        super().__init__(value, render_mode=render_mode)

    @property
    def pid(self) -> int | None:
        """The worker's process id."""
        return self._proc.pid

    def usage(self) -> tuple[float, float] | None:
        """(CPU seconds, peak resident MB) of the worker so far, from /proc; None once it is gone (`agentgym.cost`)."""
        from agentgym.cost import process_usage

        return process_usage(self.pid) if self._proc.poll() is None else None

    @property
    def alive(self) -> bool:
        return self._proc.poll() is None

    def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            if self._closed:
                raise EnvInfraError(f"env worker of {self.env_id} was closed; make a new env", kind="env_closed")
            try:
                self._conn.send((method, args, kwargs))
            except (BrokenPipeError, ConnectionError, OSError):
                raise self._died(method) from None
            status, value = self._receive(method, self.call_timeout_s)
        if status == "err":
            raise value
        return value

    def _receive(self, what: str, timeout_s: float | None) -> tuple[str, Any]:
        if not self._conn.poll(timeout_s):
            self._kill()
            raise EnvInfraError(f"env worker {self.pid} of {self.env_id} did not answer {what} within "
                                f"{timeout_s:g} s (our timeout); it was killed", kind="env_timeout")
        try:
            return self._conn.recv()
        except (EOFError, ConnectionError, OSError):
            raise self._died(what) from None

    def _died(self, what: str) -> EnvInfraError:
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._proc.wait(timeout=2)
        self._closed = True
        return EnvInfraError(f"env worker {self.pid} of {self.env_id} died during {what} "
                             f"({_exit_text(self._proc.returncode)})", kind="env_worker_died")

    def _kill(self) -> None:
        self._closed = True
        if self._proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self._proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._proc.wait(timeout=5)
        self._conn.close()

    def close(self) -> None:
        """End the worker (politely when it is idle, by SIGKILL when it is busy or stuck); idempotent."""
        if self._closed and self._proc.poll() is not None:
            return
        if self._lock.acquire(timeout=0.5):
            try:
                if not self._closed:
                    self._closed = True
                    with contextlib.suppress(Exception):
                        self._conn.send(("close", (), {}))
                        if self._conn.poll(10):
                            self._conn.recv()
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        self._proc.wait(timeout=5)
            finally:
                self._lock.release()
        self._kill()
        super().close()

