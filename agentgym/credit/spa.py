"""SPA-RL: stepwise progress attribution (docs/algorithms.md, section 2.4).

A learned progress estimator (`agentgym.credit.learned.ProgressEstimator`) predicts a contribution
`c_t` per turn whose sum approximates the outcome R. The per-turn reward is

    r_t = alpha * c_t + beta * g_t          (g_t = 1 if the action took effect; final turn g = 1)

and the advantages are turn-level GAE with the critic values `V_t` (see `agentgym.credit.gae`).
Reference-code quirks are flags, off by default: `horizon_scale` multiplies r_t by
`(n_turns - t - 1)` (zeroing the final turn) and `loo_baseline` replaces every c_t by
`R_i - mean(R of the other rollouts of the group)`.

Defaults that differ from the paper's reference code (`grounding_mode="bonus", beta=0.5, whiten=False`
give the reference back): `grounding_mode="penalty"` (-beta on ungrounded turns instead of +beta on
grounded ones), `beta=0.1` (the reference's 0.5 as a penalty made two invalid turns cost as much as the
outcome: on Maze-v0 the policy learned to avoid invalid moves and stopped reaching the goal) and
`whiten=True` (batch-normalised advantages, as the reference's PPO trainer applies them), and
`outcome_residual=True`: the last turn's reward also carries `alpha * (R - sum_t c_t)`, so an episode's
rewards add up to its outcome whatever the estimator has learned. The contributions then move credit
between the turns of an episode but cannot replace the outcome: in the reference, an estimator that
misjudges a batch (on Maze-v0, the batches after its first fit: explained variance -0.1 to -0.7, worse
than a constant) leaves the policy without any outcome signal for those updates. With gamma = lam = 1 the
return of turn t is then R minus the contributions before t, a function of the history only: the
outcome's policy gradient with a learned baseline. See docs/credit-log.md for the runs that showed why.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np

from agentgym.credit import validate
from agentgym.credit.baselines import outcome_advantages
from agentgym.credit.batch import PerTurn, TurnBatch
from agentgym.credit.gae import VALUES_FIX, turn_gae
from agentgym.credit.registry import register_estimator
from agentgym.credit.result import CreditResult
from agentgym.credit.stats import EPS

CONTRIBUTIONS_FIX = ("Pass contributions=ProgressEstimator.predict(episodes) (agentgym.credit.learned), "
                     "one c_t per turn, or loo_baseline=True for the reference WebShop variant.")


def progress_loss(outcomes: Sequence[float], contributions: Sequence[Sequence[float]]) -> float:
    """SPA's estimator objective `mean_over_batch (R - sum_t c_t)^2` (numpy reference)."""
    sums = np.array([float(np.sum(c)) for c in contributions])
    return float(np.mean((np.asarray(outcomes, dtype=np.float64) - sums) ** 2)) if len(sums) else 0.0


def grounding_from_validity(batch: TurnBatch) -> np.ndarray:
    """g_t [T]: 1 where the action was valid (took effect), and 1 on every final turn."""
    return (batch.valid | batch.is_last).astype(np.float64)


def spa_turn_rewards(batch: TurnBatch, contributions: np.ndarray, grounding: np.ndarray, *, alpha: float,
                     beta: float, horizon_scale: bool, grounding_mode: str = "penalty") -> np.ndarray:
    """r_t = alpha * c_t + beta * g_t [T] ("bonus"), or alpha * c_t - beta * (1 - g_t) ("penalty"),
    optionally times (n_turns - t - 1)."""
    ground = grounding if grounding_mode == "bonus" else grounding - 1.0
    rewards = alpha * contributions + beta * ground
    if horizon_scale:
        rewards = rewards * (batch.lengths[batch.episode_of_turn] - batch.position - 1)
    return rewards


def outcome_residual_rewards(batch: TurnBatch, contributions: np.ndarray) -> np.ndarray:
    """[T]: R - sum_t c_t of each episode on its last turn, 0 elsewhere."""
    sums = np.bincount(batch.episode_of_turn, weights=contributions, minlength=batch.n_episodes)
    out = np.zeros(batch.n_turns)
    has_turns = batch.lengths > 0
    out[batch.starts[1:][has_turns] - 1] = (batch.outcome - sums)[has_turns]
    return out


@register_estimator("spa", summary="progress-estimator turn rewards + grounding, then turn-level GAE",
                    needs=("contributions: c_t per turn from ProgressEstimator", "values: critic V_t per turn"),
                    group_relative=False, uses_critic=True)
def spa(batch: TurnBatch, *, contributions: PerTurn | None = None, values: PerTurn | None = None,
        alpha: float = 1.0, beta: float = 0.1, grounding: PerTurn | None = None, gamma: float = 1.0,
        lam: float = 0.95, horizon_scale: bool = False, loo_baseline: bool = False,
        grounding_mode: Literal["penalty", "bonus"] = "penalty", whiten: bool = True,
        outcome_residual: bool = True, eps: float = EPS) -> CreditResult:
    """SPA advantages.

    Inputs: `contributions` c [T], `values` V [T], optional `grounding` g [T] (default: turn
    validity, 1 on final turns). Output: advantages [T], returns [T], turn_rewards r [T], values [T].
    `whiten` normalises the advantages over the batch's turns (after the returns are taken), as the
    reference's PPO trainer does. `grounding_mode="bonus"` is the paper's +beta per grounded turn;
    the default "penalty" (-beta per ungrounded turn) carries the same preference without paying for
    length: with gamma = 1 a per-turn bonus makes longer (failing) episodes worth more (docs/credit-log.md).
    `outcome_residual` adds `alpha * (R - sum_t c_t)` to each episode's last turn (not with `loo_baseline`,
    whose c_t are outcome comparisons already); False is the paper's reward.
    """
    validate.number("spa", "alpha", alpha)
    validate.number("spa", "beta", beta)
    validate.number("spa", "gamma", gamma, low=0.0, high=1.0)
    validate.number("spa", "lam", lam, low=0.0, high=1.0)
    validate.choice("spa", "grounding_mode", grounding_mode, ("penalty", "bonus"))
    validate.choice("spa", "whiten", whiten, (True, False))
    validate.choice("spa", "outcome_residual", outcome_residual, (True, False))
    validate.number("spa", "eps", eps, low=0.0)
    if loo_baseline:
        c = np.repeat(outcome_advantages(batch, norm="mean", eps=0.0, singleton="zero", scale_loo=True),
                      batch.lengths)
    else:
        c = batch.per_turn(contributions, name="contributions", estimator="spa", fix=CONTRIBUTIONS_FIX)
    v = batch.per_turn(values, name="values", estimator="spa", fix=VALUES_FIX)
    g = grounding_from_validity(batch) if grounding is None else batch.per_turn(
        grounding, name="grounding", estimator="spa", fix="")
    r = spa_turn_rewards(batch, c, g, alpha=alpha, beta=beta, horizon_scale=horizon_scale,
                         grounding_mode=grounding_mode)
    if outcome_residual and not loo_baseline:
        r = r + alpha * outcome_residual_rewards(batch, c)
    adv, ret = turn_gae(batch, r, v, gamma=gamma, lam=lam)
    if whiten and len(adv) > 1:
        adv = (adv - adv.mean()) / (adv.std() + eps)
    return CreditResult("spa", batch, adv, returns=ret, turn_rewards=r, values=v)
