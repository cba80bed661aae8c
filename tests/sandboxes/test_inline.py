"""The inline backend on this host: slots under their own uids (run as root, labelled uncontained).

What only the family container gives (no network, the replica's memory and pid
limits, the engine's per-slot tmpfs) is tested through the served container in
tests/envs/code/test_code_container.py; here the uid separation, the limits,
the kill scope and the cleaning are checked directly.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator

import pytest
from agentgym.sandboxes import BackendUnavailable, Limits, Privileges, Sandbox, inline

from agentgym import sandboxes

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the inline backend switches uids: it needs root")
SMALL = Limits(memory_bytes=192 * 1024 * 1024, pids=64, disk_bytes=16 * 1024 * 1024, exec_timeout_s=20)


@pytest.fixture
def slots(monkeypatch) -> Iterator[None]:
    root = tempfile.mkdtemp(prefix="agentgym-inline-")  # the slots' uids must reach it: not under pytest's 0700 dirs
    os.chmod(root, 0o755)
    monkeypatch.setenv("AGENTGYM_INLINE_UNCONTAINED", "1")
    monkeypatch.setattr(inline, "ROOT", root)
    yield
    shutil.rmtree(root, ignore_errors=True)


def open_two() -> tuple[Sandbox, Sandbox]:
    return sandboxes.open("none", backend="inline", limits=SMALL), sandboxes.open("none", backend="inline", limits=SMALL)


def uid_processes(uid: int) -> list[str]:
    out = subprocess.run(["ps", "-u", str(uid), "-o", "stat=,cmd="], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if line.strip() and not line.strip().startswith("Z")]


def test_slots_run_under_their_own_uid_and_cannot_touch_each_other(slots, tmp_path) -> None:
    secret = tmp_path / "grader.py"
    secret.write_text("HIDDEN = 1\n")
    secret.chmod(0o600)
    a, b = open_two()
    with a, b:
        assert a.workdir != b.workdir
        ids = [sb.exec("id -u").stdout.strip() for sb in (a, b)]
        assert ids[0] != ids[1] and "0" not in ids
        a.write_files({"mine.txt": "a's file"})
        peek = b.exec(f"cat {a.workdir}/mine.txt; ls {a.workdir}; cat {secret}; kill -9 -1; echo survived")
        assert "a's file" not in peek.stdout and "HIDDEN" not in peek.stdout
        assert peek.sandbox_died  # kill -9 -1 took b's own agent down ...
        assert a.exec("cat mine.txt").stdout == "a's file"  # ... and nothing of a's


def test_reset_kills_the_uids_processes_and_wipes_workspace_and_tmp(slots) -> None:
    with sandboxes.open("none", backend="inline", limits=SMALL) as sb:
        uid = int(sb.exec("id -u").stdout)
        sb.exec(f"echo x > left.txt; echo y > /tmp/left-{uid}; (sleep 300 &) ; sleep 0.2")
        assert any("sleep 300" in p for p in uid_processes(uid))
        sb.reset()
        assert sb.exec("ls -A").stdout == ""
        assert not os.path.exists(f"/tmp/left-{uid}")
        assert not any("sleep 300" in p for p in uid_processes(uid))


def test_fork_bomb_is_held_by_the_uid_process_limit_and_cleared_on_close(slots) -> None:
    sb = sandboxes.open("none", backend="inline", limits=SMALL)
    uid = int(sb.exec("id -u").stdout)
    result = sb.exec("python3 -c 'import os\nwhile True:\n    try: os.fork()\n    except OSError: pass'", timeout=3)
    assert result.timed_out or result.sandbox_died
    sb.close()
    assert uid_processes(uid) == []
    deadline = time.monotonic() + 30  # zombies still count against the uid's process limit until init reaps them
    while subprocess.run(["pgrep", "-u", str(uid)], capture_output=True).returncode == 0 and time.monotonic() < deadline:
        time.sleep(0.2)


def test_limits_apply_to_commands(slots) -> None:
    with sandboxes.open("none", backend="inline", limits=SMALL) as sb:
        limits = sb.exec(["bash", "-c", "ulimit -u -v -f -n -c -t; cat /proc/self/oom_score_adj"]).stdout
        assert [line.split()[-1] for line in limits.splitlines()] == [
            "64", str(192 * 1024), str(16 * 1024), "256", "0", "40", "1000"]
        hog = sb.exec("python3 -c 'x = bytearray(400 * 1024 * 1024)'")
        assert hog.exit_code != 0 and "MemoryError" in hog.stderr


def test_refuses_outside_a_container_and_network_requests(monkeypatch) -> None:
    monkeypatch.delenv("AGENTGYM_INLINE_UNCONTAINED", raising=False)
    if os.listdir("/sys/class/net") != ["lo"]:
        with pytest.raises(BackendUnavailable, match="--network none family container"):
            sandboxes.open("none", backend="inline")
    monkeypatch.setenv("AGENTGYM_INLINE_UNCONTAINED", "1")
    with pytest.raises(BackendUnavailable, match="no network to give"):
        sandboxes.open("none", backend="inline", network=True)


def test_the_root_slot_needs_a_server_that_is_its_containers_pid_1(slots) -> None:
    with pytest.raises(BackendUnavailable, match="must be its container's pid 1"):  # never on a host: its
        sandboxes.open("none", backend="inline", privileges=Privileges.container_root())  # cleaner kills all but pid 1


def test_two_processes_of_one_server_never_take_the_same_slot(slots) -> None:
    """An env that is not thread-safe runs each session in a worker process with its own copy of the module: the
    second process must skip the slot whose uid the first one's agent runs as, and leave that agent alive."""
    other = subprocess.Popen(
        [sys.executable, "-c", "import sys\nfrom agentgym import sandboxes\n"
         f"sb = sandboxes.open('none', backend='inline', limits=sandboxes.Limits(memory_bytes={SMALL.memory_bytes}, "
         f"disk_bytes={SMALL.disk_bytes}))\nprint(sb.workdir, flush=True)\nsys.stdin.read()\nsb.close()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        env={**os.environ, "AGENTGYM_INLINE_ROOT": inline.ROOT, "AGENTGYM_INLINE_UNCONTAINED": "1"})
    try:
        theirs = other.stdout.readline().strip()
        assert theirs == os.path.join(inline.ROOT, "0"), theirs
        with sandboxes.open("none", backend="inline", limits=SMALL) as sb:
            assert sb.workdir == os.path.join(inline.ROOT, "1")
            assert sb.exec("id -u").stdout.strip() == str(inline.FIRST_UID + 1)
        assert any(uid_processes(inline.FIRST_UID))  # the other process's agent was left alone
    finally:
        other.communicate("", timeout=30)
    assert other.returncode == 0
