"""Start a real `agentgym envs serve` process for a test, wait for its health endpoint, stop it afterwards."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

from agentgym.launch import ServedProcess, free_port, launch

REPO = Path(__file__).parents[2]


class ServedEnv:
    """One `agentgym envs serve` subprocess (restartable on the same port after `kill`)."""

    def __init__(self, env_id: str, *args: str, port: int | None = None, env_kwargs: dict | None = None):
        self.env_id, self.args, self.port = env_id, list(args), port or free_port()
        self.env_kwargs = env_kwargs
        self.served: ServedProcess | None = None

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
        env = {"PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
        self.stop()  # a restart after `kill`: close the old process's log
        self.served = launch(command, self.port, what=f"env server for {self.env_id}", timeout_s=timeout_s,
                             env=env, cwd=REPO)
        return self

    def kill(self) -> None:
        """SIGKILL, as a crash would."""
        if self.served and self.served.proc.poll() is None:
            self.served.proc.send_signal(signal.SIGKILL)
            self.served.proc.wait(10)

    def stop(self) -> None:
        if self.served:
            self.served.stop(timeout_s=15)


@contextlib.contextmanager
def served(env_id: str, *args: str, **kwargs) -> Iterator[ServedEnv]:
    server = ServedEnv(env_id, *args, **kwargs).start()
    try:
        yield server
    finally:
        server.stop()
