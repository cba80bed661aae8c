"""Curation rules of the data manager, as pure functions (docs/algorithms.md, section 4; after DART).

- `zero_variance`: a group whose rewards are all equal teaches nothing to a
  group-relative estimator (DAPO's dynamic sampling drops it and refills).
- `dynamic_rollouts`: DART's rollouts-per-task rule from the task's success rate.
- `select_high_entropy_steps`: keep the top fraction of step samples by mean token entropy.
- `mix_in_success`: for a task the policy rarely solves, swap a failed rollout for a
  stored success so the group has something to compare against.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from agentgym.trajectory import Episode, new_id


@dataclass(frozen=True)
class Curation:
    """Which curation rules run, and their parameters (each rule switchable on its own)."""

    drop_zero_variance: bool = True  #: drop groups whose rewards are all equal (dynamic sampling refills)
    top_entropy_fraction: float | None = None  #: rho: keep this share of steps by entropy (DART; 0.5-0.8), None = all
    adaptive_rollouts: bool = False  #: rollouts per task from its success rate (DART's dynamic n)
    rollouts_min: int = 1  #: n_min of the dynamic rule
    rollouts_max: int = 8  #: n_max of the dynamic rule (also the group size of unseen tasks)
    adaptive_threshold: float = 0.6  #: success rate below which a task gets n_max rollouts
    mix_successes: bool = False  #: mix a stored success into all-failure groups of rarely solved tasks
    rare_success_rate: float = 0.2  #: a task whose observed success rate is below this counts as rarely solved

    def __post_init__(self) -> None:
        if self.top_entropy_fraction is not None and not 0 < self.top_entropy_fraction <= 1:
            raise ValueError(f"top_entropy_fraction must be in (0, 1] or None, got {self.top_entropy_fraction}")
        if not 1 <= self.rollouts_min <= self.rollouts_max:
            raise ValueError(f"need 1 <= rollouts_min <= rollouts_max, got {self.rollouts_min}, {self.rollouts_max}")
        if not 0 < self.adaptive_threshold <= 1:
            raise ValueError(f"adaptive_threshold must be in (0, 1], got {self.adaptive_threshold}")


def zero_variance(rewards: Sequence[float], tol: float = 1e-9) -> bool:
    """True when every reward of the group is the same (within `tol`)."""
    return len(rewards) > 0 and max(rewards) - min(rewards) <= tol


def dynamic_rollouts(success_rate: float | None, *, n_min: int = 1, n_max: int = 8, threshold: float = 0.6) -> int:
    """DART: ``n_max`` if sr < threshold (or unseen), else ``max(n_min, int(9/sr - 7))``, never above n_max."""
    if success_rate is None or success_rate < threshold:
        return n_max
    return min(n_max, max(n_min, int(9.0 / success_rate - 7.0)))


def select_high_entropy_steps(step_entropies: Sequence[float], fraction: float) -> list[bool]:
    """Keep mask over step samples: the top ``int(fraction * n)`` by entropy (at least one when n > 0)."""
    n = len(step_entropies)
    if n == 0:
        return []
    k = max(1, int(fraction * n + 1e-9))
    order = sorted(range(n), key=lambda i: (-_finite(step_entropies[i]), i))
    keep = set(order[:k])
    return [i in keep for i in range(n)]


def _finite(x: float) -> float:
    return x if math.isfinite(x) else -math.inf


def mix_in_success(group: list[Episode], success: Episode | None, *, is_success) -> list[Episode] | None:
    """The group with its oldest failure replaced by `success` (tagged ``source=replayed``).

    Returns the group unchanged if it already has a success, and None (drop the group,
    as DART does) when it has none and no stored success exists.
    """
    if any(is_success(e) for e in group):
        return group
    if success is None:
        return None
    oldest = min(range(len(group)), key=lambda i: group[i].created_at)
    replayed = Episode.from_dict(success.to_dict())
    replayed.id = new_id()
    replayed.group_id = group[oldest].group_id
    replayed.metadata = {**replayed.metadata, "source": "replayed", "replay_of": success.id, "replaces": group[oldest].id}
    return group[:oldest] + [replayed] + group[oldest + 1:]
