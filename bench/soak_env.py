"""The soak run's env: Maze-v0 that is not thread-safe and injects faults into itself from a seeded plan.

Used by `bench/soak.py` as ``soak_env:SoakMaze-v0`` (the driver puts bench/ on PYTHONPATH), so the
collector runs every instance in a worker process of its own (`agentgym.runtime.ProcessEnv`).

- ``reset`` draws a fresh episode token (``ep-<pid>-<n>``; with ``tag_host``, in env server containers whose pids
  repeat, ``ep-<hostname>.<pid>-<n>``, the hostname being the container's short id), appends
  ``{"event": "start", "token": ...}`` to the start log and ends the reset observation with ``[soak ep-...]``: the stored episode's first
  observation names it, so the driver can tell which started episodes reached the store.
- ``step`` may inject one fault, drawn from ``random.Random(f"{plan_seed}:{token}:{turn}")`` (the same
  episode token and turn give the same decision): ``worker_kill`` (the worker SIGKILLs itself) with
  probability ``kill_rate`` per step, ``step_hang`` (sleeps ``hang_s``, past the collector's turn
  timeout, so the worker is killed by the collector) with probability ``hang_rate`` per step, ``disk_fill``
  (fills the sandbox's workspace until its filesystem refuses, so the step's own write fails and the env raises
  `EnvInfraError`, kind ``sandbox_disk_full``) with probability ``disk_rate`` per step.
- With ``sandbox``, each instance holds a real agentgym sandbox (bench/soak_workspace.py): every step writes its
  move into the sandbox's workspace, every reset wipes the workspace, ``close`` closes the sandbox.
- Every fault is appended to the fault log and fsynced BEFORE it is acted on, so the log is the ground
  truth of what was injected even when the act kills the writer.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import signal
import socket
import time
from typing import Any

from agentgym.envs.maze.env import MazeEnv
from soak_workspace import Workspace

from agentgym.registration import register


def append_record(path: str, record: dict[str, Any]) -> None:
    """Append one JSON line and fsync it, so it survives a SIGKILL right after."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(record) + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)


class SoakMaze(MazeEnv):
    """Maze-v0 with seeded self-inflicted faults; see the module docstring."""

    #: one global fault plan per process: run each instance in a worker process of its own
    thread_safe = False

    def __init__(self, *, fault_log: str, start_log: str, plan_seed: int = 0, kill_rate: float = 0.0,
                 hang_rate: float = 0.0, hang_s: float = 30.0, disk_rate: float = 0.0, sandbox: bool = False,
                 tag_host: bool = False, **maze_kwargs: Any):
        super().__init__(**maze_kwargs)
        if not 0 <= kill_rate + hang_rate + disk_rate <= 1:
            raise ValueError(f"kill_rate + hang_rate + disk_rate must lie in [0, 1], got {kill_rate} + {hang_rate} + "
                             f"{disk_rate}")
        if disk_rate and not sandbox:
            raise ValueError(f"disk_rate={disk_rate} fills the sandbox's disk: it needs sandbox=True")
        self.fault_log, self.start_log, self.plan_seed = fault_log, start_log, plan_seed
        self.kill_rate, self.hang_rate, self.hang_s, self.disk_rate = kill_rate, hang_rate, hang_s, disk_rate
        #: the sandbox each step writes into (opened here, with the env), or None
        self.workspace = Workspace() if sandbox else None
        self._serial = itertools.count()
        #: in a container: its short id (docker's hostname), in each token and record; else None (tokens as before)
        self.host = socket.gethostname() if tag_host else None
        self.token = ""

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        observation, info = super().reset(seed=seed, options=options)
        if self.workspace is not None:  # a fresh workspace: a full disk must not outlive its episode
            self.workspace.reset()
        where = f"{self.host}.{os.getpid()}" if self.host else str(os.getpid())
        self.token = f"ep-{where}-{next(self._serial)}"
        append_record(self.start_log, {"event": "start", "token": self.token, "pid": os.getpid(), "host": self.host,
                                       "task_id": info["task_id"], "time": time.time(),
                                       "workspace": self.workspace.storage if self.workspace else None})
        return f"{observation} [soak {self.token}]", info

    def step(self, action: str):
        turn = self._turn + 1
        draw = random.Random(f"{self.plan_seed}:{self.token}:{turn}").random()
        if draw < self.kill_rate:
            self._inject("worker_kill", turn)
            os.kill(os.getpid(), signal.SIGKILL)
        elif draw < self.kill_rate + self.hang_rate:
            self._inject("step_hang", turn)
            time.sleep(self.hang_s)
        elif draw < self.kill_rate + self.hang_rate + self.disk_rate:
            self._inject("disk_fill", turn)
            self.workspace.fill()  # the next write, the step's own, meets the full disk
        if self.workspace is not None:
            self.workspace.record(turn, action)
        return super().step(action)

    def close(self) -> None:
        if self.workspace is not None:
            self.workspace.close()
        super().close()

    def _inject(self, kind: str, turn: int) -> None:
        append_record(self.fault_log, {"kind": kind, "token": self.token, "pid": os.getpid(), "host": self.host,
                                       "turn": turn, "time": time.time(),
                                       "workspace": self.workspace.storage if self.workspace else None})


# served from containers by the `code` family image: its server runs sandboxes inline (bench/soak_workspace.py)
register(id="SoakMaze-v0", entry_point="soak_env:SoakMaze", max_turns=10, image="code")
