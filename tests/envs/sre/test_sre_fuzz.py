"""Hostile actions against SRE-v0: contained in the system container, reported, episode-local, host untouched.

Commands the destructive guard does not recognise still run, as root, but
only inside an unprivileged, network-less, resource-limited container whose
root filesystem is read-only; the next episode gets a clean system.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import agentgym
from tests.helpers.sre_play import solve, tool

pytestmark = pytest.mark.docker

TASK = "easy/crashed_process-app-KILL/s0"
MARKER = "agentgym-sre-fuzz-marker"
ESCAPES = [  # each must fail inside the container
    "mount -t tmpfs none /mnt", "unshare -r true", "nsenter -t 1 -m true", "chroot / true",
    "mknod /tmp/disk b 8 0", "ip link add dummy0 type dummy", "touch /usr/escaped", "ls /var/run/docker.sock",
    "curl -sS -m 3 http://1.1.1.1/", "python3 -c \"import socket; socket.create_connection(('8.8.8.8', 53), 2)\"",
    "cat /sys/kernel/security/lsm && echo > /proc/sysrq-trigger",
]


@pytest.fixture(scope="module")
def fuzz_env(docker_engine):
    env = agentgym.make("SRE-v0", run_timeout_s=5.0, max_turns=40)
    yield env
    env.close()


def run(env, command: str) -> tuple[str, dict]:
    obs, _, terminated, truncated, info = env.step(tool("run", command=command))
    json.dumps(info)  # everything reported stays serialisable
    return obs, info | {"terminated": terminated, "truncated": truncated}


def test_escape_and_network_attempts_fail_inside(fuzz_env) -> None:
    fuzz_env.reset(options={"task_id": TASK})
    for command in ESCAPES:
        obs, info = run(fuzz_env, f"{command}; echo rc=$?")
        assert "rc=0" not in obs, (command, obs)
        assert not info["terminated"]
    obs, _ = run(fuzz_env, f"touch /tmp/{MARKER} /srv/{MARKER} && echo made")
    assert "made" in obs and not Path(f"/tmp/{MARKER}").exists() and not Path(f"/srv/{MARKER}").exists()


def test_fork_bomb_huge_output_garbage_and_memory_are_contained(fuzz_env) -> None:
    sentinel = Path("/tmp") / f"{MARKER}-{os.getpid()}"
    sentinel.write_text("host")
    before = sentinel.stat().st_mtime_ns
    fuzz_env.reset(options={"task_id": TASK})
    bomb = "python3 -c \"import os\nwhile True:\n  try: os.fork()\n  except OSError: pass\""
    obs, info = run(fuzz_env, bomb)
    assert "killed" in obs and not info["terminated"]  # the time limit killed the whole process group
    obs, info = run(fuzz_env, "yes | head -c 50000000")
    assert "[output cut" in obs or "truncated" in obs
    obs, info = run(fuzz_env, "head -c 200000 /dev/urandom")
    assert isinstance(obs, str) and len(obs) < 10_000
    obs, info = run(fuzz_env, "python3 -c 'x = bytearray(3 * 1024**3)'")
    assert "MemoryError" in obs or "exit status" in obs
    obs, *_ = fuzz_env.step(tool("restart", service="app"))  # the system still answers afterwards
    assert "RUNNING" in obs
    assert sentinel.read_text() == "host" and sentinel.stat().st_mtime_ns == before
    sentinel.unlink()


OOM_ADJ = ("python3 -c \"import os\nfor p in os.listdir('/proc'):\n  try:\n"
           "    cmd = open('/proc/%s/cmdline' % p).read().replace(chr(0), ' ')\n"
           "    adj = open('/proc/%s/oom_score_adj' % p).read().strip()\n  except (OSError, ValueError): continue\n"
           "  for name in ('supervisor', 'redis-server', 'app.py', 'worker.py', 'nginx'):\n"
           "    if name in cmd and 'python3 -c' not in cmd: print(name, adj)\n"
           "print('self', open('/proc/self/oom_score_adj').read().strip())\"")


def test_the_oom_killer_picks_the_models_commands_before_the_system(fuzz_env) -> None:
    """The model's commands start at oom_score_adj 1000; the supervisor and the services it started do not
    inherit that from sre-start's own command (a fork bomb once got the supervisor OOM-killed instead)."""
    fuzz_env.reset(options={"task_id": TASK})
    obs, _ = run(fuzz_env, OOM_ADJ)
    output = json.loads(obs.split("\n", 1)[1].rsplit("\n", 1)[0])["content"]  # the tool response's JSON
    seen = dict(line.split() for line in output.splitlines() if len(line.split()) == 2
                and line.split()[0] in ("supervisor", "redis-server", "worker.py", "nginx", "self"))
    assert seen.get("self") == "1000", obs
    assert {"supervisor", "redis-server", "worker.py", "nginx"} <= seen.keys(), obs
    assert all(adj == "0" for name, adj in seen.items() if name != "self"), obs


def test_deleting_the_system_is_episode_local(fuzz_env) -> None:
    fuzz_env.reset(options={"task_id": TASK})
    run(fuzz_env, "python3 -c \"import shutil; shutil.rmtree('/srv', ignore_errors=True)\"")
    _, reward, terminated, _, info = fuzz_env.step(tool("submit"))
    assert terminated and reward == 0.0 and info["success"] is False
    fuzz_env.reset(options={"task_id": TASK})  # the next episode gets a clean system
    reward, info = solve(fuzz_env)
    assert reward == pytest.approx(1.0)


def test_killing_everything_ends_only_that_episode(fuzz_env) -> None:
    fuzz_env.reset(options={"task_id": TASK})
    obs, info = run(fuzz_env, "python3 -c 'import os; os.kill(-1, 9)'")
    assert info["terminated"] and info["error_kind"] == "system_destroyed" and info["success"] is False
    assert "took the whole system down" in obs
    fuzz_env.reset(options={"task_id": TASK})
    reward, info = solve(fuzz_env)
    assert reward == pytest.approx(1.0)


def test_garbage_actions_are_malformed_not_fatal(fuzz_env) -> None:
    fuzz_env.reset(options={"task_id": TASK})
    for action in ["\x00\xff" * 1000, "<tool_call>{" * 50, "\ud800 surrogate", "x" * 50_000,
                   tool("run", command="\x00rm -rf /")]:
        obs, reward, terminated, truncated, info = fuzz_env.step(action)
        assert not terminated and not truncated and isinstance(obs, str)
        json.dumps(info)
