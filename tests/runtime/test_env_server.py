"""The env server and `RemoteEnv` against real `agentgym envs serve` processes: the contract checks, replay,
session limits, idle timeout, malformed requests, an older client, a server killed and restarted mid-episode.

Policies are scripted (labelled): Maze-v0's built-in solver.
"""

from __future__ import annotations

import json
import threading
import time

import httpx
import pytest
from typer.testing import CliRunner

import agentgym
from agentgym.checker import check_env_contract
from agentgym.cli import app
from agentgym.collector import Collector, Task
from agentgym.errors import ConfigError, EnvInfraError
from agentgym.runtime import RemoteEnv
from agentgym.single_episode import run_episode
from agentgym.trajectory import EpisodeStatus, Failure
from tests.runtime.servers import ServedEnv, served

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def maze():
    with served("Maze-v0", "--max-sessions", "32") as server:
        yield server


def solver(messages, env):
    """Scripted policy (labelled): Maze-v0's built-in solver."""
    return env.unwrapped.solver_action()


def test_a_remote_env_passes_envs_check_and_gymnasium_check_env(maze):
    report = check_env_contract(maze.url, lambda: agentgym.make(maze.url))
    assert report.passed, [(r.name, r.detail) for r in report.failures()]
    assert {r.name for r in report.results if not r.skipped} >= {"gymnasium.check_env", "snapshot", "determinism"}
    result = CliRunner().invoke(app, ["envs", "check", maze.url, "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["passed"] is True


def test_the_handshake_carries_what_the_local_env_declares(maze):
    remote, local = agentgym.make(maze.url), agentgym.make("Maze-v0")
    assert remote.system_prompt == local.system_prompt and remote.tools() == local.tools()
    assert list(remote.task_ids()) == list(local.task_ids()) and remote.max_turns == local.max_turns
    assert remote.action_format == "tool_calls" and remote.has_solver and remote.supports_snapshot
    remote.close()


def test_a_remote_episode_replays_locally_with_no_difference(maze):
    remote = agentgym.make(maze.url)
    episode = run_episode(remote, solver, env_id=maze.url, task_id="easy-7", seed=3, max_turns=40)
    remote.close()
    assert episode.status == EpisodeStatus.COMPLETE and episode.total_reward == 1.0
    local = agentgym.make("Maze-v0")
    observation, _ = local.reset(seed=3, options={"task_id": "easy-7"})
    for turn in episode.turns:
        assert (turn.observation, turn.state_fingerprint) == (observation, local.unwrapped.state_fingerprint())
        observation, reward, terminated, truncated, info = local.step(turn.action_text)
        assert (reward, terminated, truncated) == (turn.reward, turn.terminated, turn.truncated)
        assert json.loads(json.dumps(info)) == {k: v for k, v in turn.info.items() if k != "next_observation"}


async def test_the_collector_steps_episodes_through_the_server(maze):
    collector = Collector(maze.url, solver, concurrency=8, progress=False)
    episodes = (await collector.collect([Task(f"easy-{i}", seed=i) for i in range(8)], group_size=2)).episodes
    assert len(episodes) == 16 and all(e.status == EpisodeStatus.COMPLETE and e.total_reward == 1 for e in episodes)
    assert {e.env_id for e in episodes} == {maze.url}
    await collector.aclose()


def test_the_session_limit_answers_busy_and_frees_on_close():
    with served("Maze-v0", "--max-sessions", "2") as server:
        first, second, third = (agentgym.make(server.url) for _ in range(3))
        first.reset(seed=0)
        second.reset(seed=0)
        with pytest.raises(EnvInfraError, match="busy") as raised:
            third.reset(seed=0)
        assert raised.value.kind == "busy" and "--max-sessions" in str(raised.value)
        assert httpx.get(f"{server.base}/health").json()["sessions"] == 2
        first.close()
        assert third.reset(seed=0)[0]
        second.close()
        third.close()


def test_the_state_call_reports_the_sessions_episode_without_touching_the_env(maze):
    env = agentgym.make(maze.url)
    observation, info = env.reset(seed=3, options={"task_id": "easy-3"})
    fresh = env.state()
    assert fresh["episode_started"] and fresh["task_id"] == "easy-3" and fresh["steps"] == 0
    total = 0.0
    for _ in range(2):
        _, reward, terminated, truncated, _ = env.step(env.unwrapped.solver_action())
        total += reward
    state = env.state()
    assert (state["steps"], state["terminated"], state["truncated"]) == (2, terminated, truncated)
    assert state["return"] == pytest.approx(total) and state["state_fingerprint"] == env.state_fingerprint()
    assert state["calls"] == fresh["calls"] + 5  # two solver actions, two steps and this call
    env.close()


async def test_a_pool_of_full_replicas_makes_episodes_wait_for_a_session_not_fail_busy():
    """Concurrency above the replicas' session limits: every episode completes, none meets 'busy'."""
    from agentgym.runtime.cluster import EnvPool

    with served("Maze-v0", "--max-sessions", "2") as one, served("Maze-v0", "--max-sessions", "1") as two:
        pool = EnvPool([one.url, two.url])
        assert pool.capacity() == 3  # learned from the handshakes, before any session opens
        collector = Collector(pool, solver, concurrency=8, progress=False)
        episodes = (await collector.collect([Task(f"easy-{i}", seed=i) for i in range(6)], group_size=2)).episodes
        await collector.aclose()
        assert len(episodes) == 12 and all(e.status == EpisodeStatus.COMPLETE for e in episodes), \
            [e.error for e in episodes if e.status != EpisodeStatus.COMPLETE]
        peak = pool.load(peak=True)
        assert peak[one.url] <= 2 and peak[two.url] <= 1 and sum(pool.load().values()) == 0


def test_an_idle_session_is_closed_and_the_next_reset_opens_a_new_one():
    with served("Maze-v0", "--idle-timeout", "0.5") as server:
        env = agentgym.make(server.url)
        env.reset(seed=0)
        time.sleep(2.0)
        with pytest.raises(EnvInfraError) as raised:
            env.step("up")
        assert raised.value.kind == "session_lost"
        assert env.reset(seed=0)[0] and env.step("up")[0]
        env.close()


def test_malformed_requests_get_a_clear_error_and_the_session_goes_on(maze):
    opened = httpx.post(f"{maze.base}/v1/sessions", json={"protocol": 1, "env_id": "Maze-v0"}).json()
    call = f"{maze.base}/v1/sessions/{opened['session_id']}/call"
    answer = httpx.post(call, content=b"{not json")
    assert answer.status_code == 400 and answer.json()["error"]["code"] == "bad_request"
    answer = httpx.post(call, json={"method": "__class__"})
    assert answer.status_code == 400 and answer.json()["error"]["code"] == "unknown_method"
    answer = httpx.post(call, json={"method": "step", "args": "up"})
    assert answer.status_code == 400 and answer.json()["error"]["code"] == "bad_request"
    answer = httpx.post(call, json={"method": "reset", "kwargs": {"seed": 0}})
    assert answer.status_code == 200 and answer.json()["result"][0].startswith("Start.")
    answer = httpx.post(call, json={"method": "step", "args": ["}{ not an action"]})
    assert answer.status_code == 200 and answer.json()["result"][4]["error_kind"]  # the model's error: an observation
    answer = httpx.post(f"{maze.base}/v1/sessions/nope/call", json={"method": "reset"})
    assert answer.status_code == 404 and answer.json()["error"]["code"] == "unknown_session"
    assert httpx.delete(f"{maze.base}/v1/sessions/{opened['session_id']}").status_code == 200


def test_a_client_of_an_older_protocol_version_is_refused_with_the_fix(maze):
    answer = httpx.post(f"{maze.base}/v1/sessions", json={"protocol": 0, "env_id": "Maze-v0"})
    assert answer.status_code == 426
    error = answer.json()["error"]
    assert error["code"] == "protocol_mismatch" and "same agentgym version" in error["message"]
    assert error["server_protocol"] == 1
    with pytest.raises(ConfigError, match="serves 'Maze-v0', not 'Other-v0'"):
        agentgym.make(f"{maze.base}/Other-v0")
    with pytest.raises(ConfigError, match="fixed where the server starts"):
        agentgym.make(maze.url, difficulty="hard")


def test_a_server_killed_mid_episode_is_an_infra_failure_and_a_restarted_one_serves_the_next_reset():
    server = ServedEnv("Maze-v0").start()
    try:
        env = RemoteEnv(server.url, call_timeout_s=10)
        env.reset(seed=0, options={"task_id": "easy-1"})
        env.step(env.solver_action())
        first_server = env.server_id
        server.kill()
        with pytest.raises(EnvInfraError) as raised:
            env.step("up")
        assert raised.value.kind == "connection_lost"
        with pytest.raises(EnvInfraError) as raised:
            env.reset(seed=0)
        assert raised.value.kind == "connection_refused"
        server.start()
        assert env.reset(seed=0, options={"task_id": "easy-1"})[0].startswith("Start.")
        assert env.server_id != first_server
        env.close()
    finally:
        server.stop()


def test_a_pool_that_resolves_its_endpoints_resets_an_env_onto_the_server_restarted_elsewhere():
    """Ray's env workers come back on another port: an env whose server died, idle between episodes, reads the
    endpoints again (`resolve`) at its next reset and starts the episode on the new server, with no error."""
    from agentgym.runtime.cluster import EnvPool

    first, second = ServedEnv("Maze-v0").start(), ServedEnv("Maze-v0")
    where = [first.url]
    try:
        pool = EnvPool(list(where), resolve=lambda: list(where))
        env = pool()
        env.reset(seed=0, options={"task_id": "easy-1"})
        first.kill()  # the env's session (and its open connection) died with the server, between two episodes
        second.start()
        where[:] = [second.url]
        assert env.reset(seed=0, options={"task_id": "easy-1"})[0].startswith("Start.")
        assert env.url == second.url and pool.endpoints() == [second.url]
        env.close()
        assert sum(pool.load().values()) == 0
        without = EnvPool([second.url])  # no resolve: a server that cannot be reached is the episode's infra failure
        lone = without()
        second.kill()
        with pytest.raises(EnvInfraError):
            lone.reset(seed=0)
    finally:
        first.stop()
        second.stop()


async def test_a_server_killed_during_a_collection_ends_only_the_episodes_in_flight_as_infra():
    server = ServedEnv("Maze-v0").start()
    calls = {"n": 0}

    def killing_solver(messages, env):
        """Scripted (labelled): the solver; the server is SIGKILLed at the 6th policy call."""
        calls["n"] += 1
        if calls["n"] == 6:
            server.kill()
        return env.unwrapped.solver_action() if calls["n"] < 6 else "up"

    try:
        collector = Collector(server.url, killing_solver, concurrency=2, progress=False)
        episodes = (await collector.collect([Task(f"easy-{i}", seed=i) for i in range(4)])).episodes
        await collector.aclose()
    finally:
        server.stop()
    assert episodes and all(e.failure == Failure.INFRA for e in episodes if e.status != EpisodeStatus.COMPLETE)
    lost = [e for e in episodes if e.failure == Failure.INFRA]
    assert lost and all(e.status in (EpisodeStatus.TRUNCATED, EpisodeStatus.ERROR) for e in lost)
    assert all("env server" in e.error for e in lost), [e.error for e in lost]


async def test_a_training_config_points_the_collectors_at_env_servers(maze):
    from agentgym.trainer.components import env_source

    from agentgym.config import TrainConfig
    from agentgym.runtime.cluster import EnvPool

    cfg = TrainConfig(env="Maze-v0", env_endpoints=[maze.url, maze.url])
    pool = env_source(cfg)
    assert isinstance(pool, EnvPool) and pool.endpoints() == [maze.url, maze.url]
    collector = Collector(pool, solver, concurrency=4, progress=False)
    episodes = (await collector.collect([Task(f"easy-{i}", seed=i) for i in range(4)])).episodes
    assert all(e.status == EpisodeStatus.COMPLETE for e in episodes)
    await collector.aclose()
    assert env_source(TrainConfig(env="Maze-v0")) == "Maze-v0"
    with pytest.raises(Exception, match="not an env server URL"):
        TrainConfig(env="Maze-v0", env_endpoints=["127.0.0.1:8000"])
    with pytest.raises(Exception, match="not both"):
        TrainConfig(env="Maze-v0", env_endpoints=[maze.url], env_cluster={"replicas": 2})


async def test_a_session_held_by_another_client_makes_the_episode_wait_and_then_fail_clearly():
    """The server's only session is another client's: the collector's first reset meets 'busy'. Nothing began, so
    the episode waits and asks again; it completes once the other client lets go, and fails with a message that
    says what to do only when no session comes free within env_start_timeout_s."""
    with served("Maze-v0", "--max-sessions", "1") as server:
        other = RemoteEnv(server.url)
        other.reset(seed=0)
        threading.Timer(1.5, other.close).start()
        collector = Collector(server.url, solver, concurrency=1, progress=False)
        waited = (await collector.collect([Task("easy-0", seed=0)])).episodes
        await collector.aclose()
        assert [e.status for e in waited] == [EpisodeStatus.COMPLETE], waited[0].error

        other = RemoteEnv(server.url)
        other.reset(seed=0)
        collector = Collector(server.url, solver, concurrency=1, env_start_timeout_s=1.0, progress=False)
        failed = (await collector.collect([Task("easy-0", seed=0)])).episodes
        await collector.aclose()
        other.close()
    assert failed[0].status == EpisodeStatus.ERROR and failed[0].failure == Failure.INFRA
    assert "no env session of" in failed[0].error and "start more env replicas" in failed[0].error


def test_a_server_that_dies_during_the_websocket_handshake_is_an_infra_error_naming_the_env_server(maze):
    """The session's WebSocket meets a server that closes the connection before answering (it died between opening
    the session and the handshake): an EnvInfraError that names the env server, not a websockets exception."""
    import socket

    env = RemoteEnv(maze.url)
    listener = socket.create_server(("127.0.0.1", 0))

    def close_at_once():
        conn, _ = listener.accept()
        conn.close()

    threading.Thread(target=close_at_once, daemon=True).start()
    env._base = f"http://127.0.0.1:{listener.getsockname()[1]}"  # the handshake goes to the dying server
    with pytest.raises(EnvInfraError, match="cannot open the WebSocket of session s at the env server") as caught:
        env._connect_ws("s")
    assert caught.value.kind == "connection_refused"
    listener.close()
    env.close()
