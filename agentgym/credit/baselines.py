"""Outcome-only, critic-free baselines: GRPO, Dr.GRPO and RLOO (docs/algorithms.md, section 2.1).

Every turn of episode i gets the episode's advantage A_i, computed from the outcomes R (=
`Episode.total_reward`) of the N episodes of its group:

- grpo:    A_i = (R_i - mean_g R) / (std_g R + eps)      (unbiased std)
- dr_grpo: A_i =  R_i - mean_g R
- rloo:    A_i =  R_i - mean_{j != i} R_j = N/(N-1) * (R_i - mean_g R)

A group of one gets A = 0 (`singleton="zero"`, agentgym); `singleton="raw"` reproduces verl's
mean 0 / std 1 convention (A = R).
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from agentgym.credit import validate
from agentgym.credit.batch import TurnBatch
from agentgym.credit.registry import register_estimator
from agentgym.credit.result import CreditResult
from agentgym.credit.stats import EPS, Norm, segment_stats

Singleton = Literal["zero", "raw"]


def outcome_advantages(batch: TurnBatch, *, norm: Norm, eps: float, singleton: Singleton,
                       scale_loo: bool = False) -> np.ndarray:
    """Per-episode group-relative outcome advantages, shape [E]."""
    stats = segment_stats(batch.outcome, batch.group, batch.n_groups)
    adv = stats.normalise(batch.outcome, batch.group, norm, eps)
    sizes = stats.count[batch.group]
    if scale_loo:
        adv = adv * np.where(sizes > 1, sizes / np.maximum(sizes - 1, 1), 0.0)
    if singleton == "raw":
        adv = np.where(sizes == 1, batch.outcome, adv)
    return adv


def _check(name: str, eps: float, singleton: str) -> None:
    validate.number(name, "eps", eps, low=0.0)
    validate.choice(name, "singleton", singleton, ("zero", "raw"))


@register_estimator("grpo", summary="(R - group mean) / (group std + eps), same for every turn")
def grpo(batch: TurnBatch, *, eps: float = EPS, singleton: Singleton = "zero") -> CreditResult:
    """GRPO. Input: outcomes R [E] and group codes [E]. Output advantages [T] (A_i on each turn)."""
    _check("grpo", eps, singleton)
    adv = outcome_advantages(batch, norm="std", eps=eps, singleton=singleton)
    return CreditResult("grpo", batch, np.repeat(adv, batch.lengths), episode_part=None)


@register_estimator("dr_grpo", summary="R - group mean (no std division), same for every turn")
def dr_grpo(batch: TurnBatch, *, singleton: Singleton = "zero") -> CreditResult:
    """Dr.GRPO. Input: outcomes R [E]. Output advantages [T]."""
    _check("dr_grpo", EPS, singleton)
    adv = outcome_advantages(batch, norm="mean", eps=EPS, singleton=singleton)
    return CreditResult("dr_grpo", batch, np.repeat(adv, batch.lengths))


@register_estimator("rloo", summary="R - mean of the other rollouts of the group, same for every turn")
def rloo(batch: TurnBatch, *, singleton: Singleton = "zero") -> CreditResult:
    """RLOO leave-one-out baseline. Input: outcomes R [E]. Output advantages [T]."""
    _check("rloo", EPS, singleton)
    adv = outcome_advantages(batch, norm="mean", eps=EPS, singleton=singleton, scale_loo=True)
    return CreditResult("rloo", batch, np.repeat(adv, batch.lengths))
