"""Start a real `agentgym envs serve` process for a test, wait for its health endpoint, stop it afterwards."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

REPO = Path(__file__).parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class ServedEnv:
    """One `agentgym envs serve` subprocess."""

    def __init__(self, env_id: str, *args: str, port: int | None = None, env_kwargs: dict | None = None):
        self.env_id, self.args, self.port = env_id, list(args), port or free_port()
        self.env_kwargs = env_kwargs
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/{self.env_id}"

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 120.0) -> ServedEnv:
        command = [sys.executable, "-m", "agentgym", "envs", "serve", self.env_id, "--port", str(self.port),
                   *self.args]
        if self.env_kwargs:
            command += ["--env-kwargs", json.dumps(self.env_kwargs)]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
        self.proc = subprocess.Popen(command, env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"env server exited with {self.proc.returncode}: {self.proc.stderr.read()[-2000:]}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.base}/health", timeout=2).status_code == 200:
                    return self
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"env server for {self.env_id} did not become healthy within {timeout_s} s")

    def kill(self) -> None:
        """SIGKILL, as a crash would."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()


@contextlib.contextmanager
def served(env_id: str, *args: str, **kwargs) -> Iterator[ServedEnv]:
    server = ServedEnv(env_id, *args, **kwargs).start()
    try:
        yield server
    finally:
        server.stop()
