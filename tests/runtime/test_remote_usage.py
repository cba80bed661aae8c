"""A served env's cost and turn limit: the server reports each session's worker usage with its replies (so a
remote episode's stored cost has env CPU and memory, as a local worker's), an older server's replies without it give
None, and a step past the run's turn limit is ended by the server (worker killed, slot freed) as env_timeout.

Servers run in a thread of the test (`ServerThread`), sessions in worker processes (`env_runtime="process"`);
tests/runtime/test_env_containers.py does the same against containers. Policies are scripted (labelled).
"""

from __future__ import annotations

import json

import pytest

from agentgym.collector import Collector, Task
from agentgym.runtime import RemoteEnv
from agentgym.runtime.placement import process_factory
from agentgym.runtime.server import EnvServer, ServerThread
from agentgym.store import TrajectoryStore
from agentgym.trajectory import EpisodeStatus, Failure
from tests.helpers.usage import reported
from tests.runtime.stuck_env import StuckEnv, hang_first_policy

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def stuck_server():
    server = ServerThread("Stuck-v0", process_factory(StuckEnv, "Stuck-v0", None), max_sessions=4)
    yield server
    server.stop()


def burning(messages, env):
    """Scripted (labelled): burn CPU in the env on the first two turns, then finish."""
    return "burn" if len(messages) < 5 else "done"


async def test_a_remote_episodes_stored_cost_has_its_session_workers_cpu_and_memory(stuck_server, tmp_path):
    store = TrajectoryStore(str(tmp_path / "runs.db"))
    collector = Collector(stuck_server.url, burning, store, turn_timeout_s=30, concurrency=2, progress=False)
    episodes = (await collector.collect([Task(seed=0)], group_size=2)).episodes
    await collector.aclose()
    assert all(e.status == EpisodeStatus.COMPLETE for e in episodes)
    # how much of the burned CPU is attributed is a figure of bench/cost_accounting.py; here: it is reported
    for episode in store.get_many([e.id for e in episodes]):
        cost = episode.metadata["cost"]
        assert reported(cost["env_cpu_s"]) and reported(cost["env_peak_mb"]), cost  # a Python worker
    assert store.run_costs("")["env_cpu_s"] is not None


def test_a_server_without_usage_gives_none_and_an_old_client_ignores_it(stuck_server, monkeypatch):
    import websockets.sync.client as ws_client

    env = RemoteEnv(stuck_server.url)
    assert env.usage() == (0.0, 0.0)  # the server reports usage: nothing used before the first session
    env.reset(seed=0)
    env.step("burn")
    cpu, peak = env.usage()
    assert (cpu, peak) != (0.0, 0.0)  # reported after a burn (how much is attributed: bench/cost_accounting.py)
    # an older client: no timeout_s, reads only "result" (the extra "usage" key is just another key)
    with ws_client.connect(stuck_server.url.rsplit("/", 1)[0].replace("http", "ws", 1)
                           + f"/v1/sessions/{env._session}/ws") as ws:
        ws.send(json.dumps({"id": 1, "method": "step", "args": ["ok"], "kwargs": {}}))
        reply = json.loads(ws.recv(timeout=30))
    usage = reply["usage"]  # reported, not sized (bench/cost_accounting.py measures them)
    assert reply["result"][0] == "ok" and reported(usage["cpu_s"]) and reported(usage["peak_mb"])
    env.close()
    # an older server: no "reports_usage" in its handshake, no "usage" in its replies
    original = EnvServer.info

    def old_info(self):
        return {k: v for k, v in original(self).items() if k != "reports_usage"}

    monkeypatch.setattr(EnvServer, "info", old_info)
    old = RemoteEnv(stuck_server.url)
    old.reset(seed=0)
    old.step("burn")
    assert old.usage() is None
    old.close()


def test_an_env_in_the_servers_own_process_reports_no_usage():
    server = ServerThread("Maze-v0", lambda: __import__("agentgym").make("Maze-v0"))
    try:
        env = RemoteEnv(server.url)
        env.reset(seed=0)
        assert env.usage() is None and env.reports_usage is False
        env.close()
    finally:
        server.stop()


async def test_a_remote_step_past_the_turn_limit_is_ended_by_the_server_and_frees_its_slot(stuck_server):
    policy, hung = hang_first_policy()  # scripted (labelled)

    sessions = stuck_server.env.sessions
    collector = Collector(stuck_server.url, policy, turn_timeout_s=2, concurrency=3, progress=False)
    episodes = (await collector.collect([Task(seed=i) for i in range(3)])).episodes
    [failed] = [e for e in episodes if e.status != EpisodeStatus.COMPLETE]
    assert failed.failure == Failure.INFRA and failed.status == EpisodeStatus.TRUNCATED
    assert "did not answer step within 2 s" in failed.error and "killed" in failed.error, failed.error
    assert failed.turns[-1].info["infra_kind"] == "env_timeout"
    assert sessions.dropped == 1 and len(sessions.sessions) == 2  # the hung one's slot is free; 2 idle envs
    await collector.aclose()


def test_opening_a_session_keeps_its_own_longer_limit(stuck_server):
    env = RemoteEnv(stuck_server.url, call_timeout_s=0.5, open_timeout_s=120)  # a worker takes longer to start
    observation, _ = env.reset(seed=0)
    assert observation == "say something"
    env.close()
