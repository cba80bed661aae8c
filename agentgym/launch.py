"""Start an HTTP server in a subprocess and wait until its ``GET /health`` answers 200.

`agentgym serve` (a model behind the OpenAI API) and `agentgym envs serve` (an env server) both
answer ``/health``; tests and benchmarks that need one in another process start it with
`serve_model` or `launch`. The server's output goes to a temporary file (a pipe nobody reads
would fill up and stall a chatty server); its tail is in the error when the server exits or does
not come up in time, and in `ServedProcess.output()`.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from agentgym.errors import require


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


@dataclass
class ServedProcess:
    """A server running in a subprocess; `url` is its base URL (``http://127.0.0.1:PORT``)."""

    proc: subprocess.Popen
    url: str
    log: IO[bytes]

    def output(self, limit: int = 4000) -> str:
        """The last `limit` characters the server wrote (stdout and stderr)."""
        self.log.flush()
        self.log.seek(0)
        return self.log.read().decode(errors="replace")[-limit:]

    def stop(self, timeout_s: float = 60.0) -> None:
        """Terminate the server (kill it after `timeout_s`); idempotent."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=timeout_s)
        self.log.close()

    def __enter__(self) -> ServedProcess:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def launch(command: list[str], port: int, *, what: str, timeout_s: float = 120.0,
           env: dict[str, str] | None = None, cwd: str | Path | None = None) -> ServedProcess:
    """Run `command` (a server listening on `port` of 127.0.0.1) and return once ``/health`` answers 200.

    Raises `RuntimeError` naming `what` with the server's last output when it exits first or does
    not answer within `timeout_s`.
    """
    httpx = require("httpx", extra="serve", what="waiting for a served process")
    log = tempfile.TemporaryFile()
    proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=cwd,
                            env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})})
    served = ServedProcess(proc, f"http://127.0.0.1:{port}", log)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            output = served.output()
            served.stop()
            raise RuntimeError(f"{what} exited with {proc.returncode}: {output}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{served.url}/health", timeout=2).status_code == 200:
                return served
        time.sleep(0.2)
    output = served.output()
    served.stop()
    raise RuntimeError(f"{what} did not answer /health within {timeout_s:g} s: {output}")


def serve_model(model_dir: str | Path, *args: str, timeout_s: float = 120.0) -> ServedProcess:
    """`agentgym serve MODEL_DIR --port PORT ARGS...` on a free port, once it answers ``/health``."""
    port = free_port()
    return launch([sys.executable, "-m", "agentgym", "serve", str(model_dir), "--port", str(port), *args], port,
                  what="agentgym serve", timeout_s=timeout_s)
