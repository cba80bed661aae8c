"""Each env family served from its own image's container (built here without network) passes `envs check`;
Browser-v0 from agentgym/browser solves its tasks, and a crashed page or a killed Chromium inside the container
ends only the episode it hit. (SQL-v0 and Tools-v0 episodes: test_env_containers.py.)

Policies are scripted (labelled): the envs' built-in solvers.
"""

from __future__ import annotations

import pytest

from agentgym.checker import check_env_contract
from agentgym.errors import EnvInfraError
from agentgym.runtime import RemoteEnv
from agentgym.runtime.cluster import EnvCluster
from agentgym.single_episode import run_episode
from agentgym.trajectory import EpisodeStatus

pytestmark = [pytest.mark.docker, pytest.mark.timeout(1200)]
#: the Browser-v0 tests build agentgym/browser (Chromium's debs and Playwright, minutes on a cold CI machine)
browser_image = pytest.mark.slow

#: SIGKILLs the container's Chromium processes of one kind: "main" (the browser) or a --type= (e.g. renderer)
KILL = """
import os, signal, sys
killed = 0
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        args = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\\0", b" ").split()  # zygote children: one string
    except OSError:
        continue
    kind = next((a[7:].decode() for a in args if a.startswith(b"--type=")), "main")
    if args and args[0].endswith(b"chromium") and kind == sys.argv[1]:
        os.kill(int(pid), signal.SIGKILL)
        killed += 1
print(killed)
"""


def solver(messages, env):
    """Scripted policy (labelled): the env's built-in solver."""
    return env.unwrapped.solver_action()


@pytest.mark.parametrize(("env_id", "env_kwargs", "family"), [
    ("Maze-v0", {}, "env"),
    ("KeyDoor-v0", {}, "env"),
    ("Tools-v0", {"task_sets": ["timezones"]}, "env"),
    pytest.param("Browser-v0", {"sites": ["shop"]}, "browser", marks=browser_image),
])
def test_each_family_from_its_image_passes_envs_check(env_id, env_kwargs, family):
    with EnvCluster(env_id, env_kwargs=env_kwargs) as cluster:
        assert cluster.image.startswith(f"agentgym/{family}:")
        endpoint = cluster.endpoints[0]
        report = check_env_contract(endpoint, lambda: RemoteEnv(endpoint))
    assert report.passed, [(r.name, r.detail) for r in report.failures()]


def test_a_server_that_cannot_start_says_why_though_its_container_is_gone():
    """...and leaves no socket directory behind (a failed start used to leave its directory in the temp dir)."""
    import glob
    import os

    from agentgym.runtime.cluster import DIR_PREFIX, socket_root

    def mine() -> set[str]:
        return set(glob.glob(os.path.join(socket_root(), f"{DIR_PREFIX}{os.getpid()}-*")))

    before = mine()
    with pytest.raises(EnvInfraError, match=r"exited while starting: ConfigError: cannot make 'Maze-v0'.*no_such"):
        EnvCluster("Maze-v0", env_kwargs={"no_such": 1}, start_timeout_s=120).start()
    assert mine() <= before


@pytest.fixture(scope="module")
def browser_cluster():
    with EnvCluster("Browser-v0", env_kwargs={"sites": ["shop", "forms"]}, max_sessions=4) as cluster:
        yield cluster


def _kill_in_container(cluster, which: str) -> int:
    """How many Chromium processes of kind `which` were SIGKILLed in the cluster's first container."""
    from agentgym.sandboxes.docker import client

    api = client().api
    run = api.exec_create(cluster.members[0].container_id, ["python3", "-c", KILL, which], user="agent")
    return int(api.exec_start(run["Id"]).decode().strip().splitlines()[-1])


@browser_image
@pytest.mark.parametrize("task_id", ["shop/easy/000", "forms/medium/001"])
def test_browser_solver_rollouts_from_the_container_score_one(browser_cluster, task_id):
    env = RemoteEnv(browser_cluster.endpoints[0])
    episode = run_episode(env, solver, task_id=task_id, seed=0, max_turns=30)
    env.close()
    assert episode.status == EpisodeStatus.COMPLETE and episode.total_reward == 1.0, episode.turns[-1].info


@browser_image
@pytest.mark.parametrize(("which", "reason"), [("renderer", "page crashed"), ("main", "Browser-v0 step")])
def test_a_crashed_page_or_killed_browser_in_the_container_ends_only_that_episode(browser_cluster, which, reason):
    hit = RemoteEnv(browser_cluster.endpoints[0])
    hit.reset(seed=0, options={"task_id": "shop/easy/001"})
    assert _kill_in_container(browser_cluster, which) >= 1
    with pytest.raises(EnvInfraError, match=reason) as failure:
        for _ in range(3):  # the crash may land between two page reads: a step or two later at most
            hit.step(hit.unwrapped.solver_action())
    assert failure.value.kind == "browser_crashed"
    hit.close()
    after = RemoteEnv(browser_cluster.endpoints[0])
    episode = run_episode(after, solver, task_id="shop/easy/002", seed=0, max_turns=30)
    after.close()
    assert episode.total_reward == 1.0, episode.turns[-1].info
