"""Code-v0 served from its own family image (docker/code/): the model's commands run in inline sandboxes, slots of
the env server's container under their own uids. Real containers throughout; the policy is the env's built-in
solver where one is needed (scripted, labelled).

Checked: `envs check` through the served container, solver episodes score 1.0 (hidden tests graded in another
slot), hostile actions inside the container end at most their own episode while a neighbour session on the same
replica goes on and the replica keeps serving, and a killed replica ends only its own episodes, as infra failures.
"""

from __future__ import annotations

import pytest

from agentgym.checker import check_env_contract
from agentgym.errors import EnvInfraError
from agentgym.runtime import RemoteEnv
from agentgym.runtime.cluster import EnvCluster
from tests.envs.code.test_code_fuzz import ATTACKS, run
from tests.helpers.code_env import solve

pytestmark = [pytest.mark.docker, pytest.mark.timeout(1200)]

# The fuzz cases that test the container's own isolation (the rest exercise the env's parsing, covered already)
# and what only an inline slot can try: the server's code and socket, the server process, a neighbour's files.
FAMILY_MARK = "The problem families behind Code-v0"
CONTAINER_ATTACKS = {
    **{name: ATTACKS[name] for name in ("fork_bomb", "python_fork_bomb", "rm_rf_root", "fill_tmp", "fill_memory",
                                        "infinite_loop", "network_tcp", "network_dns", "kill_everything",
                                        "submission_kills_the_grader", "submission_fork_bomb")},
    "read_server_code": run("cat $(find / -name families.py -path '*code*' 2>/dev/null) 2>&1 | head -3; "
                            "python3 -c 'import agentgym.envs.code.families' 2>&1 | tail -1; cat /srv/agentgym/* 2>&1"),
    "reach_server_socket": run("ls -la /run/agentgym 2>&1; rm -f /run/agentgym/env.sock 2>&1; python3 -c \"import "
                               "socket; s = socket.socket(socket.AF_UNIX); s.connect('/run/agentgym/env.sock'); "
                               "print('CONN' + 'ECTED')\" 2>&1 | tail -1"),
    "signal_the_server": run("kill -9 1 2>&1; pkill -9 -f agentgym.runtime 2>&1; kill -STOP $(pgrep -f "
                             "agentgym.runtime) 2>&1; echo tried"),
    "read_a_neighbour": run("ls /sandboxes/*/ 2>&1 | head; cat /sandboxes/*/solution.py 2>&1 | head -3"),
}


@pytest.fixture(scope="module")
def code_cluster(docker_engine):
    with EnvCluster("Code-v0", replicas=2, max_sessions=8, env_kwargs={"max_obs_chars": 3000}) as cluster:
        yield cluster


def test_code_v0_from_its_container_passes_envs_check_and_the_solver_scores_1(code_cluster):
    from agentgym.sandboxes.docker import client

    endpoint = code_cluster.endpoints[0]
    host = client().api.inspect_container(code_cluster.members[0].container_id)["HostConfig"]
    assert (host["NetworkMode"], host["ReadonlyRootfs"], host["Init"]) == ("none", True, True)
    assert (host["CapDrop"], sorted(host["CapAdd"])) == (["ALL"], ["SETGID", "SETUID"])
    assert host["SecurityOpt"] == ["no-new-privileges"] and not host.get("Binds", [])[1:]
    report = check_env_contract(endpoint, lambda: RemoteEnv(endpoint))
    assert report.passed, [(r.name, r.detail) for r in report.failures()]
    env = RemoteEnv(endpoint)
    try:
        assert "Your workspace is the current directory." in env.system_prompt
        for task in ("bounded_knapsack-03", "caesar-04"):
            reward, info = solve(env, task)
            assert reward == 1.0 and info["hidden_passed"] == info["hidden_total"]
    finally:
        env.close()


@pytest.mark.parametrize("attack", list(CONTAINER_ATTACKS))
def test_a_hostile_action_in_the_container_ends_at_most_its_episode(code_cluster, attack):
    endpoint = code_cluster.endpoints[0]
    env, other = RemoteEnv(endpoint), RemoteEnv(endpoint)
    try:
        other.reset(seed=1, options={"task_id": "caesar-04"})  # a neighbour session on the same replica
        other.step('<tool_call>{"name": "write_file", "arguments": {"path": "solution.py", "content": "NEIGHBOUR"}}'
                   '</tool_call>')
        env.reset(seed=0, options={"task_id": "power_sum-02"})
        obs, reward, terminated, truncated, info = env.step(CONTAINER_ATTACKS[attack])
        assert isinstance(obs, str) and obs.strip()
        if truncated:  # the model broke its own slot (killed its agent): blamed on the model, not the infra
            assert info["failure"] == "model" and info["sandbox_failure"]
        elif terminated:
            assert reward == 0.0 and all(t["status"] != "passed" for t in info["tests"])
        assert "CONNECTED" not in obs and "rc=0" not in obs and "has address" not in obs
        assert FAMILY_MARK not in obs and "NEIGHBOUR" not in obs
        neighbour, *_ = other.step(run("echo neighbour; cat solution.py"))
        assert "neighbour\nNEIGHBOUR\n[exit code 0]" in neighbour
        assert solve(env, "power_sum-02")[0] == 1.0  # the replica still serves, and grades
    finally:
        env.close()
        other.close()
    assert code_cluster.check() == 0  # no replica died


def test_a_killed_replica_ends_only_its_episodes_as_infra_failures(code_cluster):
    from agentgym.sandboxes.docker import client

    first, second = (RemoteEnv(e) for e in code_cluster.endpoints[:2])
    try:
        first.reset(seed=0, options={"task_id": "caesar-04"})
        second.reset(seed=0, options={"task_id": "caesar-04"})
        client().api.kill(code_cluster.members[0].container_id)
        with pytest.raises(EnvInfraError):
            first.step(run("echo hi"))
        alive, *_ = second.step(run("echo still here"))
        assert "still here" in alive
        assert code_cluster.check() == 1
        assert solve(RemoteEnv(code_cluster.endpoints[0]), "caesar-04")[0] == 1.0  # the replacement serves
    finally:
        first.close()
        second.close()
