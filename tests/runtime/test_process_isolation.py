"""Envs that are not thread-safe run one per worker process: a real TextWorld game at concurrency 16, a worker
killed or hung mid-episode, and `envs check` on a free-text env.

Policies are scripted (labelled): the game's own walkthrough (`policy_commands`).
"""

from __future__ import annotations

import os
import signal

import pytest

from agentgym.checker import check_env_contract
from agentgym.collector import Collector, Task
from agentgym.runtime import ProcessEnv
from agentgym.store import TrajectoryStore
from agentgym.trajectory import EpisodeStatus, Failure

pytest.importorskip("textworld")
pytestmark = pytest.mark.timeout(300)
TEXTWORLD = "tests.runtime.textworld_env:TextWorld-v0"


@pytest.fixture(scope="module")
def game(tmp_path_factory) -> str:
    from tests.runtime.textworld_env import make_game

    return make_game(tmp_path_factory.mktemp("textworld"))


def walkthrough(messages, env):
    """Scripted policy (labelled): the next command of TextWorld's own walkthrough."""
    return env.unwrapped.solver_action()


async def test_a_non_thread_safe_text_game_runs_at_concurrency_16_in_reused_worker_processes(game, tmp_path):
    store = TrajectoryStore(f"sqlite:///{tmp_path / 'runs.db'}")
    collector = Collector(TEXTWORLD, walkthrough, store, env_kwargs={"game_file": game}, concurrency=16,
                          progress=False)
    first = await collector.collect([Task(seed=i) for i in range(16)])
    workers = {env.pid for env in collector._envs.idle}
    assert all(isinstance(env, ProcessEnv) for env in collector._envs.idle) and 1 < len(workers) <= 16
    assert all(env.action_format == "free_text" for env in collector._envs.idle)  # declared in the worker
    second = await collector.collect([Task(seed=i) for i in range(16, 20)])
    assert {env.pid for env in collector._envs.idle} <= workers  # the same processes played the next episodes
    episodes = first.episodes + second.episodes
    assert len(episodes) == 20 and store.count() == 20
    assert all(e.status == EpisodeStatus.COMPLETE and e.total_reward == 1.0 for e in episodes), \
        {e.status: e.error for e in episodes}
    assert {e.env_id for e in episodes} == {TEXTWORLD}
    await collector.aclose()
    assert not any(_alive(pid) for pid in workers)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] != "Z"


async def test_a_worker_killed_mid_episode_ends_only_its_episode_as_infra(game):
    killed: list[int] = []

    def policy(messages, env):
        """Scripted (labelled): the walkthrough, but the first episode's worker is SIGKILLed before its 2nd turn."""
        if not killed and any(m["role"] == "assistant" for m in messages):
            killed.append(env.pid)
            os.kill(env.pid, signal.SIGKILL)
            return "look"
        return env.unwrapped.solver_action()

    collector = Collector(TEXTWORLD, policy, env_kwargs={"game_file": game}, concurrency=4, progress=False)
    episodes = (await collector.collect([Task(seed=i) for i in range(4)])).episodes
    [failed] = [e for e in episodes if e.failure == Failure.INFRA]
    assert failed.status == EpisodeStatus.TRUNCATED and "died" in failed.error and "SIGKILL" in failed.error
    assert failed.turns[-1].info["infra_kind"] == "env_worker_died" and failed.turns[-1].valid
    assert sum(e.status == EpisodeStatus.COMPLETE for e in episodes) == 3
    await collector.aclose()


async def test_a_hung_worker_is_killed_at_the_turn_timeout_and_the_others_go_on():
    from tests.runtime.stuck_env import StuckEnv

    hung: list[int] = []

    def policy(messages, env):
        """Scripted (labelled): the first episode hangs its env's step, the others finish."""
        if not hung:
            hung.append(env.pid)
            return "hang"
        return "done"

    collector = Collector(StuckEnv, policy, env_runtime="process", turn_timeout_s=2, concurrency=3, progress=False)
    episodes = (await collector.collect([Task(seed=i) for i in range(3)])).episodes
    [failed] = [e for e in episodes if e.status != EpisodeStatus.COMPLETE]
    assert failed.failure == Failure.INFRA and failed.status == EpisodeStatus.TRUNCATED
    assert "did not answer step within 2 s" in failed.error and "killed" in failed.error
    assert not _alive(hung[0])
    assert sum(e.total_reward for e in episodes) == 2.0
    await collector.aclose()


def test_envs_check_passes_a_free_text_game(game):
    from tests.runtime.textworld_env import TextWorldEnv

    report = check_env_contract("TextWorld-v0", lambda: TextWorldEnv(game))
    assert report.passed, [(r.name, r.detail) for r in report.failures()]
    [malformed] = [r for r in report.results if r.name == "malformed_action"]
    assert "free text" in malformed.detail


def test_ray_env_workers_are_env_servers_that_place_envs_like_the_collector(game):
    """The Ray runtime's env worker (its actor body, driven directly here) serves its env over the env protocol
    and isolates a non-thread-safe env in a worker process per session, whose usage it reports."""
    from agentgym.trainer.ray_runtime.env_worker import EnvWorker

    from agentgym.runtime import RemoteEnv

    for env_id, kwargs, isolated in ((TEXTWORLD, {"game_file": game}, True), ("Maze-v0", {}, False)):
        worker = EnvWorker(env_id, kwargs)
        env = RemoteEnv(worker.endpoint())
        observation, _ = env.reset(seed=0)
        assert observation and env.state_fingerprint() and worker.open_envs() == 1
        [session] = worker.server.env.sessions.sessions.values()
        assert isinstance(session.env, ProcessEnv) == isolated  # thread_safe Maze stays in the actor's threads
        assert (env.usage() is not None) == isolated  # a session's worker reports its usage (the episode's cost)
        env.close()
        worker.stop()
