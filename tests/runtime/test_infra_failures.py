"""Infrastructure vs model failure, end to end: a real crash mid-episode through the collector, the store and the
data manager.

The policies here are scripted (labelled): they play the env's built-in solver, except that one episode's policy
first breaks the env's backend for real (terminates its PostgreSQL sessions, SIGKILLs its MCP server process).
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa

from agentgym.collector import Collector, Task
from agentgym.credit.batch import TurnBatch
from agentgym.data import Curation, DataManager
from agentgym.store import TrajectoryStore
from agentgym.trajectory import Episode, EpisodeStatus, Failure

pytestmark = pytest.mark.timeout(300)
CRASHING_SERVER = Path(__file__).parents[1] / "envs" / "tools" / "crashing_server.py"


def terminate_reader_sessions(pg_url: str) -> int:
    """End every server process of SQL-v0's reader role on the env's database (what a DB restart does)."""
    database = sa.engine.make_url(pg_url).database
    admin = sa.create_engine(pg_url.replace("postgresql://", "postgresql+psycopg://"))
    with admin.begin() as conn:
        killed = conn.execute(sa.text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                                      "WHERE usename = 'agentgym_sql_reader' AND datname = :d"), {"d": database}).all()
    admin.dispose()
    return len(killed)


def kill_child_processes(marker: str) -> int:
    """SIGKILL this process's children whose command line contains `marker`."""
    killed = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, IndexError, ValueError):
            continue
        if ppid == os.getpid() and marker in cmdline:
            os.kill(int(entry.name), signal.SIGKILL)
            killed += 1
    return killed


def breaking_solver(breaker, at_call: int):
    """Scripted policy (labelled): the env's solver; before its `at_call`-th call it runs `breaker()`."""
    calls = {"n": 0}

    def policy(messages, env):
        calls["n"] += 1
        if calls["n"] == at_call:
            assert breaker() >= 1, "the test did not manage to break the backend"
        return env.unwrapped.solver_action()

    return policy


def assert_infra_truncated(episode: Episode, kind: str) -> None:
    assert episode.status == EpisodeStatus.TRUNCATED and episode.failure == Failure.INFRA, episode.error
    last = episode.turns[-1]
    assert last.info["infra_kind"] == kind and last.info["infra_error"] == episode.error
    assert last.valid and "error_kind" not in last.info  # the model is not blamed: the turn stays valid
    assert last.truncated


def assert_kept_out_of_training(episodes: list[Episode], failed: Episode) -> None:
    dm = DataManager(batch_groups=1, group_size=len(episodes), infra="mask",
                     curation=Curation(drop_zero_variance=False))
    for episode in episodes:
        dm.push(episode, acquired=False)
    batch = dm.pull(timeout=5)
    assert batch is not None and failed.id not in {e.id for e in batch.episodes}
    assert len(batch.episodes) == len(episodes) - 1
    rows = TurnBatch.from_episodes(batch.episodes)
    assert rows.n_turns == sum(e.num_turns for e in episodes if e.id != failed.id)
    retrying = DataManager(batch_groups=1, group_size=len(episodes), infra="retry")
    retrying.push(failed, acquired=False)
    [retry] = retrying.take_retries()
    assert retry.failed_episode_id == failed.id and retry.task_id == failed.task_id


@pytest.mark.postgres
async def test_a_killed_postgres_connection_is_an_infra_truncation_kept_out_of_the_batch(postgres_url, tmp_path):
    pg_url = sa.engine.make_url(postgres_url).set(drivername="postgresql").render_as_string(hide_password=False)
    store = TrajectoryStore(f"sqlite:///{tmp_path / 'runs.db'}")
    collector = Collector("SQL-v0", breaking_solver(lambda: terminate_reader_sessions(pg_url), at_call=2), store,
                          env_kwargs={"dialect": "postgresql", "url": pg_url, "data_dir": str(tmp_path / "sql"),
                                      "solver_explores": True},
                          progress=False, concurrency=1)
    result = await collector.collect([Task("shop-easy-0", seed=0)], group_size=3)
    await collector.aclose()
    stored = [store.get(e.id) for e in result.episodes]
    [failed] = [e for e in stored if e.failure == Failure.INFRA]
    assert_infra_truncated(failed, "database_unavailable")
    assert "unavailable" in failed.error
    others = [e for e in stored if e.id != failed.id]
    assert all(e.status == EpisodeStatus.COMPLETE and e.total_reward == 1.0 for e in others)  # fresh connections
    assert_kept_out_of_training(stored, failed)


async def test_a_killed_mcp_server_is_an_infra_truncation_kept_out_of_the_batch(tmp_path):
    pytest.importorskip("mcp")
    server = {"command": sys.executable, "args": [str(CRASHING_SERVER)], "name": "crashing"}
    store = TrajectoryStore(f"sqlite:///{tmp_path / 'runs.db'}")

    def policy(messages, env):
        """Scripted (labelled): echo once per episode, then answer; the first episode's server is SIGKILLed."""
        first_turn = not any(m["role"] == "assistant" for m in messages)
        if first_turn and policy.first:
            policy.first = False
            assert kill_child_processes(CRASHING_SERVER.name) >= 1
        if first_turn:
            return "<tool_call>" + json.dumps({"name": "echo", "arguments": {"text": "hi"}}) + "</tool_call>"
        return "FINAL ANSWER: 42"

    policy.first = True
    collector = Collector("Tools-v0", policy, store, env_kwargs={"task_sets": ["arithmetic"], "mcp_servers": [server]},
                          progress=False, concurrency=1)
    result = await collector.collect([Task("arithmetic-0", seed=0)], group_size=3)
    await collector.aclose()
    stored = [store.get(e.id) for e in result.episodes]
    [failed] = [e for e in stored if e.failure == Failure.INFRA]
    assert_infra_truncated(failed, "tool_server_crashed")
    assert "crashing" in failed.error
    assert all(e.status == EpisodeStatus.COMPLETE for e in stored if e.id != failed.id)  # a new server each
    assert_kept_out_of_training(stored, failed)
