"""Run configs: defaults, validation with actionable messages, every shipped YAML loads."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentgym.config import TrainConfig, config_help, load_train_config
from agentgym.credit import ESTIMATORS
from agentgym.errors import ConfigError

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def test_defaults_and_derived_fields():
    cfg = TrainConfig()
    assert cfg.episodes_per_batch == 128 and cfg.store_url.endswith("runs/run/episodes.db")
    assert not cfg.uses_critic and TrainConfig(estimator="gae").uses_critic


def test_unknown_key_names_the_closest_valid_key(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("estimater: grpo\n")
    with pytest.raises(ConfigError, match="unknown config key 'estimater'.*Did you mean 'estimator'"):
        load_train_config(path)


@pytest.mark.parametrize("overrides, match", [
    ({"estimator": "grpoo"}, "Did you mean: grpo"),
    ({"lr": -1}, "lr: .*greater than 0.*got -1"),
    ({"kl": "k3"}, "kl_coef"),
    ({"dual_clip": 0.5}, "dual_clip must be > 1"),
    ({"mode": "asynch"}, "mode:"),
    ({"backend": "openai"}, "backend_url"),
])
def test_rules_say_value_rule_and_fix(overrides, match):
    with pytest.raises(ConfigError, match=match):
        load_train_config(None, overrides)


def test_missing_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_train_config(tmp_path / "nope.yaml")


def test_every_field_is_documented():
    assert all(f.description for f in TrainConfig.model_fields.values())
    assert "estimator" in config_help()


def test_shipped_configs_load_and_open_with_their_command():
    files = sorted(CONFIGS.glob("*.yaml"))
    assert any(f.name == "quickstart.yaml" for f in files)
    seen = set()
    for f in files:
        first = f.read_text().splitlines()[0]
        assert first.startswith("# agentgym train configs/") and f.name in first, f
        seen.add(load_train_config(f).estimator)
    shipped = {n for n, e in ESTIMATORS.items() if e.fn.__module__.startswith("agentgym.")}  # not a test's own
    assert shipped - {"dr_grpo"} <= seen
