"""The soak env's sandbox (bench/soak_workspace.py): a disk_fill fills the real workspace, the step's own write
fails as a named infra error, and the next episode on the same env instance runs normally."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from agentgym.sandboxes import local  # noqa: E402
from soak_env import SoakMaze  # noqa: E402
from soak_workspace import DISK_FULL  # noqa: E402

from agentgym.errors import EnvInfraError  # noqa: E402

pytestmark = pytest.mark.skipif(local.unavailable_reason() is not None, reason=str(local.unavailable_reason()))


def test_a_disk_fill_ends_the_step_as_sandbox_disk_full_and_the_next_reset_wipes_it(tmp_path):
    env = SoakMaze(fault_log=str(tmp_path / "faults.jsonl"), start_log=str(tmp_path / "starts.jsonl"),
                   difficulty="open", max_turns=10, sandbox=True, disk_rate=1.0)
    try:
        env.reset(seed=0)
        with pytest.raises(EnvInfraError, match=DISK_FULL) as raised:
            env.step("up")
        assert raised.value.kind == "sandbox_disk_full" and "ENOSPC" in raised.value.reason
        fault = json.loads((tmp_path / "faults.jsonl").read_text())  # logged before it acted
        assert fault["kind"] == "disk_fill" and fault["token"] == env.token and fault["turn"] == 1
        env.disk_rate = 0.0
        env.reset(seed=1)  # a fresh workspace: the next episode's steps write as usual
        env.step("up")
        assert env.workspace.sandbox.read_file("moves/01.txt") == b"up\n"
        assert "fill-0" not in env.workspace.sandbox.exec("ls").stdout
        sandbox = env.workspace.sandbox
    finally:
        env.close()
    assert not sandbox.alive and sandbox.handle.proc.poll() is not None  # closed with the env: no bwrap left
