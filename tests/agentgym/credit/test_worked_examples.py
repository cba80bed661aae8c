"""The estimators' worked examples (docs/algorithms.md, section 2, and hand-computed cases) reproduced to 1e-6."""

from __future__ import annotations

import math

import numpy as np
import pytest

from agentgym import Episode, Turn
from agentgym.credit import BranchRequest, TraceAllocator, compute_advantages, compute_credit
from agentgym.credit.oprl import implicit_step_rewards, prm_loss
from agentgym.credit.spa import progress_loss
from agentgym.credit.stats import informativeness
from tests.helpers.table_predictor import TablePredictor

TOL = 1e-6


def close(actual, expected, tol=TOL):
    return np.allclose(np.asarray(actual, dtype=float), np.asarray(expected, dtype=float), atol=tol, rtol=0)


def flat(rows):
    return [v for row in rows for v in row]


# ---- section 1: GiGPO -------------------------------------------------------------------------
def gigpo_group() -> list[Episode]:
    """Example B's trajectories: anchors per turn, reward 1 on success at the final step."""
    spec = [("AB", [0, 1]), ("ACB", [0, 0, 1]), ("ACE", [0, 0, 0]), ("AD", [0, 0])]
    return [Episode(group_id="g", turns=[Turn(index=i, state_fingerprint=a, reward=float(r))
                                         for i, (a, r) in enumerate(zip(anchors, rewards, strict=True))]).finish()
            for anchors, rewards in spec]


def test_gigpo_example_a_agentgym_defaults():
    result = compute_credit("gigpo", gigpo_group())
    split = result.batch.split
    assert close(flat(split(result.episode_part)), [0.866024] * 5 + [-0.866024] * 5)
    assert close(flat(split(result.step_part)),
                 [0.909837, 0, 0.821073, 0.707106, 0, -0.865455, -0.707106, 0, -0.865455, 0])
    assert close(flat(result.per_episode()),
                 [1.775861, 0.866024, 1.687097, 1.573130, 0.866024, -1.731479, -1.573130, -0.866024,
                  -1.731479, -0.866024])


def test_gigpo_example_b_reference_parity():
    result = compute_credit("gigpo", gigpo_group(), norm="mean", episode_stats="rows", omega=1.0)
    assert close(flat(result.batch.split(result.episode_part)), [0.5] * 5 + [-0.5] * 5)
    assert close(flat(result.batch.split(result.step_part)),
                 [0.486875, 0, 0.439375, 0.475, 0, -0.463125, -0.475, 0, -0.463125, 0])
    assert close(flat(result.per_episode()),
                 [0.986875, 0.5, 0.939375, 0.975, 0.5, -0.963125, -0.975, -0.5, -0.963125, -0.5])


def test_gigpo_example_b_check_values_with_std_norm():
    rows = compute_credit("gigpo", gigpo_group(), norm="std", episode_stats="rows")
    traj = compute_credit("gigpo", gigpo_group(), norm="std", episode_stats="trajectory")
    assert close(rows.step_part[0], 0.909837)  # cluster A std 0.535122
    assert close(rows.step_part[[3, 6]], [0.707106, -0.707106])  # cluster C
    assert close(np.abs(rows.episode_part), 0.948681)  # row statistics, sigma = 0.527046
    assert close(np.abs(traj.episode_part), 0.866024)  # trajectory statistics
    assert close(np.std([1, 1, 1, 1, 1, 0, 0, 0, 0, 0], ddof=1), 0.527046)
    assert close(np.std([0.95, 0.9025, 0, 0], ddof=1), 0.535122)


def test_gigpo_step_returns_discount_backward():
    ep = Episode(group_id="g", turns=[Turn(index=i, state_fingerprint=f"s{i}", reward=r)
                                      for i, r in enumerate([0.0, 0.0, 1.0])]).finish()
    twin = Episode(group_id="g", turns=[Turn(index=0, state_fingerprint="s0")]).finish()
    result = compute_credit("gigpo", [ep, twin], norm="mean")
    # cluster s0 = {G_0 = 0.9025, 0}: mean-normalised step advantage is +-0.45125
    assert close(result.step_part[[0, 3]], [0.45125, -0.45125])


# ---- section 2: SPA ---------------------------------------------------------------------------
def test_spa_example():
    ep = Episode(group_id="g", total_reward=1.0, turns=[
        Turn(index=0), Turn(index=1, info={"error_kind": "no_effect"}), Turn(index=2)])
    assert close(progress_loss([1.0], [[0.2, 0.5, 0.4]]), 0.01)
    result = compute_credit("spa", [ep], contributions=[[0.2, 0.5, 0.4]], values=[[0.6, 0.7, 0.8]],
                            alpha=1.0, beta=0.5, gamma=1.0, lam=0.95, grounding_mode="bonus", whiten=False,
                            outcome_residual=False)
    assert close(result.turn_rewards, [0.7, 0.5, 0.9])
    assert close(result.advantages, [1.46025, 0.695, 0.1])
    assert close(result.returns, [2.06025, 1.395, 0.9])
    assert close(flat(result.returns_per_episode()), [2.06025, 1.395, 0.9])


def test_spa_rewards_add_up_to_the_outcome_whatever_the_estimator_learned():
    # two episodes of one task, the success and the failure given the same (wrong) contributions: without the
    # residual their rewards are equal and SPA cannot tell them apart; with it each adds up to its own outcome
    eps = [Episode(group_id="g", total_reward=r, turns=[Turn(index=i) for i in range(3)]) for r in (1.0, 0.0)]
    kw = dict(contributions=[[0.1, 0.1, 0.1]] * 2, values=[[0.0] * 3] * 2, beta=0.0, whiten=False)
    paper = compute_credit("spa", eps, outcome_residual=False, **kw)
    assert close(paper.turn_rewards[:3], paper.turn_rewards[3:])
    result = compute_credit("spa", eps, **kw)
    assert close(result.turn_rewards, [0.1, 0.1, 0.8, 0.1, 0.1, -0.2])
    assert close(result.turn_rewards[:3].sum(), 1.0) and close(result.turn_rewards[3:].sum(), 0.0)
    # gamma = lam = 1: the return of turn t is R minus the contributions before t (the history's, not the action's)
    exact = compute_credit("spa", eps, gamma=1.0, lam=1.0, **kw)
    assert close(exact.returns, [1.0, 0.9, 0.8, 0.0, -0.1, -0.2])


def test_spa_defaults_penalise_ungrounded_turns_and_whiten():
    ep = Episode(group_id="g", total_reward=1.0, turns=[
        Turn(index=0), Turn(index=1, info={"error_kind": "no_effect"}), Turn(index=2)])
    result = compute_credit("spa", [ep], contributions=[[0.2, 0.5, 0.4]], values=[[0.6, 0.7, 0.8]])
    # a valid turn earns nothing for being valid, -0.1 if not; the last turn also carries R - sum c = 1 - 1.1
    assert close(result.turn_rewards, [0.2, 0.4, 0.3])
    assert close(result.advantages.mean(), 0.0) and close(result.advantages.std(), 1.0, tol=1e-5)


def test_turn_level_gae_is_the_same_recursion():
    ep = Episode(group_id="g", turns=[Turn(index=i, reward=r) for i, r in enumerate([0.7, 0.5, 0.9])]).finish()
    result = compute_credit("gae", [ep], values=[[0.6, 0.7, 0.8]], gamma=1.0, lam=0.95)
    assert close(result.advantages, [1.46025, 0.695, 0.1])
    assert close(result.returns, [2.06025, 1.395, 0.9])


# ---- section 3: OPRL --------------------------------------------------------------------------
def test_oprl_prm_loss_and_step_reward():
    assert close(prm_loss([1.0], [-0.5], beta=0.1), 0.620957)
    assert close(-math.log(1 / (1 + math.exp(-0.15))), 0.620957)
    rewards = implicit_step_rewards([[[-1.0, -0.5, -2.0]]], [[[-1.2, -0.5, -2.5]]], beta=0.1)
    assert close(rewards, [[0.07]])


def test_oprl_advantages():
    eps = [Episode(group_id="g", total_reward=r, turns=[Turn(index=i) for i in range(3)]) for r in (1.0, 0.0)]
    step = [[0.07, -0.02, 0.05], [-0.03, 0.01, -0.03]]
    result = compute_credit("oprl", eps, step_rewards=step, alpha=1.0, step_gate="none")  # as reconstructed
    assert close(result.episode_part, [0.707106] * 3 + [-0.707106] * 3)
    assert close(np.mean(flat(step)), 0.008333) and close(np.std(flat(step), ddof=1), 0.043089)
    assert close(result.step_part[0], 1.431111)
    assert close(result.advantages[0], 2.138217)


# ---- section 4: TRACE -------------------------------------------------------------------------
def trace_tree() -> list[Episode]:
    def ep(eid, outcome, n, parent=None, k=None):
        first = k or 0
        return Episode(id=eid, group_id="x", task_id="x", total_reward=outcome, parent_id=parent, branch_turn=k,
                       turns=[Turn(index=first + i, state_fingerprint=f"{eid}{i}") for i in range(n)])

    return [ep("t1", 1, 3), ep("t2", 0, 3), ep("t3", 0, 3), ep("t4", 0, 2),
            ep("c1", 1, 2, "t2", 1), ep("c2", 0, 2, "t2", 1)]


def test_trace_tree_advantages():
    adv = dict(zip(["t1", "t2", "t3", "t4", "c1", "c2"], compute_advantages("trace", trace_tree()), strict=True))
    third = 1 / 3
    assert close(adv["t1"], [2 * third] * 3)
    assert close(adv["t2"], [0.0, -third, -third])  # turn 1 is root -> u, later turns u -> leaf
    assert close(adv["c1"], [2 * third] * 2)
    assert close(adv["c2"], [-third] * 2)
    assert close(adv["t3"], [-third] * 3) and close(adv["t4"], [-third] * 2)


def test_trace_mixed_outcome_informativeness():
    assert close(informativeness(0.5, 2), 0.5)
    assert close(informativeness(0.5, 4), 0.875)
    assert close(informativeness(0.3, 2), 2 * 0.3 * 0.7)


def test_trace_allocation_example_branches_the_most_mixed_prefix():
    roots = trace_tree()[:4]
    for ep in roots:
        ep.turns[-1].terminated = True
    # p_hat of "t2 after turn 1" = 0.5 (score 0.25), "t3 after turn 2" = 0.1 (score 0.09); others certain
    allocator = TraceAllocator(TablePredictor({"t21": 0.5, "t32": 0.1}), k=2)
    plan = allocator.plan(roots, budget=2)
    assert plan == [BranchRequest("t2", 1, 2, "x", 0.5, 0.5)]
    assert close(0.5 * 0.5, 0.25) and close(0.1 * 0.9, 0.09)


# ---- section 8: baselines ---------------------------------------------------------------------
@pytest.mark.parametrize("name, expected", [("grpo", 0.866024), ("dr_grpo", 0.5), ("rloo", 0.666667)])
def test_baselines(name, expected):
    eps = [Episode(group_id="g", total_reward=r, turns=[Turn(index=0), Turn(index=1)]) for r in (1, 0, 0, 1)]
    adv = compute_advantages(name, eps)
    assert close(flat(adv), [expected] * 2 + [-expected] * 4 + [expected] * 2)
