"""The Sandbox API on both backends: exec, files, snapshots, lifetime, failures as data."""

from __future__ import annotations

import os
import random
import time

import pytest
from agentgym.sandboxes import Limits, Sandbox

from agentgym import sandboxes
from tests.sandboxes.conftest import IMAGE, SMALL

LISTING = (
    "cd / && find work tmp -mindepth 1 -printf '%p %y %m %s %T@ %l\\n' | sort; "
    "find work tmp -type f -exec sha256sum {} + | sort"
)


def test_exec_string_and_argv(sandbox: Sandbox) -> None:
    assert sandbox.exec("echo $((6 * 7)) | tr 4 X").stdout == "X2\n"
    assert sandbox.exec(["printf", "%s|", "a b", "$HOME"]).stdout == "a b|$HOME|"
    result = sandbox.exec("echo out; echo err >&2; exit 3")
    assert (result.exit_code, result.stdout, result.stderr, result.ok) == (3, "out\n", "err\n", False)


def test_exec_stdin_env_cwd(sandbox: Sandbox) -> None:
    assert sandbox.exec(["wc", "-c"], stdin=b"x" * 300_000).stdout.strip() == "300000"
    assert sandbox.exec("echo $GREETING", env={"GREETING": "hi"}).stdout == "hi\n"
    sandbox.exec("mkdir -p sub")
    assert sandbox.exec("pwd", cwd="/work/sub").stdout == "/work/sub\n"
    assert sandbox.exec("pwd").stdout == "/work\n"


def test_missing_command_is_data(sandbox: Sandbox) -> None:
    result = sandbox.exec(["no-such-program"])
    assert result.exit_code == 127 and result.error and "no-such-program" in result.error
    assert sandbox.exec("no-such-program").exit_code == 127


def test_bad_arguments_raise(sandbox: Sandbox) -> None:
    with pytest.raises(TypeError):
        sandbox.exec([])
    with pytest.raises(ValueError):
        sandbox.exec("true", timeout=0)


def test_write_and_read_files(sandbox: Sandbox) -> None:
    sandbox.write_files({"a/b/c.txt": "text", "bin.dat": bytes(range(256)), "/tmp/t": b"tmp"})
    assert sandbox.read_file("a/b/c.txt") == b"text"
    assert sandbox.read_file("/work/bin.dat") == bytes(range(256))
    assert sandbox.exec("cat /tmp/t").stdout == "tmp"
    with pytest.raises(FileNotFoundError):
        sandbox.read_file("missing")
    with pytest.raises(OSError, match="Read-only file system"):
        sandbox.write_files({"/etc/evil": "x"})
    with pytest.raises(IsADirectoryError):
        sandbox.read_file("a")


def test_snapshot_restore_is_exact(sandbox: Sandbox) -> None:
    sandbox.exec(
        "mkdir -p d/e && echo one > d/e/f && chmod 640 d/e/f && ln -s d/e/f link && printf '\\0\\1' > /tmp/bin "
        "&& mkfifo pipe && touch -d '2001-02-03 04:05:06' d/e/f && chmod 555 d && dd if=/dev/urandom of=big bs=1k count=300 2>/dev/null"
    )
    before = sandbox.exec(LISTING).stdout
    token = sandbox.snapshot()
    sandbox.exec("chmod 755 d && rm -rf d big && echo changed > link2 && echo 2 > /tmp/bin && sleep 300 &")
    assert sandbox.exec(LISTING).stdout != before
    sandbox.restore(token)
    assert sandbox.exec(LISTING).stdout == before
    assert "sleep 300" not in sandbox.exec("ps -eo args").stdout


def test_snapshot_branches_into_another_sandbox(sandbox: Sandbox, backend: str) -> None:
    sandbox.write_files({"state.txt": "turn 3"})
    token = sandbox.snapshot()
    with sandboxes.open(IMAGE, backend=backend, limits=SMALL) as other:
        other.restore(token)
        assert other.read_file("state.txt") == b"turn 3"


def test_agent_death_is_data(sandbox: Sandbox) -> None:
    result = sandbox.exec("kill -9 $PPID; sleep 5")
    assert result.sandbox_died and not result.ok and "dead" in (result.error or ""), result
    assert not sandbox.alive
    again = sandbox.exec("true")
    assert again.sandbox_died
    with pytest.raises(sandboxes.SandboxClosed):
        sandbox.read_file("x")


def test_lifetime_ends_the_sandbox(backend: str) -> None:
    limits = Limits(**{**SMALL.__dict__, "lifetime_s": 2})
    with sandboxes.open(IMAGE, backend=backend, limits=limits) as sb:
        result = sb.exec("sleep 30", timeout=20)
        assert result.timed_out and not result.ok, result
        assert sb.exec("true").sandbox_died


def test_background_process_does_not_block_exec(sandbox: Sandbox) -> None:
    result = sandbox.exec("sleep 60 & echo started", timeout=10)
    assert result.stdout == "started\n" and not result.timed_out
    assert "sleep 60" in sandbox.exec("ps -eo args").stdout


def test_closed_sandbox_raises(backend: str) -> None:
    sb = sandboxes.open(IMAGE, backend=backend, limits=SMALL)
    sb.close()
    sb.close()
    with pytest.raises(sandboxes.SandboxClosed):
        sb.exec("true")


@pytest.mark.docker
def test_auto_picks_docker_when_an_engine_answers(docker_engine: None) -> None:
    with sandboxes.open(IMAGE, backend="auto", limits=SMALL) as sb:
        assert sb.backend == "docker"


@pytest.mark.docker
def test_missing_image_says_how_to_build_it(docker_engine: None) -> None:
    with pytest.raises(sandboxes.ImageNotFound, match="agentgym sandbox build"):
        sandboxes.open("agentgym/no-such-image:latest")


@pytest.mark.docker
def test_docker_defaults_are_locked_down(docker_sandbox: Sandbox) -> None:
    from agentgym.sandboxes import docker

    info = docker.client().api.inspect_container(docker_sandbox.id)
    host = info["HostConfig"]
    assert host["NetworkMode"] == "none" and host["ReadonlyRootfs"] and host["CapDrop"] == ["ALL"]
    assert "no-new-privileges" in host["SecurityOpt"] and not host["Privileged"]
    assert host["Memory"] == host["MemorySwap"] == SMALL.memory_bytes
    assert host["PidsLimit"] == SMALL.pids and host["NanoCpus"] == int(SMALL.cpus * 1e9)
    assert not host.get("Binds") and not info["Mounts"], "a host path is mounted"
    assert info["Config"]["User"] == "1000:1000"
    assert info["Config"]["Labels"]["agentgym.owner_pid"].isdigit()


def test_frozen_agent_is_declared_dead(sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch) -> None:
    from agentgym.sandboxes import sandbox as sandbox_module

    monkeypatch.setattr(sandbox_module, "EXEC_GRACE_S", 1.0)
    result = sandbox.exec("kill -STOP $PPID; sleep 1", timeout=1)
    assert result.sandbox_died and "stopped answering" in (result.error or ""), result
    assert not sandbox.alive


def test_closing_a_frozen_sandbox_leaves_none_of_its_processes(sandbox: Sandbox,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """A frozen agent cannot see its input close, so closing must kill it and everything it started: once,
    the local backend killed bwrap alone and left the stopped agent (and the sandbox's init) on the host."""
    from agentgym.sandboxes import sandbox as sandbox_module

    monkeypatch.setattr(sandbox_module, "EXEC_GRACE_S", 1.0)
    tag = str(random.randrange(100_000, 999_999))  # a sleep no other test (or xdist worker) starts
    sandbox.exec(f"sleep {tag} > /dev/null 2>&1 &")
    assert _within(10, lambda: _sleeping(tag)), "the background sleep did not start"
    sandbox.exec("kill -STOP $PPID; sleep 1", timeout=1)
    sandbox.close()
    assert _within(10, lambda: not _sleeping(tag)), "a process of the closed sandbox is still running"


def _within(seconds: float, check) -> bool:
    """Whether `check()` holds within `seconds` (polled every 0.1 s): a fork execs, a kill lands, not at once."""
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def _sleeping(tag: str) -> bool:
    """True while a live (not zombie) `sleep TAG` runs anywhere on the host (sandboxes share its kernel)."""
    from agentgym.sandboxes.procfs import stat_fields

    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        fields = stat_fields(pid)
        if argv[:2] == [b"sleep", tag.encode()] and fields is not None and fields[0] != "Z":
            return True
    return False



def test_a_command_is_the_oom_killers_first_choice_not_the_agent(sandbox: Sandbox) -> None:
    """Under the memory limit the kernel kills the command (and its forks), never the sandbox's agent: CI once
    saw a Python fork bomb get the agent OOM-killed, and the sandbox could not restore."""
    scores = sandbox.exec("cat /proc/self/oom_score_adj; sh -c 'cat /proc/self/oom_score_adj'").stdout.split()
    assert scores == ["1000", "1000"]
    agent = sandbox.exec("cat /proc/$PPID/oom_score_adj").stdout.strip()
    assert int(agent) < 1000


def test_restore_stops_fork_bombs_and_the_sandbox_runs_commands_again(docker_engine):
    """restore leaves no fork bomb behind, bomb after bomb (kill(-1) and freeze-then-kill passes)."""
    bombs = ["bash -c ':(){ :|:& };:'", "python3 -c 'import os\nwhile True: os.fork()'"] * 3
    with sandboxes.open(IMAGE, limits=Limits(pids=128, exec_timeout_s=20, lifetime_s=600)) as sb:
        token = sb.snapshot()
        for bomb in bombs:
            sb.exec(bomb, timeout=2)
            sb.restore(token)  # every other process is killed, forks that raced the kill included
            assert sb.exec("echo ok").stdout == "ok\n", bomb
