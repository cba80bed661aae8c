"""A worker process whose parent goes away (a SIGKILLed trainer) closes its env and ends quietly: no traceback in
the trainer's log, and an env holding outside resources (a container, a sandbox) still gets its ``close``."""

from __future__ import annotations

import subprocess
import time
from multiprocessing.connection import Connection
from pathlib import Path

from agentgym.runtime.process import _start_worker
from tests.helpers.counter_env import CounterEnv


class SlowCountingEnv(CounterEnv):
    """Counter-v0 whose reset takes a moment (the parent is gone by its reply) and whose close leaves a mark."""

    def __init__(self, mark: str, reset_s: float = 0.5):
        super().__init__()
        self.mark, self.reset_s = mark, reset_s

    def reset(self, *, seed=None, options=None):
        time.sleep(self.reset_s)
        return super().reset(seed=seed, options=options)

    def close(self):
        Path(self.mark).write_text("closed")


def start(tmp_path: Path) -> tuple[subprocess.Popen, Connection]:
    proc, conn = _start_worker("test", stderr=subprocess.PIPE)
    conn.send(("Slow-v0", f"{__name__}:SlowCountingEnv", {"mark": str(tmp_path / "closed")}))
    assert conn.recv()[0] == "ok"
    return proc, conn


def test_a_worker_whose_parent_left_mid_call_closes_its_env_and_ends_without_a_traceback(tmp_path):
    proc, conn = start(tmp_path)
    conn.send(("reset", (), {}))
    conn.close()  # the parent is gone before the reply
    stderr = proc.communicate(timeout=60)[1].decode()
    assert proc.returncode == 0 and "Traceback" not in stderr, stderr
    assert (tmp_path / "closed").read_text() == "closed"


def test_a_close_is_acknowledged_after_the_env_closed(tmp_path):
    proc, conn = start(tmp_path)
    conn.send(("reset", (), {}))
    assert conn.recv()[0] == "ok"
    conn.send(("close", (), {}))
    assert conn.recv() == ("ok", None)
    assert (tmp_path / "closed").read_text() == "closed"  # closed before the acknowledgement
    stderr = proc.communicate(timeout=60)[1].decode()
    assert proc.returncode == 0 and "Traceback" not in stderr, stderr
