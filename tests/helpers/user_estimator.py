"""A user's own credit estimator, registered on import (used as estimator 'tests.helpers.user_estimator:sign')."""

from __future__ import annotations

import numpy as np

from agentgym.credit import CreditResult, TurnBatch, register_estimator


@register_estimator("sign", summary="+1 on the turns of episodes above their group's mean reward, -1 below")
def sign(batch: TurnBatch, *, scale: float = 1.0) -> CreditResult:
    means = np.bincount(batch.group, weights=batch.outcome) / np.maximum(batch.group_sizes, 1)
    per_episode = scale * np.sign(batch.outcome - means[batch.group])
    return CreditResult("sign", batch, np.repeat(per_episode, batch.lengths))
