"""No leaked containers: the reaper removes sandboxes whose owning process is gone."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from agentgym.sandboxes import reaper

from tests.sandboxes.conftest import IMAGE, REPO

pytestmark = pytest.mark.docker

CHILD = """
import sys, time, sandboxes
sb = sandboxes.open(sys.argv[1])
print(sb.id, flush=True)
time.sleep(600)
"""


def containers_of(pid: int) -> list[str]:
    from agentgym.sandboxes import docker

    api = docker.client().api
    return [c["Id"] for c in api.containers(all=True, filters={"label": f"agentgym.owner_pid={pid}"})]


def test_orphans_of_a_sigkilled_owner_are_removed(docker_engine: None) -> None:
    from agentgym.sandboxes import docker

    env = {**os.environ, "PYTHONPATH": str(REPO)}
    child = subprocess.Popen([sys.executable, "-c", CHILD, IMAGE], stdout=subprocess.PIPE, text=True, env=env)
    assert child.stdout is not None
    cid = child.stdout.readline().strip()
    assert cid and containers_of(child.pid) == [cid]
    child.send_signal(signal.SIGKILL)
    child.wait()
    reaper.reap_orphans(docker.client())
    assert containers_of(child.pid) == []


def test_reaper_removes_a_stopped_orphan_and_spares_live_owners(docker_engine: None) -> None:
    from agentgym.sandboxes import docker

    api = docker.client().api
    gone = subprocess.Popen(["true"])
    gone.wait()
    orphan = api.create_container(IMAGE, command=["true"], labels=reaper.owner_labels(gone.pid))["Id"]
    mine = api.create_container(IMAGE, command=["true"], labels=reaper.owner_labels())["Id"]
    try:
        removed = reaper.reap_orphans(docker.client())
        assert orphan in removed and mine not in removed
        assert [c["Id"] for c in api.containers(all=True, filters={"id": mine})] == [mine]
    finally:
        api.remove_container(mine, force=True)


def test_owner_exit_removes_its_containers(docker_engine: None) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    code = f"import sandboxes; sb = sandboxes.open({IMAGE!r}); print(sb.id, flush=True)"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    cid = proc.stdout.strip()
    assert proc.returncode == 0 and cid, proc.stderr
    from agentgym.sandboxes import docker

    assert docker.client().api.containers(all=True, filters={"id": cid}) == []


def test_sigterm_removes_its_containers(docker_engine: None) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    child = subprocess.Popen([sys.executable, "-c", CHILD, IMAGE], stdout=subprocess.PIPE, text=True, env=env)
    assert child.stdout is not None
    cid = child.stdout.readline().strip()
    child.send_signal(signal.SIGTERM)
    assert child.wait(timeout=60) == -signal.SIGTERM
    deadline = time.monotonic() + 30
    from agentgym.sandboxes import docker

    while docker.client().api.containers(all=True, filters={"id": cid}) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert docker.client().api.containers(all=True, filters={"id": cid}) == []
