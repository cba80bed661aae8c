"""bench/credit_quality.py on a real (tiny) training run's store: it scores exactly what training computed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from agentgym.trainer.train import train

from agentgym.config import load_train_config

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.credit_quality import (  # noqa: E402
    Batch,
    gradient_sums,
    group_auc,
    loss_weights,
    oracle_labels,
    prompt_pairs,
    state_gap,
)


def test_group_auc_is_the_within_group_rank_statistic():
    adv = np.array([1.0, 0.0, -1.0, 0.5, 0.5, 2.0])
    good = np.array([True, False, False, True, False, True])
    groups = np.array([0, 0, 0, 1, 1, 1])
    total, pairs = group_auc(adv, good, groups)
    # group 0: the good turn beats both bad ones (2 of 2); group 1: one tie (0.5) and one win (1) of 2
    assert pairs == 4 and total == 2.0 + 1.5


def test_the_oracle_of_an_env_with_only_a_solver_action_is_that_action():
    """A third-party env (Counter-v0, defined outside agentgym) has `solver_action()` but no `optimal_moves()`:
    a turn is good when its action is the solver's, as text; a malformed action is bad."""
    from agentgym.single_episode import run_episode
    from tests.helpers.counter_env import CounterEnv

    script = iter(["inc", "dec", "inc", "jump!", " inc", "inc"])
    env = CounterEnv()
    episode = run_episode(env, lambda messages, env: next(script), task_id="target-3", max_turns=12)
    assert episode.total_reward == 1.0 and episode.num_turns == 6
    assert oracle_labels(CounterEnv(), episode) == [True, False, True, False, True, True]


def test_state_gap_compares_good_and_bad_turns_of_one_state_only():
    adv = np.array([1.0, -1.0, 5.0, 3.0, 0.0])
    good = np.array([True, False, True, True, True])
    states = np.array([0, 0, 1, 1, 2])  # states 1 and 2 hold no bad turn: nothing to compare there
    total, weight = state_gap(adv, good, states)
    assert weight == 0.5 and total == 0.5 * 2.0


def test_turns_that_share_a_prompt_and_an_action_are_one_gradient_weighted_as_the_loss_weighs_them():
    """Two episodes (of 2 and 4 turns) take `up` at the same observation "A": under `keep_turns: 0` their
    gradients are one, and the update moves it by the sum of their advantages, each weighted by the share of its
    episode's tokens (`seq-mean-token-mean`). With the whole history kept, the second turns differ by what came
    before and stay apart."""
    from agentgym import Episode, Turn

    def episode(steps: list[tuple[str, str]]) -> Episode:
        return Episode(group_id="g", turns=[Turn(index=i, observation=o, action_text=a, action_ids=[len(a.strip())])
                                            for i, (o, a) in enumerate(steps)])

    eps = [episode([("A", "up"), ("B", "left")]),
           episode([("C", "down"), ("A", " up"), ("B", "left"), ("D", "right")])]
    good = np.array([True, False, True, True, True, True])
    pairs = prompt_pairs(eps, good, keep_turns=0)
    assert pairs[0] == pairs[3] and pairs[1] != pairs[4]  # B/left: one good, one bad by the oracle: apart
    assert len(set(prompt_pairs(eps, good, keep_turns=None).tolist())) == 6
    assert prompt_pairs(eps, good, keep_turns=1)[0] != prompt_pairs(eps, good, keep_turns=1)[3]  # C, down came first
    weights = loss_weights(eps, "seq-mean-token-mean")
    assert np.allclose(weights, [0.5, 0.5, 0.25, 0.25, 0.25, 0.25])
    assert np.allclose(loss_weights(eps, "token-mean"), 1.0)
    batch = Batch(0, eps, good, np.full(6, np.nan), pairs, weights)
    sums, label = gradient_sums(np.array([1.0, -1.0, 0.0, -2.0, 4.0, 0.0]), batch)
    assert sums[pairs[0]] == 0.5 * 1.0 + 0.25 * -2.0 == 0.0 and label[pairs[0]]  # the two pushes cancel
    assert sums[pairs[4]] == 1.0 and label[pairs[4]] and sums[pairs[1]] == -0.5 and not label[pairs[1]]


def test_the_bench_recomputes_the_runs_own_advantages_and_scores_every_estimator(tmp_path):
    cfg = load_train_config(ROOT / "configs" / "keydoor.yaml", {
        "output_dir": str(tmp_path / "run"), "updates": 2, "groups_per_batch": 2, "group_size": 4,
        "sft_steps": 4, "sft_episodes": 2, "eval_tasks": 0, "eval_every": 0, "checkpoint_every": 0,
        "torch_threads": 1, "tensorboard": False, "plot": False, "drop_zero_variance": False, "concurrency": 8})
    train(cfg)
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "credit_quality.py"), cfg.store_url,
                           "--estimators", "trained,gigpo,gigpo.step,grpo;gigpo:omega=0.5,gamma=0.8", "--json"],
                          capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    data = json.loads(done.stdout)
    assert data["env"] == "KeyDoor-v0" and data["updates"] == 2 and data["episodes"] == 16
    assert 0.0 <= data["good_share"] <= 1.0 and 0.0 <= data["mixed_action_share"] <= 1.0
    rows = data["estimators"]
    assert set(rows) == {"trained", "gigpo", "gigpo.step", "grpo", "gigpo:omega=0.5,gamma=0.8"}
    # recomputing the run's estimator with the run's parameters gives what the run trained on
    for key in ("auc", "state_auc", "state_sep", "right_mass", "grad_right", "grad_push", "good_mean", "bad_mean",
                "adv_std"):
        assert rows["trained"][key] == pytest.approx(rows["gigpo"][key], abs=1e-9), key
    for row in rows.values():
        assert len(row["auc_per_update"]) == 2
        assert row["right_mass"] is None or 0.0 <= row["right_mass"] <= 1.0
        assert row["grad_right"] is None or 0.0 <= row["grad_right"] <= 1.0
        assert row["grad_push"] is None or -1.0 <= row["grad_push"] <= 1.0


def test_a_store_without_a_training_run_is_refused_with_what_to_do(tmp_path):
    from agentgym.store import TrajectoryStore

    url = f"sqlite:///{tmp_path / 'empty.db'}"
    TrajectoryStore(url).close()
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "credit_quality.py"), url],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 2 and "pick one training run with --run" in done.stderr
