"""Env server containers (the agentgym/env image, built here without network): SQL-v0 and Tools-v0 served from
containers pass the contract checks, the pool spreads sessions over replicas, a killed container ends only its
episodes and is replaced, and SIGKILL of the owner leaves no container behind.

Policies are scripted (labelled): the envs' built-in solvers.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from agentgym.checker import check_env_contract
from agentgym.collector import Collector, Task
from agentgym.runtime import RemoteEnv
from agentgym.runtime.cluster import LABEL_ENV, EnvCluster, EnvPool
from agentgym.single_episode import run_episode
from agentgym.trajectory import EpisodeStatus, Failure

pytestmark = [pytest.mark.docker, pytest.mark.timeout(900)]


def solver(messages, env):
    """Scripted policy (labelled): the env's built-in solver."""
    return env.unwrapped.solver_action()


@pytest.fixture(scope="module")
def sql_cluster():
    with EnvCluster("SQL-v0", replicas=2, max_sessions=8) as cluster:
        yield cluster


def test_sql_from_a_container_passes_envs_check_and_solves_its_tasks(sql_cluster):
    endpoint = sql_cluster.endpoints[0]
    assert endpoint.startswith("http+unix://")
    report = check_env_contract(endpoint, lambda: RemoteEnv(endpoint))
    assert report.passed, [(r.name, r.detail) for r in report.failures()]
    env = RemoteEnv(endpoint)
    episode = run_episode(env, solver, task_id="shop-easy-0", seed=0, max_turns=5)
    env.close()
    assert episode.status == EpisodeStatus.COMPLETE and episode.total_reward == 1.0


def test_tools_with_its_mcp_server_inside_the_container():
    with EnvCluster("Tools-v0", replicas=1, env_kwargs={"task_sets": ["timezones"]}) as cluster:
        env = RemoteEnv(cluster.endpoints[0])
        assert [t["function"]["name"] for t in env.tools()][-3:] == ["get_current_time", "convert_time", "answer"]
        episode = run_episode(env, solver, task_id="timezones-0", seed=0, max_turns=4)
        env.close()
    assert episode.total_reward == 1.0, episode.turns[-1].info


async def test_the_pool_spreads_sessions_and_a_killed_container_ends_only_its_episodes(sql_cluster):
    from agentgym.sandboxes.docker import client

    pool = EnvPool(sql_cluster)
    victim = sql_cluster.members[0]
    calls = {"n": 0}

    def killing_solver(messages, env):
        """Scripted (labelled): the solver; the first replica's container is killed at the 4th call."""
        calls["n"] += 1
        if calls["n"] == 4:
            client().api.kill(victim.container_id)
        return env.unwrapped.solver_action() if env.url != victim.endpoint or calls["n"] < 4 else "x"

    collector = Collector(pool, killing_solver, concurrency=8, progress=False)
    first = (await collector.collect([Task("shop-easy-0", seed=i) for i in range(8)])).episodes
    assert sorted(pool.load(peak=True).values()) == [4, 4]  # spread evenly over the two replicas
    assert len({e.env_id for e in first}) == 1
    lost = [e for e in first if e.status != EpisodeStatus.COMPLETE]
    assert all(e.failure == Failure.INFRA for e in lost)
    assert sum(e.status == EpisodeStatus.COMPLETE for e in first) >= 4  # the other replica's episodes
    assert sql_cluster.check() == 1 and victim not in sql_cluster.members
    second = (await collector.collect([Task("shop-easy-0", seed=i) for i in range(8)])).episodes
    assert all(e.status == EpisodeStatus.COMPLETE for e in second), {e.error for e in second}
    await collector.aclose()


def test_envs_up_prints_endpoints_and_its_sigkill_leaves_no_container():
    from agentgym.sandboxes.docker import client

    owner = subprocess.Popen([sys.executable, "-m", "agentgym", "envs", "up", "Maze-v0", "--replicas", "1"],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    endpoint, said = "", []
    while not endpoint.startswith("http+unix://"):
        endpoint = owner.stdout.readline().strip()
        said.append(endpoint)
        assert endpoint or owner.poll() is None, "agentgym envs up exited without printing an endpoint"
    assert any(line.startswith("image agentgym/env:") for line in said), said  # it says which image serves Maze
    env = RemoteEnv(endpoint)
    assert env.reset(seed=0)[0].startswith("Start.")
    env.close()
    [container] = client().api.containers(filters={"label": [f"{LABEL_ENV}=Maze-v0", f"agentgym.owner_pid={owner.pid}"]})
    os.kill(owner.pid, signal.SIGKILL)
    owner.wait(10)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if not client().api.containers(all=True, filters={"id": container["Id"]}):
            return
        time.sleep(0.5)
    pytest.fail(f"container {container['Id'][:12]} outlived its SIGKILLed owner")
