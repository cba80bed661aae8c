"""Turn-level PPO advantages with a critic: GAE over turns (docs/algorithms.md, section 2.2).

A turn is one action; `V_t` is the critic's value read at the last context token before turn t.

    delta_t = r_t + gamma * V_{t+1} - V_t        (V_T = bootstrap value, 0 by default)
    A_t     = delta_t + gamma * lam * A_{t+1}
    return_t = A_t + V_t                          (the value target)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np

from agentgym.credit import validate
from agentgym.credit.batch import PerTurn, TurnBatch
from agentgym.credit.registry import register_estimator
from agentgym.credit.result import CreditResult
from agentgym.credit.stats import discounted_cumsum

VALUES_FIX = ("Pass values=[[V_0, ..., V_{T-1}] per episode] (or a flat [T] array) from the trainer's "
              "value head, read at the last context token before each turn.")


def turn_gae(batch: TurnBatch, rewards: np.ndarray, values: np.ndarray, *, gamma: float, lam: float,
             bootstrap: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(advantages [T], returns [T]) from rewards [T], values [T] and bootstrap values [E] (or 0)."""
    next_values = np.zeros(batch.n_turns)
    inner = ~batch.is_last
    next_values[:-1][inner[:-1]] = values[1:][inner[:-1]]
    if bootstrap is not None:
        last = batch.is_last
        next_values[last] = bootstrap[batch.episode_of_turn[last]]
    delta = rewards + gamma * next_values - values
    adv = discounted_cumsum(delta, gamma * lam, batch.backward_levels)
    return adv, adv + values


def rewards_from(batch: TurnBatch, reward_source: str) -> np.ndarray:
    """Per-turn rewards [T]: the env's turn rewards, or the outcome R_i on each final turn."""
    if reward_source == "turn":
        return batch.reward
    rewards = np.zeros(batch.n_turns)
    last = batch.is_last
    rewards[last] = batch.outcome[batch.episode_of_turn[last]]
    return rewards


@register_estimator("gae", summary="turn-level GAE with a critic (PPO); also returns value targets",
                    needs=("values: critic V_t per turn",), group_relative=False, uses_critic=True)
def gae(batch: TurnBatch, *, values: PerTurn | None = None, gamma: float = 1.0, lam: float = 1.0,
        reward_source: Literal["turn", "outcome"] = "turn", turn_rewards: PerTurn | None = None,
        bootstrap: Sequence[float] | np.ndarray | None = None) -> CreditResult:
    """Turn-level GAE.

    Inputs: `values` [T] (or one list per episode), rewards [T] from `reward_source` ("turn":
    `Turn.reward`; "outcome": R_i on the final turn) or explicit `turn_rewards`, optional
    `bootstrap` [E] (value after the final turn, for truncated episodes). Output: advantages [T],
    returns [T] (= advantages + values), values [T], turn_rewards [T].
    """
    validate.number("gae", "gamma", gamma, low=0.0, high=1.0)
    validate.number("gae", "lam", lam, low=0.0, high=1.0)
    validate.choice("gae", "reward_source", reward_source, ("turn", "outcome"))
    v = batch.per_turn(values, name="values", estimator="gae", fix=VALUES_FIX)
    if turn_rewards is not None:
        r = batch.per_turn(turn_rewards, name="turn_rewards", estimator="gae", fix="")
    else:
        r = rewards_from(batch, reward_source)
    boot = None if bootstrap is None else batch.per_episode(bootstrap, name="bootstrap", estimator="gae", fix="")
    adv, ret = turn_gae(batch, r, v, gamma=gamma, lam=lam, bootstrap=boot)
    return CreditResult("gae", batch, adv, returns=ret, values=v, turn_rewards=r)
