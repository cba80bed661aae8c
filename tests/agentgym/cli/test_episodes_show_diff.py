"""`agentgym episodes show|diff`, `agentgym replay --from-turn` and `agentgym view`'s bad-input paths."""

from __future__ import annotations

import sqlite3

import pytest
from typer.testing import CliRunner

from agentgym import Episode, TrajectoryStore, Turn, make
from agentgym.cli import app
from agentgym.policy.simple import resolve_policy
from agentgym.single_episode import run_episode

runner = CliRunner()


def invoke(*args: str):
    return runner.invoke(app, list(args), catch_exceptions=False, terminal_width=160)


def rollout(store: TrajectoryStore, policy: str, *, task: str = "easy-4", seed: int = 0, turns: int = 8) -> Episode:
    env = make("Maze-v0")
    episode = run_episode(env, resolve_policy(policy, seed=seed), env_id="Maze-v0", task_id=task, seed=seed,
                          max_turns=turns, run_id="cli", group_id=f"cli:{task}")
    env.close()
    store.put(episode)
    return episode


@pytest.fixture
def db(tmp_path) -> TrajectoryStore:
    store = TrajectoryStore(tmp_path / "cli.db")
    yield store
    store.close()


def test_show_prints_turns_rewards_and_token_stats(db):
    episode = rollout(db, "solver")
    episode.turns[0].action_ids, episode.turns[0].action_logprobs = [11, 12, 13], [-0.5, -1.0, -1.5]
    episode.turns[0].loss_mask, episode.turns[0].advantage = [1, 1, 0], 0.25
    db.put(episode)
    result = invoke("episodes", "show", episode.id, "--store", db.url)
    assert result.exit_code == 0, result.output
    assert f"episode {episode.id}" in result.output
    for turn in episode.turns:
        assert turn.observation in result.output
    flat = " ".join(result.output.split())
    assert "3 tokens · mean logprob -1.000 (min -1.500) · 1 masked · advantage +0.250" in flat
    assert "complete" in flat and "total reward 1.000" in flat
    tokens = invoke("episodes", "show", episode.id, "--store", db.url, "--tokens")
    assert tokens.exit_code == 0 and "[11][12][13]" in tokens.output


def test_diff_marks_the_first_divergence_and_exits_zero(db):
    a = rollout(db, "solver")
    b_env = make("Maze-v0")
    b = run_episode(b_env, resolve_policy("solver"), env_id="Maze-v0", task_id="easy-4", seed=0, max_turns=8)
    b.turns[2].action_text = b.turns[2].action_text + " please"
    db.put(b)
    result = invoke("episodes", "diff", a.id, b.id, "--store", db.url)
    assert result.exit_code == 0, result.output
    assert "first divergence at turn 2: action_text differs" in " ".join(result.output.split())
    assert "▶" in result.output
    same = invoke("episodes", "diff", a.id, a.id, "--store", db.url)
    assert same.exit_code == 0 and "identical" in same.output


def test_diff_warns_when_the_tasks_differ(db):
    a = rollout(db, "solver", task="easy-4")
    b = rollout(db, "solver", task="easy-9")
    result = runner.invoke(app, ["episodes", "diff", a.id, b.id, "--store", db.url], terminal_width=160)
    assert result.exit_code == 0
    assert "warning" in result.stderr and "different tasks" in " ".join(result.stderr.split())
    assert "first divergence at turn 0" in " ".join(result.stdout.split())


def test_replay_from_turn_stores_a_child_episode(db):
    parent = rollout(db, "random", seed=3)
    result = invoke("replay", parent.id, "--store", db.url, "--from-turn", "2", "--policy", "solver")
    assert result.exit_code == 0, result.output
    (child,) = db.episodes(parent_id=parent.id)
    assert child.branch_turn == 2 and child.total_reward == 1.0
    assert child.id in result.output.replace("\n", "")
    plain = invoke("replay", parent.id, "--store", db.url, "-q")
    assert plain.exit_code == 0 and "replay matches" in plain.output


@pytest.mark.parametrize("args", [
    ("episodes", "show", "feedface"),
    ("episodes", "diff", "feedface", "beefcafe"),
    ("replay", "feedface", "--from-turn", "1"),
])
def test_missing_episodes_exit_2_with_one_line(db, args):
    rollout(db, "solver")
    result = runner.invoke(app, [*args, "--store", db.url])
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "no episode with id 'feedface'" in lines[0]


def test_replay_of_an_unregistered_env_exits_2_naming_it(db):
    orphan = Episode(env_id="Retired-v3", task_id="t", turns=[Turn(index=0, observation="o", action_text="a")])
    db.put(orphan)
    result = runner.invoke(app, ["replay", orphan.id, "--store", db.url, "--from-turn", "0"])
    assert result.exit_code == 2
    assert "Retired-v3" in result.stderr and "Traceback" not in result.output


@pytest.fixture
def old_store(tmp_path) -> str:
    """A store written by an older agentgym (schema version 0)."""
    path = tmp_path / "old.db"
    TrajectoryStore(path).close()
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE agentgym_meta SET value = '0' WHERE key = 'schema_version'")
    return str(path)


@pytest.mark.parametrize("args", [("view",), ("episodes", "show", "x"), ("episodes", "diff", "x", "y")])
def test_a_store_of_an_older_schema_exits_2_with_one_line(old_store, args):
    result = runner.invoke(app, [*args, "--store", old_store])
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "schema version 0" in lines[0]


def test_view_refuses_a_busy_port_in_one_line(db):
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = runner.invoke(app, ["view", "--store", db.url, "--port", str(port)])
    assert result.exit_code == 2
    assert f"cannot listen on 127.0.0.1:{port}" in result.stderr
