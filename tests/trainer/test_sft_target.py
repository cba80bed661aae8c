"""`sft_target_success`: the warm start stops at the first check that reaches the target, on training tasks
no demonstration came from; a target it never reaches runs every `sft_steps` and says where it ended; a bad
target is refused when the config loads."""

from __future__ import annotations

import copy
import json

import agentgym.trainer.components as components
import agentgym.trainer.sft_target as sft_target
import pytest
import torch
from agentgym.trainer.sft import sft, warm_start_only
from agentgym.trainer.sft_target import check_tasks
from agentgym.trainer.train import train

from agentgym.config import load_train_config
from agentgym.errors import ConfigError
from tests.runtime.servers import served
from tests.trainer.test_sft import _demos, tiny  # noqa: F401 (a fixture)
from tests.trainer.test_train import toy_config


def test_a_check_stops_sft_and_the_steps_done_are_those_of_a_plain_run(tiny):  # noqa: F811
    model, tokenizer = tiny
    demos = _demos(tokenizer)
    asked: list[int] = []

    def check(steps: int) -> bool:
        asked.append(steps)
        return steps >= 4

    stopped, plain = copy.deepcopy(model), copy.deepcopy(model)
    stats = sft(stopped, demos, steps=10, lr=0.003, seed=0, batch_episodes=2, check=check, check_every=2)
    assert asked == [2, 4] and stats.steps == 4
    again = sft(plain, demos, steps=4, lr=0.003, seed=0, batch_episodes=2)
    assert stats.last_loss == again.last_loss
    for p, q in zip(stopped.parameters(), plain.parameters(), strict=True):
        torch.testing.assert_close(p, q)
    asked.clear()  # never asked at the last step: the caller checks what the warm start ended with
    assert sft(copy.deepcopy(model), demos, steps=4, lr=0.003, seed=0, check=check, check_every=2).steps == 4
    assert asked == [2]


def _warm(tmp_path, name: str, **changes) -> dict:
    cfg = load_train_config(None, toy_config(tmp_path, name=name, sft_episodes=4, sft_check_every=2,
                                             sft_check_tasks=6, **changes))
    warm_start_only(cfg)
    return json.loads((cfg.run_dir / "sft.json").read_text())


def test_a_reachable_target_stops_the_warm_start_at_the_first_check_that_reaches_it(tmp_path):
    stats = _warm(tmp_path, "reach", sft_steps=12, sft_target_success=0.01)
    # 0.01 on 6 tasks is one success: the tiny model has none before SFT and some after a few steps
    assert stats["target_reached"] is True and stats["steps"] < 12
    assert [int(s) for s, _ in stats["checks"]] == list(range(2, stats["steps"] + 1, 2))
    assert stats["checks"][-1][1] >= 0.01 and all(r < 0.01 for _, r in stats["checks"][:-1])


def test_a_target_never_reached_runs_every_step_and_records_where_it_ended(tmp_path):
    stats = _warm(tmp_path, "short", sft_steps=3, sft_target_success=1.0)
    assert stats["target_reached"] is False and stats["steps"] == 3
    assert [int(s) for s, _ in stats["checks"]] == [2, 3]  # a check every 2 steps, then the last step's
    plain = _warm(tmp_path, "plain", sft_steps=3)
    assert plain["checks"] == [] and plain["target_reached"] is None and plain["last_loss"] == stats["last_loss"]


def test_check_tasks_come_after_the_demonstrations_and_a_train_split_they_use_up_is_refused(tmp_path):
    cfg = load_train_config(None, toy_config(tmp_path, sft_steps=5, sft_episodes=4, sft_check_tasks=3,
                                             sft_target_success=0.5))
    tasks = [f"t{i}" for i in range(10)]
    assert check_tasks(cfg, tasks) == ["t4", "t5", "t6"]
    with pytest.raises(ConfigError, match="training tasks all go to sft_episodes=4"):
        check_tasks(cfg, tasks[:4])


@pytest.mark.parametrize(("changes", "message"), [
    ({"sft_steps": 0, "sft_target_success": 0.5}, "but sft_steps is 0"),
    ({"sft_steps": 5, "sft_target_success": 0.0}, "greater than 0"),
    ({"sft_steps": 5, "sft_target_success": 1.5}, "less than or equal to 1"),
    ({"sft_steps": 5, "sft_target_success": 0.5, "sft_check_every": 0}, "greater than or equal to 1"),
    ({"sft_steps": 5, "sft_target_success": 0.5, "strategy": "ddp", "world_size": 2}, "strategy: single runs"),
])
def test_a_bad_target_is_refused_when_the_config_loads(tmp_path, changes, message):
    with pytest.raises(Exception, match=message):
        load_train_config(None, toy_config(tmp_path, **changes))


def test_a_run_plays_its_checks_on_its_own_env_source(tmp_path, monkeypatch):
    """A run with env servers (or an env_cluster, which starts containers) makes one env source: the warm start's
    checks play on the pool its collectors use, before RL collects on that same pool."""
    made, real = [], components.env_source

    def counted(cfg):
        made.append(source := real(cfg))
        return source

    monkeypatch.setattr(components, "env_source", counted)
    monkeypatch.setattr(sft_target, "env_source", counted)
    with served("Maze-v0", "--max-sessions", "16") as maze:
        cfg = load_train_config(None, toy_config(tmp_path, name="pooled", env_endpoints=[maze.url], updates=1,
                                                 sft_steps=2, sft_episodes=4, sft_check_every=1, sft_check_tasks=3,
                                                 sft_target_success=1.0, tensorboard=False, plot=False))
        result = train(cfg)
    assert result.updates == 1 and len(made) == 1
    stats = json.loads((cfg.run_dir / "sft.json").read_text())
    assert [int(s) for s, _ in stats["checks"]] == [1, 2] and stats["target_reached"] is False
