"""Env cost and turn limit against a real env server container: a remote episode's stored cost has the CPU
seconds and peak memory of its session's worker process in the container, the replica reports its cgroup's
totals, and a step that hangs in the container ends at the run's turn limit as env_timeout with its slot freed.

The served env (tests/runtime/stuck_env.py, not thread-safe: a worker process per session in the container) is not
in the image: this directory is bound into the container and put on its PYTHONPATH. Policies are scripted
(labelled).
"""

from __future__ import annotations

import os
import sys

import pytest

from agentgym.collector import Collector, Task
from agentgym.runtime.cluster import EnvCluster, EnvPool
from agentgym.store import TrajectoryStore
from agentgym.trajectory import EpisodeStatus, Failure
from tests.helpers.usage import reported
from tests.runtime.stuck_env import hang_first_policy

pytestmark = [pytest.mark.docker, pytest.mark.timeout(900)]
HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture(scope="module")
def stuck_cluster():
    sys.path.insert(0, HERE)  # the host imports stuck_served too, to know the env's id
    try:
        with EnvCluster("stuck_served:Stuck-v0", replicas=1, max_sessions=4, mounts=[HERE],
                        environment={"PYTHONPATH": HERE, "PYTHONDONTWRITEBYTECODE": "1"}) as cluster:
            yield cluster
    finally:
        sys.path.remove(HERE)


def burning(messages, env):
    """Scripted (labelled): burn CPU in the env on the first two turns, then finish."""
    return "burn" if len(messages) < 5 else "done"


async def test_a_container_episodes_stored_cost_has_env_cpu_and_memory(stuck_cluster, tmp_path):
    store = TrajectoryStore(str(tmp_path / "runs.db"))
    collector = Collector(EnvPool(stuck_cluster, call_timeout_s=60), burning, store, concurrency=2, progress=False)
    episodes = (await collector.collect([Task(seed=0)], group_size=2)).episodes
    await collector.aclose()
    assert all(e.status == EpisodeStatus.COMPLETE for e in episodes), [e.error for e in episodes]
    for episode in store.get_many([e.id for e in episodes]):
        cost = episode.metadata["cost"]
        # reported (how much of the burned CPU is attributed: bench/cost_accounting.py)
        assert reported(cost["env_cpu_s"]) and reported(cost["env_peak_mb"]), cost  # a Python worker
    [replica] = stuck_cluster.usage().values()  # the whole container: the server and every worker
    assert reported(replica["cpu_s"]) and reported(replica["peak_mb"]), replica


async def test_a_step_hanging_in_the_container_ends_at_the_turn_limit_and_frees_its_session(stuck_cluster):
    import httpx

    policy, _ = hang_first_policy()  # scripted (labelled)

    collector = Collector(EnvPool(stuck_cluster, call_timeout_s=2), policy, turn_timeout_s=2, concurrency=3,
                          progress=False)
    episodes = (await collector.collect([Task(seed=i) for i in range(3)])).episodes
    await collector.aclose()
    [failed] = [e for e in episodes if e.status != EpisodeStatus.COMPLETE]
    assert failed.failure == Failure.INFRA and failed.turns[-1].info["infra_kind"] == "env_timeout"
    assert "did not answer step within 2 s" in failed.error and "killed" in failed.error, failed.error
    replica = stuck_cluster.members[0]
    transport = httpx.HTTPTransport(uds=os.path.join(replica.directory, "env.sock"))
    with httpx.Client(transport=transport, base_url="http://agentgym-env", timeout=10) as http:
        health = http.get("/health").json()
    assert health["sessions_dropped"] == 1 and health["sessions"] == 0, health  # the others closed by aclose
