"""Bring your own env to a training run: a recipe trains a third-party env with no edits.

The env (tests/helpers/grid_env.py, the shape docs/train-your-own-env.md walks through) defines its
own splits, its own turn limit and a solver. Runs use the real CLI, the tiny model and a real store.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agentgym.cli import app
from agentgym.config import load_train_config
from agentgym.env_facts import resolve_run_env
from agentgym.errors import ConfigError
from agentgym.store import TrajectoryStore
from tests.helpers.grid_env import WalkEnv

ROOT = Path(__file__).resolve().parents[2]
WALK = "tests.helpers.grid_env:Walk-v0"
RECIPES = sorted(p for p in (ROOT / "configs").glob("*.yaml") if not p.name.startswith("gpu-"))
SMALL = ["--set", "updates=1", "--set", "groups_per_batch=2", "--set", "group_size=2", "--set", "sft_steps=2",
         "--set", "sft_episodes=2", "--set", "eval_every=1", "--set", "concurrency=4", "--set", "torch_threads=1",
         "--set", "tensorboard=false", "--set", "plot=false", "--set", "drop_zero_variance=false"]


def _no_model(monkeypatch):
    """Fail the test if any model is built (the checks must come first)."""
    import agentgym.trainer.model as model

    def refuse(*args, **kwargs):
        raise AssertionError("a model was built before the config was refused")

    monkeypatch.setattr(model, "build_model", refuse)
    monkeypatch.setattr("agentgym.trainer.components.build_model", refuse, raising=False)


def test_a_recipe_trains_a_new_env_with_its_own_turn_limit_and_eval_split(tmp_path):
    result = CliRunner().invoke(app, ["train", str(ROOT / "configs/gigpo.yaml"), "--env", WALK,
                                      "--set", f"output_dir={tmp_path}", *SMALL])
    assert result.exit_code == 0, result.output
    store = TrajectoryStore(str(tmp_path / "gigpo" / "episodes.db"))
    run = next(r for r in store.runs() if r["id"] == "gigpo")
    config = run["config"]
    assert config["env"] == WALK and config["env_kwargs"] == {}  # the recipe's maze arguments were dropped
    assert config["max_turns"] == 12 == config["env_turn_limit"]  # the env's registered limit, not a trainer default
    assert config["held_out_tasks"] == WalkEnv().task_ids(split="eval")
    episodes = list(store.iter_episodes(run_id="gigpo"))
    assert episodes and all(e.task_id in WalkEnv().task_ids(split="train") for e in episodes)
    rows = [json.loads(line) for line in (tmp_path / "gigpo" / "metrics.jsonl").read_text().splitlines()]
    assert 0 <= rows[-1]["eval_success_low"] <= rows[-1]["eval_success_rate"] <= rows[-1]["eval_success_high"] <= 1


@pytest.mark.parametrize("extra, words", [
    (["--env", "Nope-v0"], "no env registered with id 'Nope-v0'"),
    (["--env", "Mze-v0"], "Did you mean: Maze-v0"),
    (["--env-kwargs", '{"difficulty": "impossible"}'], "difficulty must be one of"),
    (["--env-kwargs", '{"colour": 3}'], "unexpected keyword argument 'colour'"),
    (["--env", WALK, "--set", "eval_tasks=50"], "only 6 tasks in its 'eval' split"),
])
def test_a_bad_env_is_refused_before_any_model_is_built(tmp_path, monkeypatch, extra, words):
    _no_model(monkeypatch)
    result = CliRunner().invoke(app, ["train", str(ROOT / "configs/grpo.yaml"), "--set", f"output_dir={tmp_path}",
                                      *extra])
    assert result.exit_code != 0
    assert words in " ".join(result.output.split())


def test_actions_that_do_not_fit_max_new_tokens_are_refused_with_the_count_needed(tmp_path):
    cfg, facts = resolve_run_env(load_train_config(ROOT / "configs/grpo.yaml", {
        "output_dir": str(tmp_path), "max_new_tokens": 2, "sft_steps": 0}))
    from agentgym.trainer.train import train

    with pytest.raises(ConfigError, match=r"takes \d+ tokens plus the stop token .*at least \d+"):
        train(cfg, facts=facts)


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: p.stem)
@pytest.mark.parametrize("env", [WALK, "Tools-v0", "Maze-v0"])
def test_every_recipe_loads_for_every_env(recipe, env):
    cfg, facts = resolve_run_env(load_train_config(recipe, {"env": env}))
    assert cfg.env == env and cfg.max_turns == facts.turn_limit or cfg.max_turns is not None


def test_demonstrations_longer_than_the_limit_are_reported(tmp_path):
    result = CliRunner().invoke(app, ["train", str(ROOT / "configs/grpo.yaml"), "--env", "Maze-v0",
                                      "--env-kwargs", '{"difficulty": "open"}', *SMALL, "--set", "max_turns=5",
                                      "--set", f"output_dir={tmp_path}", "--set", "sft_episodes=8"])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "solver demonstrations need more than max_turns=5 turns" in text


def test_generations_cut_at_max_new_tokens_are_counted(tmp_path):
    """Counter-v0 has no valid_actions(), so nothing refuses max_new_tokens=1; the cut turns are counted."""
    result = CliRunner().invoke(app, ["train", str(ROOT / "configs/grpo.yaml"), "--env",
                                      "tests.helpers.counter_env:Counter-v0", *SMALL, "--set", "max_new_tokens=1",
                                      "--set", "sft_steps=0", "--set", "eval_tasks=0", "--set", f"output_dir={tmp_path}"])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in (tmp_path / "grpo" / "metrics.jsonl").read_text().splitlines()]
    assert rows and rows[-1]["capped_turns"] > 0


def test_a_time_limit_that_bites_is_reported(tmp_path):
    result = CliRunner().invoke(app, ["train", str(ROOT / "configs/grpo.yaml"), "--env", WALK, *SMALL,
                                      "--set", "updates=50", "--set", "time_limit_s=0.001", "--set", "eval_tasks=0",
                                      "--set", f"output_dir={tmp_path}"])
    assert result.exit_code == 0, result.output
    assert "not comparable" in " ".join(result.output.split())
