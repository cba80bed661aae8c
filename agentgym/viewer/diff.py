"""Turn-by-turn comparison of two episodes, and where they first part ways."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from agentgym.trajectory import Episode, Turn

#: compared in this order at each turn; the first that differs is the divergence
COMPARED = ("observation", "action_text", "reward", "terminated", "truncated")


@dataclass(frozen=True)
class Divergence:
    """The first turn at which two episodes differ, and in what."""

    turn: int
    field: str  #: one of COMPARED, or "length" when one episode simply ends earlier
    a: Any
    b: Any

    def describe(self) -> str:
        if self.field == "length":
            return f"turn {self.turn}: only one episode has this turn (lengths {self.a} and {self.b})"
        return f"turn {self.turn}: {self.field} differs ({_short(self.a)} vs {_short(self.b)})"


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _same(field: str, a: Turn, b: Turn) -> bool:
    x, y = getattr(a, field), getattr(b, field)
    if field == "reward":
        return math.isclose(float(x), float(y), rel_tol=1e-9, abs_tol=1e-12)
    return x == y


def first_divergence(a: Episode, b: Episode) -> Divergence | None:
    """Where `a` and `b` first differ; None when every turn matches and both have the same length."""
    for ta, tb in zip(a.turns, b.turns, strict=False):
        for name in COMPARED:
            if not _same(name, ta, tb):
                return Divergence(ta.index, name, getattr(ta, name), getattr(tb, name))
    if a.num_turns != b.num_turns:
        return Divergence(min(a.num_turns, b.num_turns), "length", a.num_turns, b.num_turns)
    return None


def task_mismatch(a: Episode, b: Episode) -> str | None:
    """A warning when the two episodes are not rollouts of one task (the diff still runs)."""
    if (a.env_id, a.task_id) != (b.env_id, b.task_id):
        return (f"the episodes are from different tasks ({a.env_id} task {a.task_id!r} vs "
                f"{b.env_id} task {b.task_id!r}); turns are compared anyway")
    return None
