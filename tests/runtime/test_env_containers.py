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


def killing_solver(victim, at: int):
    """Scripted policy (labelled): the solver, which kills `victim`'s container at its `at`-th call and answers
    the victim's envs with a wrong move from then on."""
    from agentgym.sandboxes.docker import client

    calls = {"n": 0}

    def policy(messages, env):
        calls["n"] += 1
        if calls["n"] == at:
            client().api.kill(victim.container_id)
        return env.unwrapped.solver_action() if env.url != victim.endpoint or calls["n"] < at else "x"

    return policy


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
    pool = EnvPool(sql_cluster)
    victim = sql_cluster.members[0]
    collector = Collector(pool, killing_solver(victim, at=4), concurrency=8, progress=False)
    first = (await collector.collect([Task("shop-easy-0", seed=i) for i in range(8)])).episodes
    # spread evenly over the two replicas; an env made after the kill (a loaded machine) goes to the live one,
    # and a reset the killed replica refused moves there too (then both replicas counted it once)
    peak = pool.load(peak=True)
    assert 8 <= sum(peak.values()) <= 8 + peak[victim.endpoint] and 1 <= peak[victim.endpoint] <= 4, peak
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


def test_a_plugin_env_served_from_a_mounted_directory_by_its_module_id(tmp_path, monkeypatch):
    """`module:Name-v0` from a host directory bound into the replica (mounts, environment): the module's code is
    not in the image, the server answers to Name-v0, and the env writes into the mounted directory."""
    plugin = tmp_path / "plugin"
    plugin.mkdir()
    (plugin / "ctrplug.py").write_text(
        "import os\nfrom agentgym.envs.maze.env import MazeEnv\nfrom agentgym.registration import register\n\n"
        "class PlugMaze(MazeEnv):\n    thread_safe = True\n\n"
        "    def reset(self, *, seed=None, options=None):\n"
        "        with open(os.path.join(os.environ['PLUG_OUT'], 'resets'), 'a') as out:\n"
        "            out.write('reset\\n')\n"
        "        return super().reset(seed=seed, options=options)\n\n"
        "register(id='PlugMaze-v0', entry_point='ctrplug:PlugMaze', max_turns=5)\n")
    out = tmp_path / "out"
    out.mkdir()
    os.chmod(plugin, 0o755)
    os.chmod(out, 0o777)  # the server runs as the image's non-root user
    monkeypatch.syspath_prepend(str(plugin))  # this side imports it too (the cluster resolves the id)
    with EnvCluster("ctrplug:PlugMaze-v0", replicas=1, mounts=[str(plugin), str(out)],
                    environment={"PYTHONPATH": str(plugin), "PLUG_OUT": str(out)}) as cluster:
        assert cluster.endpoints[0].endswith("/PlugMaze-v0")
        env = RemoteEnv(cluster.endpoints[0])
        assert env.reset(seed=0)[0].startswith("Start.")
        env.close()
    assert (out / "resets").read_text() == "reset\n"


def test_a_killed_replica_gets_no_new_envs_until_it_is_replaced():
    """Envs made, or reset, while a killed replica is not yet replaced go to the live one: nothing that had not
    begun fails."""
    from agentgym.sandboxes.docker import client

    with EnvCluster("Maze-v0", replicas=2, max_sessions=8) as cluster:
        pool = EnvPool(cluster)
        victim = cluster.members[0]
        idle = [pool() for _ in range(2)]  # one on each replica, no session yet
        client().api.kill(victim.container_id)
        while cluster._running(victim):
            time.sleep(0.1)
        fresh = [pool() for _ in range(3)]
        for env in idle + fresh:
            assert env.reset(seed=0)[0].startswith("Start.")
            assert env.url != victim.endpoint
        assert victim.endpoint not in pool.live_endpoints()
        assert cluster.check() == 1 and len(pool.live_endpoints()) == 2
        for env in idle + fresh:
            env.close()


async def test_a_killed_replica_that_leaves_the_rest_full_makes_episodes_wait_not_fail_busy():
    """Two replicas of one session each, the first's container killed mid-collection and not replaced (no watch):
    only the episode it held is lost; every later episode waits for the live replica's session instead of
    failing 'every env server replica ... is at its session limit' one after another, and no slot stays counted."""
    with EnvCluster("Maze-v0", replicas=2, max_sessions=1) as cluster:
        pool = EnvPool(cluster)
        victim = cluster.members[0]
        collector = Collector(pool, killing_solver(victim, at=3), concurrency=2, env_start_timeout_s=60,
                              progress=False)
        episodes = (await collector.collect([Task(f"easy-{i}", seed=i) for i in range(8)])).episodes
        await collector.aclose()
        lost = [e for e in episodes if e.status != EpisodeStatus.COMPLETE]
        assert len(episodes) == 8 and len(lost) <= 1, [e.error for e in lost]
        assert all(e.failure == Failure.INFRA and "session limit" not in e.error for e in lost), lost[0].error
        assert sum(pool.load().values()) == 0, pool.load()
