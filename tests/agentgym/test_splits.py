"""Task splits in the env contract: the default hash split, an env's own splits, and `envs check`."""

from __future__ import annotations

import pytest

import agentgym
from agentgym.checker import check_task_splits
from agentgym.errors import ConfigError, RegistrationError
from agentgym.registration import registry, turn_limit
from agentgym.splits import SPLITS, hash_split, task_ids
from tests.helpers.counter_env import CounterEnv
from tests.helpers.grid_env import WalkEnv


class ManyTasks(CounterEnv):
    def task_ids(self):
        return [f"target-{n}" for n in range(1, 401)]


class Overlapping(CounterEnv):
    def task_ids(self, split=None):
        ids = [f"target-{n}" for n in range(1, 6)]
        return {"train": ids[:4], "eval": ids[3:], "test": []}.get(split, ids) if split else ids


class Unstable(CounterEnv):
    flips = 0

    def task_ids(self, split=None):
        Unstable.flips += 1
        ids = [f"target-{n}" for n in range(1, 6)]
        if split is None:
            return ids
        return {"train": ids[:3] if Unstable.flips % 2 else ids[1:4], "eval": ids[4:], "test": []}[split]


def test_default_split_is_a_disjoint_cover_with_the_shares_asked_for():
    env = ManyTasks()
    parts = {s: task_ids(env, s) for s in SPLITS}
    assert sorted(sum(parts.values(), [])) == sorted(env.task_ids())
    assert len(parts["train"]) > 2 * len(parts["eval"]) > 0 and parts["test"]
    assert 0.7 < len(parts["train"]) / 400 < 0.9


def test_default_split_depends_on_the_id_not_its_position():
    env = ManyTasks()
    reversed_env = ManyTasks()
    reversed_env.task_ids = lambda: list(reversed(ManyTasks().task_ids()))
    assert set(task_ids(env, "eval")) == set(task_ids(reversed_env, "eval"))
    assert hash_split("target-7", "ManyTasks") == hash_split("target-7", "ManyTasks")


def test_an_env_states_its_own_splits():
    env = WalkEnv()
    assert task_ids(env, "eval") == env.task_ids(split="eval")
    assert task_ids(env) == env.task_ids()


def test_unknown_split_and_bad_fractions_are_refused():
    with pytest.raises(ConfigError, match="unknown task split 'dev'"):
        task_ids(ManyTasks(), "dev")
    env = ManyTasks()
    env.split_fractions = {"train": 0.9, "eval": 0.2}
    with pytest.raises(ConfigError, match="summing to 1"):
        task_ids(env, "train")


@pytest.mark.parametrize("factory, verdict, words", [
    (ManyTasks, True, "hash split"), (WalkEnv, True, "env's own"),
    (Overlapping, False, "share 1 task ids"), (Unstable, False, "differs between two instances"),
])
def test_envs_check_verifies_splits(factory, verdict, words):
    result = check_task_splits(factory)
    assert result.passed is verdict and words in result.detail


def test_register_keeps_spec_options_apart_from_constructor_arguments():
    spec = agentgym.register("SplitCounter-v0", CounterEnv, max_turns=5, kwargs={"max_turns": 9})
    try:
        env = agentgym.make("SplitCounter-v0")
        assert spec.max_turns == 5 and env.unwrapped.max_turns == 9
        assert turn_limit("SplitCounter-v0", env) == 5
        with pytest.raises(RegistrationError, match="both in kwargs= and as keyword"):
            agentgym.register("SplitCounter-v1", CounterEnv, kwargs={"width": 1}, width=2)
    finally:
        registry._specs.pop("SplitCounter-v0", None)
        registry._specs.pop("SplitCounter-v1", None)


def test_turn_limit_falls_back_to_the_instance_attribute():
    spec = agentgym.register("OwnLimit-v0", CounterEnv, kwargs={"max_turns": 7})
    try:
        env = agentgym.make(spec.id)
        assert turn_limit(spec.id, env) == 7
    finally:
        registry._specs.pop("OwnLimit-v0", None)
