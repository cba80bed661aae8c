"""SRE-v0 served from its own image (docker/sre-env/): the env server runs inside the system's container, as its
pid 1, and the model's commands run as root in the root slot. Real containers; the policy is the env's built-in
solver or a scripted attack (labelled).

Checked: `envs check` through the served container; solver episodes repair their systems; a model that kills
every process (`os.kill(-1, SIGKILL)`, past the destructive-command guard) or signals the server ends only its
own episode, attributed to the model (terminated, 0 reward, `error_kind="system_destroyed"`, status complete,
no infra failure), and the same replica serves the next episode; a killed replica is an infra failure.
"""

from __future__ import annotations

import pytest

from agentgym.checker import check_env_contract
from agentgym.runtime import RemoteEnv
from agentgym.runtime.cluster import EnvCluster
from agentgym.single_episode import run_episode
from agentgym.trajectory import EpisodeStatus, Failure
from tests.helpers.sre_play import solve, tool

pytestmark = [pytest.mark.docker, pytest.mark.timeout(1200)]
EASY = "easy/bad_credentials-app-typo/s0"


@pytest.fixture(scope="module")
def sre_cluster(docker_engine):
    with EnvCluster("SRE-v0", replicas=1) as cluster:
        yield cluster


def test_sre_v0_from_its_container_passes_envs_check_and_the_solver_repairs(sre_cluster):
    from agentgym.sandboxes.docker import client

    endpoint = sre_cluster.endpoints[0]
    host = client().api.inspect_container(sre_cluster.members[0].container_id)["HostConfig"]
    assert (host["NetworkMode"], host["ReadonlyRootfs"], host.get("Init")) == ("none", True, None)
    assert sre_cluster.members[0].max_sessions == 1  # the replica is one system: one session at a time
    report = check_env_contract(endpoint, lambda: RemoteEnv(endpoint))
    assert report.passed, [(r.name, r.detail) for r in report.failures()]
    env = RemoteEnv(endpoint)
    try:
        for task in (EASY, "hard/crashed_process-worker-KILL+wrong_config-app-db_path"):
            env.reset(seed=0, options={"task_id": task})
            reward, info = solve(env)
            assert reward == pytest.approx(1.0) and info["success"] is True, info.get("health_checks")
    finally:
        env.close()


def test_a_model_that_kills_everything_ends_its_own_episode_and_the_server_goes_on(sre_cluster):
    endpoint = sre_cluster.endpoints[0]
    attacks = iter([
        tool("run", command="python3 -c 'import os; [os.kill(1, s) for s in (15, 2, 1, 9, 19)]; print(\"sent\")'"),
        tool("run", command="python3 -c 'import os; os.kill(-1, 9)'"),
    ])

    def killer(messages, env):
        """Scripted (labelled): signal the server (pid 1), then kill every process of the container."""
        return next(attacks)

    env = RemoteEnv(endpoint)
    try:
        episode = run_episode(env, killer, env_id="SRE-v0", task_id=EASY, seed=0, max_turns=4)
        first, last = episode.turns[0], episode.turns[-1]
        assert len(episode.turns) == 2 and not first.terminated  # pid 1 ignores every signal from inside ...
        assert "sent" in last.observation  # (a turn's observation is what the model saw before acting)
        assert last.terminated and last.reward == 0.0 and last.info["error_kind"] == "system_destroyed"
        assert episode.status == EpisodeStatus.COMPLETE and episode.failure is None
        env.reset(seed=0, options={"task_id": EASY})  # the same replica, a fresh system
        assert solve(env)[0] == pytest.approx(1.0)
    finally:
        env.close()
    assert sre_cluster.check() == 0  # the container never died


def test_a_killed_replica_is_an_infra_failure(sre_cluster):
    from agentgym.sandboxes.docker import client

    def solver(messages, env):
        """Scripted (labelled): the solver; the replica's container is killed before its first action."""
        client().api.kill(sre_cluster.members[0].container_id)
        return env.unwrapped.solver_action()

    env = RemoteEnv(sre_cluster.endpoints[0])
    try:
        episode = run_episode(env, solver, env_id="SRE-v0", task_id=EASY, seed=0, max_turns=4)
    finally:
        env.close()
    assert episode.status != EpisodeStatus.COMPLETE and episode.failure == Failure.INFRA
    assert sre_cluster.check() == 1
