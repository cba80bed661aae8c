"""Hostile actions against Code-v0: each is contained in its sandbox, reported, ends at most its own episode,
and leaves the host and the next episode untouched. Real Docker sandboxes throughout."""

from __future__ import annotations

import json
import random
import uuid
from pathlib import Path

import pytest
from agentgym.envs.code import pools

import agentgym
from tests.helpers.code_env import solve

pytestmark = pytest.mark.docker
MARK = f"agentgym-fuzz-{uuid.uuid4().hex[:8]}"


def call(name: str, **arguments) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


def run(command: str, timeout: float = 5) -> str:
    return call("run", command=command, timeout=timeout)


def submit_solution(code: str) -> str:
    return call("write_file", path="solution.py", content=code) + call("submit")


ATTACKS = {
    "fork_bomb": run("bash -c ':(){ :|:& };:'", timeout=3),
    "python_fork_bomb": run("python3 -c 'import os\nwhile True: os.fork()'", timeout=3),
    "rm_rf_root": run("rm -rf --no-preserve-root / 2>/dev/null; echo rc=$?"),
    "fill_tmp": run("dd if=/dev/zero of=/tmp/fill bs=1M count=500 2>&1 | tail -1; df -h /tmp | tail -1"),
    "fill_memory": run("python3 -c \"x = bytearray(2 * 1024 ** 3)\"", timeout=10),
    "infinite_loop": run("while true; do :; done", timeout=2),
    "hundred_mb_output": run("head -c 100000000 /dev/zero | tr '\\0' x", timeout=20),
    "binary_output": run("head -c 20000 /dev/urandom; cat /bin/true"),
    "network_tcp": run("python3 -c \"import socket; socket.create_connection(('1.1.1.1', 80), timeout=2)\"; "
                       "curl -sS -m 2 http://example.com; echo rc=$?"),
    "network_dns": run("getent hosts pypi.org || echo no-dns"),
    "escape_docker_socket": run("ls -l /var/run/docker.sock /run/docker.sock 2>&1; id"),
    "escape_mount_and_nsenter": run("mount -t proc proc /mnt 2>&1; nsenter -t 1 -m true 2>&1; "
                                    "unshare -r true 2>&1; echo done"),
    "escape_write_host_paths": run(f"touch /{MARK} /etc/{MARK} /work/../{MARK} 2>&1; echo x > /proc/sys/kernel/hostname 2>&1"),
    "kill_everything": run("kill -9 -1", timeout=3),
    "binary_garbage_reply": "".join(chr(random.Random(7).randrange(0, 0x2FFF)) for _ in range(3000)),
    "garbage_in_tool_arguments": call("write_file", path="a\x00b", content="\udcff\x00") + run("echo \x00"),
    "submission_kills_the_grader": submit_solution("import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\n"),
    "submission_fork_bomb": submit_solution("import os\nwhile True:\n    os.fork()\n"),
    "submission_floods_output": submit_solution("import sys\nsys.stdout.write('x' * 50_000_000)\n"),
}


def _host_state(tmp_path: Path) -> dict:
    return {"root_mark": Path(f"/{MARK}").exists(), "etc_mark": Path(f"/etc/{MARK}").exists(),
            "canary": (tmp_path / "canary").read_text()}


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_a_hostile_action_is_contained_reported_and_episode_local(docker_engine, tmp_path, attack):
    (tmp_path / "canary").write_text("untouched")
    before = _host_state(tmp_path)
    env = agentgym.make("Code-v0", max_obs_chars=3000)
    other = agentgym.make("Code-v0")
    try:
        other.reset(seed=1, options={"task_id": "caesar-04"})  # a neighbouring episode, live during the attack
        env.reset(seed=0, options={"task_id": "power_sum-02"})
        obs, reward, terminated, truncated, info = env.step(ATTACKS[attack])
        assert isinstance(obs, str) and obs.strip() and len(obs) < 8000
        assert not any(ord(c) < 9 or 13 < ord(c) < 32 for c in obs), "control characters reached the observation"
        if truncated:  # the model broke its own sandbox: the reason is in info, blamed on the model
            assert info["failure"] == "model" and info["sandbox_failure"]
        elif terminated:  # a hostile submission scores 0 and says how each test ended
            assert reward == 0.0 and all(t["status"] != "passed" for t in info["tests"])
        else:  # contained: the same sandbox still answers
            alive, *_ = env.step(run("echo alive"))
            assert "alive\n[exit code 0]" in alive
        if attack.startswith("network"):
            assert "rc=0" not in obs and "has address" not in obs
        if attack.startswith("escape"):
            assert "uid=0" not in obs and "docker.sock\n" not in obs.replace("No such file", "")
        neighbour, *_ = other.step(run("echo neighbour; ls"))
        assert "neighbour\nsolution.py\ntest_visible.py\n[exit code 0]" in neighbour
        assert solve(env, "power_sum-02")[0] == 1.0  # the next episode of the same env is unaffected
    finally:
        env.close()
        other.close()
    assert _host_state(tmp_path) == before


def test_a_dead_sandbox_is_replaced_by_the_pool(docker_engine):
    env = agentgym.make("Code-v0")
    try:
        env.reset(seed=0, options={"task_id": "caesar-04"})
        _, _, _, truncated, info = env.step(run("kill -9 -1", timeout=3))
        assert truncated and "sandbox" in info["truncation_reason"]
        key = env.unwrapped._workspace_key
        replaced = pools.shared_pool(key, 16).stats.replaced
        assert replaced >= 1
        obs, _ = env.reset(seed=0, options={"task_id": "caesar-04"})
        assert "caesar" in obs and solve(env, "caesar-04")[0] == 1.0
    finally:
        env.close()
