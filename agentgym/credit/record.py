"""`TurnCredit`: what training computed for one turn, as the store keeps it.

After every update the trainer writes one record per turn of the batch it trained on
(`records_from_result`) and one per turn of every episode the data manager dropped
(`dropped_records`), so a run's store answers "which advantage did this turn get, from
which parts, under which policy version" long after the run ended.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from agentgym.credit.result import CreditResult


@dataclass(frozen=True)
class TurnCredit:
    """One turn's credit. Fields an estimator does not have stay None."""

    episode_id: str
    index: int
    run_id: str = ""
    estimator: str = ""
    update: int | None = None  #: the update that trained on this turn (1-based)
    policy_version: int | None = None  #: the policy version the update started from (the weights trained)
    advantage: float | None = None  #: the per-turn advantage the loss used (broadcast to the turn's tokens)
    episode_part: float | None = None  #: gigpo / oprl: the episode-level part
    step_part: float | None = None  #: gigpo / oprl: the step-level part (before omega / alpha)
    return_: float | None = None  #: value target (gae, spa)
    value: float | None = None  #: critic value the estimator used (gae, spa)
    turn_reward: float | None = None  #: dense turn reward the estimator built (spa, oprl)
    step_group: int | None = None  #: gigpo: anchor cluster code within the update
    step_group_size: int | None = None  #: gigpo: turns in that cluster (1 = a singleton, no step signal)
    dropped: bool = False  #: True when the data manager did not train this turn
    drop_reason: str | None = None  #: zero_variance, stale, no_success, infra


def _at(values: np.ndarray | None, row: int) -> float | None:
    return None if values is None else float(values[row])


def records_from_result(result: CreditResult, *, run_id: str, update: int, policy_version: int) -> list[TurnCredit]:
    """One `TurnCredit` per turn of `result`'s batch (turns TRACE does not train are marked dropped)."""
    groups = result.step_group
    sizes = np.bincount(groups)[groups] if groups is not None and len(groups) else None
    out = []
    row = 0
    for ep in result.batch.episodes:
        for turn in ep.turns:
            trained = result.trained is None or bool(result.trained[row])
            out.append(TurnCredit(
                episode_id=ep.id, index=turn.index, run_id=run_id, estimator=result.estimator, update=update,
                policy_version=policy_version, advantage=float(result.advantages[row]),
                episode_part=_at(result.episode_part, row), step_part=_at(result.step_part, row),
                return_=_at(result.returns, row), value=_at(result.values, row),
                turn_reward=_at(result.turn_rewards, row),
                step_group=None if groups is None else int(groups[row]),
                step_group_size=None if sizes is None else int(sizes[row]),
                dropped=not trained, drop_reason=None if trained else "shared_prefix"))
            row += 1
    return out


def dropped_records(dropped: Sequence[tuple[str, int, str]], *, run_id: str, estimator: str,
                    policy_version: int) -> list[TurnCredit]:
    """One dropped `TurnCredit` per turn of each (episode id, turn count, reason)."""
    return [TurnCredit(episode_id=eid, index=i, run_id=run_id, estimator=estimator, policy_version=policy_version,
                       dropped=True, drop_reason=reason)
            for eid, n_turns, reason in dropped for i in range(n_turns)]
