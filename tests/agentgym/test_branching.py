"""Branching a stored episode at turn T: deterministic prefix replay, then a new policy plays on."""

from __future__ import annotations

import pytest

from agentgym import Episode, TrajectoryStore, make
from agentgym.branching import BranchError, BranchPlan, branch_episode
from agentgym.errors import ConfigError, UnknownEnvError
from agentgym.policy.simple import resolve_policy
from agentgym.single_episode import run_episode


def stored_random_maze(store: TrajectoryStore, *, task: str = "easy-5", seed: int = 7, turns: int = 12) -> Episode:
    env = make("Maze-v0", difficulty="mixed")
    episode = run_episode(env, resolve_policy("random", seed=seed), env_id="Maze-v0", task_id=task, seed=seed,
                          max_turns=turns, run_id="r", group_id="g")
    env.close()
    store.put(episode)
    return episode


@pytest.fixture
def store(store_url) -> TrajectoryStore:
    db = TrajectoryStore(store_url)
    yield db
    db.close()


def test_child_copies_the_prefix_and_the_solver_finishes_the_task(store):
    parent = stored_random_maze(store)
    assert parent.total_reward == 0 and parent.num_turns == 12
    child = branch_episode(store, BranchPlan(parent.id, from_turn=4, policy="solver"))
    assert (child.parent_id, child.branch_turn, child.env_id, child.task_id, child.seed) == (
        parent.id, 4, parent.env_id, parent.task_id, parent.seed)
    assert [t.to_dict() for t in child.turns[:4]] == [t.to_dict() for t in parent.turns[:4]]
    assert child.turns[4].observation == parent.turns[4].observation
    assert child.turns[4].state_fingerprint == parent.turns[4].state_fingerprint
    assert [t.index for t in child.turns] == list(range(child.num_turns))
    assert child.status == "complete" and child.total_reward == 1.0 and child.turns[-1].terminated
    assert child.metadata["branch"]["policy"] == "solver"
    stored = store.get(child.id)
    assert stored.to_dict() == child.to_dict()


def test_branch_at_turn_zero_starts_from_the_reset_observation(store):
    parent = stored_random_maze(store, turns=3)
    child = branch_episode(store, BranchPlan(parent.id, from_turn=0, policy="solver"))
    assert child.turns[0].observation == parent.turns[0].observation
    assert child.total_reward == 1.0


def test_branches_of_branches_replay_their_own_copied_prefix(store):
    parent = stored_random_maze(store)
    child = branch_episode(store, BranchPlan(parent.id, from_turn=3, policy="random", seed=5))
    grandchild = branch_episode(store, BranchPlan(child.id, from_turn=child.num_turns - 1, policy="solver"))
    assert grandchild.parent_id == child.id
    assert [t.action_text for t in grandchild.turns[:3]] == [t.action_text for t in parent.turns[:3]]


def test_a_record_the_env_no_longer_reproduces_is_refused_with_the_turn(store):
    parent = stored_random_maze(store)
    parent.turns[2].observation = "a different world"
    store.put(parent)
    with pytest.raises(BranchError, match=r"diverged at turn 2: observation"):
        branch_episode(store, BranchPlan(parent.id, from_turn=5, policy="solver"))
    assert store.count(parent_id=parent.id) == 0


def test_a_nondeterministic_env_is_caught_while_replaying(store):
    import tests.helpers.counter_env  # noqa: F401  (registers NoisyCounter-v0)

    env = make("NoisyCounter-v0")
    parent = run_episode(env, resolve_policy("solver"), env_id="NoisyCounter-v0", task_id="target-5", seed=0,
                         max_turns=8)
    store.put(parent)
    assert parent.num_turns == 5
    with pytest.raises(BranchError, match="diverged at turn 3: observation .* not deterministic"):
        branch_episode(store, BranchPlan(parent.id, from_turn=4, policy="solver"))


def test_bad_turns_policies_and_envs_are_named(store):
    parent = stored_random_maze(store, turns=4)
    with pytest.raises(BranchError, match=r"turns 0\.\.3"):
        branch_episode(store, BranchPlan(parent.id, from_turn=4, policy="solver"))
    with pytest.raises(ConfigError, match="unknown policy"):
        branch_episode(store, BranchPlan(parent.id, from_turn=1, policy="oracle"))
    orphan = Episode(env_id="Retired-v9", task_id="x", turns=[parent.turns[0]])
    store.put(orphan)
    with pytest.raises(UnknownEnvError, match="Retired-v9"):
        branch_episode(store, BranchPlan(orphan.id, from_turn=0, policy="random"))


def test_env_kwargs_come_from_the_run_config(store):
    store.log_run("grid-run", {"env_kwargs": {"view": "grid"}})
    env = make("Maze-v0", view="grid")
    parent = run_episode(env, resolve_policy("random", seed=1), env_id="Maze-v0", task_id="easy-2", seed=1,
                         max_turns=5, run_id="grid-run")
    store.put(parent)
    child = branch_episode(store, BranchPlan(parent.id, from_turn=3, policy="solver"))
    assert "Open moves:" in child.turns[3].observation
