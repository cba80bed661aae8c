"""Turn-by-turn comparison of two episodes, and where they first part ways.

"Differs" is `agentgym.trajectory.first_difference`, the definition `agentgym replay` and branching use too.
"""

from __future__ import annotations

from agentgym.trajectory import Episode, TurnDifference, first_difference


def first_divergence(a: Episode, b: Episode) -> TurnDifference | None:
    """Where `a` and `b` first differ; None when every turn matches and both have the same length."""
    return first_difference(a.turns, b.turns)


def task_mismatch(a: Episode, b: Episode) -> str | None:
    """A warning when the two episodes are not rollouts of one task (the diff still runs)."""
    if (a.env_id, a.task_id) != (b.env_id, b.task_id):
        return (f"the episodes are from different tasks ({a.env_id} task {a.task_id!r} vs "
                f"{b.env_id} task {b.task_id!r}); turns are compared anyway")
    return None
