"""`CreditResult`: what an estimator returns (flat per-turn arrays plus their episode layout)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from agentgym.credit.batch import TurnBatch


@dataclass(frozen=True, eq=False)
class CreditResult:
    """Per-turn outputs of one estimator over one `TurnBatch`. Every array is flat, shape [T].

    `advantages` is always set. The others are set where the estimator has them:
    `returns` (value targets, critic-based estimators: gae, spa), `episode_part` and `step_part`
    (the two levels of gigpo / oprl, before `omega`/`alpha` weighting of the step part),
    `turn_rewards` (the dense per-turn rewards the estimator built: spa, oprl), `values` (the critic
    values it used) and `trained` (bool; False for turns the trainer should not train, e.g. shared
    tree prefixes copied into TRACE branches). `step_group` (int codes) is the cluster of turns a
    step-level estimator compared each turn with (gigpo's anchor states). `scalars` are the batch-level
    figures an estimator measured on the way (oprl: how well its step rewards rank the outcomes), logged
    with the update's credit diagnostics.
    """

    estimator: str
    batch: TurnBatch
    advantages: np.ndarray
    returns: np.ndarray | None = None
    episode_part: np.ndarray | None = None
    step_part: np.ndarray | None = None
    turn_rewards: np.ndarray | None = None
    values: np.ndarray | None = None
    trained: np.ndarray | None = None
    step_group: np.ndarray | None = None
    scalars: dict[str, float] = field(default_factory=dict)

    def per_episode(self) -> list[list[float]]:
        """Advantages as one list per episode (one float per turn)."""
        return self.batch.split(self.advantages)

    def returns_per_episode(self) -> list[list[float]]:
        """Value targets as one list per episode; raises if the estimator uses no critic."""
        if self.returns is None:
            raise ValueError(f"estimator '{self.estimator}' uses no critic and produces no returns; "
                             "use 'gae' or 'spa' for value targets.")
        return self.batch.split(self.returns)

    def write_to(self) -> None:
        """Store each advantage in its `Turn.advantage` (mutates the batch's episodes)."""
        values = self.advantages.tolist()
        row = 0
        for ep in self.batch.episodes:
            for turn in ep.turns:
                turn.advantage = values[row]
                row += 1
