"""What training computed is written back to the store; the loop's guard rails (no signal, estimator registry)."""

from __future__ import annotations

import json

import pytest
import sqlalchemy as sa
from agentgym.trainer.train import train

from agentgym.config import load_train_config
from agentgym.errors import ConfigError
from agentgym.store import TrajectoryStore, turn_credit_table, turns_table

TOY = dict(env="Maze-v0", env_kwargs={"difficulty": "open"}, max_turns=4, chat_tools=False, torch_threads=1,
           groups_per_batch=2, group_size=4, concurrency=8, max_new_tokens=4, tensorboard=False, plot=False,
           train_tasks=20, checkpoint_every=0)


def run(tmp_path, **changes):
    cfg = load_train_config(None, {**TOY, "output_dir": str(tmp_path), **changes})
    return cfg, train(cfg)


def test_every_trained_turn_has_its_gigpo_credit_in_the_store(tmp_path):
    cfg, result = run(tmp_path, name="wb", estimator="gigpo", updates=2, drop_zero_variance=True, mini_batches=2,
                      ppo_epochs=2, max_turns=8, sft_steps=30, sft_episodes=8)
    assert result.updates == 2
    store = TrajectoryStore(cfg.store_url)
    trained = (cfg.run_dir / "trained.jsonl").read_text().splitlines()
    trained_ids = [i for line in trained for i in json.loads(line)["episode_ids"]]
    credit = store.credit(trained_ids)
    for episode in store.get_many(trained_ids):
        rows = credit[episode.id]
        assert [r["index"] for r in rows] == [t.index for t in episode.turns]
        assert all(t.advantage is not None for t in episode.turns)
        for turn, r in zip(episode.turns, rows, strict=True):
            assert not r["dropped"] and r["estimator"] == "gigpo" and r["update"] in (1, 2)
            assert r["policy_version"] == r["update"] - 1
            assert r["advantage"] == pytest.approx(turn.advantage)
            assert r["advantage"] == pytest.approx(r["episode_part"] + r["step_part"])  # omega = 1
            assert r["step_group_size"] >= 1
    with store.engine.connect() as conn:
        untrained = conn.execute(sa.select(sa.func.count()).select_from(turns_table).where(
            turns_table.c.advantage.is_not(None), turns_table.c.episode_id.not_in(trained_ids))).scalar_one()
        dropped = conn.execute(sa.select(turn_credit_table.c.episode_id, turn_credit_table.c.drop_reason).where(
            turn_credit_table.c.dropped)).all()
    assert untrained == 0  # dropped episodes keep a NULL advantage ...
    assert not {e for e, _ in dropped} & set(trained_ids)  # ... and are recorded as dropped, with the reason
    assert {reason for _, reason in dropped} <= {"zero_variance", "infra", "stale", "no_success"}


def test_critic_estimators_store_returns_and_values(tmp_path):
    cfg, _ = run(tmp_path, name="gae", estimator="gae", updates=1, drop_zero_variance=False)
    store = TrajectoryStore(cfg.store_url)
    ids = [e["id"] for e in store.summaries(run_id="gae")]
    rows = [r for rs in store.credit(ids).values() for r in rs]
    assert rows and all(r["return_"] is not None and r["value"] is not None for r in rows)


def test_a_run_without_learning_signal_warns_and_stops(tmp_path, capsys):
    # one rollout per group: every group has zero variance, curation drops them all
    cfg, result = run(tmp_path, name="nosignal", group_size=1, updates=3, drop_zero_variance=True,
                      max_refill_rounds=1, stop_without_signal=2)
    assert result.stopped_by == "no_signal" and result.updates == 0
    out = capsys.readouterr().out
    assert "no learning signal for 1 round" in out and "no learning signal for 2 rounds" in out


def test_estimators_are_checked_against_the_registry_at_config_load():
    with pytest.raises(ConfigError, match="Did you mean: gigpo"):
        load_train_config(None, {"estimator": "gipgo"})
    with pytest.raises(ConfigError, match="no parameter 'omeag'. Did you mean: omega"):
        load_train_config(None, {"estimator": "gigpo", "estimator_params": {"omeag": 1.0}})
    with pytest.raises(ConfigError, match="gamma=2"):
        load_train_config(None, {"estimator": "gigpo", "estimator_params": {"gamma": 2}})
    with pytest.raises(ConfigError, match="no parameter 'scal'"):
        load_train_config(None, {"estimator": "tests.helpers.user_estimator:sign", "estimator_params": {"scal": 1}})


def test_a_user_registered_estimator_trains(tmp_path):
    cfg, result = run(tmp_path, name="user", estimator="tests.helpers.user_estimator:sign",
                      estimator_params={"scale": 0.5}, updates=1, drop_zero_variance=False)
    assert result.updates == 1
    store = TrajectoryStore(cfg.store_url)
    rows = [r for rs in store.credit([e["id"] for e in store.summaries(run_id="user")]).values() for r in rs]
    assert rows and {r["estimator"] for r in rows} == {"sign"}
    assert {abs(r["advantage"]) for r in rows} <= {0.0, 0.5}


@pytest.mark.parametrize("layout", ["padded", "packed"])
def test_mini_batches_are_reshuffled_every_epoch(tmp_path, monkeypatch, layout):
    from agentgym.trainer.update import PolicyUpdater

    seen: list[list[str]] = []
    original = PolicyUpdater._mini_batch

    def spy(self, batches, lp_old, lp_ref, *rest):
        seen.append(sorted(e for b in batches for e in b.episode_ids))
        for b, old in zip(batches, lp_old, strict=True):  # lp_old is laid out like the batch it goes with
            assert old.shape == b.loss_mask.shape
            assert bool(((old != 0) <= (b.loss_mask > 0)).all())
        return original(self, batches, lp_old, lp_ref, *rest)

    monkeypatch.setattr(PolicyUpdater, "_mini_batch", spy)
    run(tmp_path, name="shuffle", updates=1, ppo_epochs=3, mini_batches=2, drop_zero_variance=False,
        groups_per_batch=4, layout=layout)
    epochs = [seen[i:i + 2] for i in range(0, 6, 2)]
    assert all(sorted(a + b) == sorted(epochs[0][0] + epochs[0][1]) for a, b in epochs)  # each epoch sees all
    assert len({tuple(e[0]) for e in epochs}) > 1  # ... in a different split


def test_credit_diagnostics_are_logged_per_update(tmp_path):
    cfg, _ = run(tmp_path, name="diag", estimator="gigpo", updates=1, drop_zero_variance=False)
    (row,) = [json.loads(line) for line in (cfg.run_dir / "metrics.jsonl").read_text().splitlines()]
    for key in ("adv_mean", "adv_std", "adv_abs_max", "adv_token_mean", "episode_abs_max", "step_abs_max",
                "step_singleton_frac", "repeat_noop_frac", "invalid_frac", "dropped_share", "zero_variance_share"):
        assert f"credit/{key}" in row, key
    assert 0.0 <= row["credit/step_singleton_frac"] <= 1.0 and 0.0 <= row["credit/repeat_noop_frac"] <= 1.0
    assert row["approx_kl_old"] >= 0.0
    from fastapi.testclient import TestClient

    from agentgym.viewer.app import create_app

    html = TestClient(create_app(TrajectoryStore(cfg.store_url))).get("/runs/diag").text
    assert "Credit assignment diagnostics" in html and "credit/step_singleton_frac" in html


def test_credit_model_params_are_checked_at_config_load():
    with pytest.raises(ConfigError, match="no parameter 'warmup'. Did you mean: warmup_steps"):
        load_train_config(None, {"estimator": "spa", "credit_model_params": {"warmup": 5}})
    with pytest.raises(ConfigError, match="has no learned credit model"):
        load_train_config(None, {"estimator": "grpo", "credit_model_params": {"lr": 1e-3}})
    assert load_train_config(None, {"estimator": "oprl", "credit_model_params": {"beta": 0.05}}).estimator == "oprl"


def test_the_no_signal_warning_advises_by_what_dropped_most():
    from agentgym.trainer.signal_watch import advice

    assert "infrastructure failures" in advice({"infra": 62, "stale": 4, "zero_variance": 3})
    assert "staleness_bound" in advice({"stale": 9, "zero_variance": 1})
    assert "drop_zero_variance: false" in advice({"zero_variance": 5})
    assert advice({}) == advice({"zero_variance": 5})
