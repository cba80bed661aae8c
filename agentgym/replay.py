"""Re-execute a stored episode on a fresh env and report the first turn that differs."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from agentgym.registration import make
from agentgym.trajectory import Episode


@dataclass(frozen=True)
class Divergence:
    """The first place where a replay differs from the record."""

    turn: int
    field: str  #: "observation", "reward", "terminated", "truncated", "reset" or "error"
    expected: Any
    actual: Any

    def describe(self) -> str:
        return f"turn {self.turn}: {self.field} differs\n  recorded: {self.expected!r}\n  replayed: {self.actual!r}"


def replay(episode: Episode, env: Any | None = None, *, env_kwargs: dict[str, Any] | None = None) -> Divergence | None:
    """Replay `episode`'s actions from its seed and task; None when every turn matches."""
    env = env if env is not None else make(episode.env_id, **(env_kwargs or {}))
    try:
        options = {"task_id": episode.task_id} if episode.task_id else None
        try:
            observation, _ = env.reset(seed=episode.seed, options=options)
        except Exception as exc:
            return Divergence(0, "reset", "a successful reset", repr(exc))
        for turn in episode.turns:
            if observation != turn.observation:
                return Divergence(turn.index, "observation", turn.observation, observation)
            if not turn.action_text and "error" in turn.info and turn is episode.turns[-1]:
                return None  # the recorded episode broke before acting here
            try:
                observation, reward, terminated, truncated, _ = env.step(turn.action_text)
            except Exception as exc:
                return Divergence(turn.index, "error", "a successful step", repr(exc))
            if not math.isclose(float(reward), turn.reward, rel_tol=1e-9, abs_tol=1e-12):
                return Divergence(turn.index, "reward", turn.reward, float(reward))
            if bool(terminated) != turn.terminated:
                return Divergence(turn.index, "terminated", turn.terminated, bool(terminated))
            if bool(truncated) and not turn.truncated:
                return Divergence(turn.index, "truncated", turn.truncated, bool(truncated))
        return None
    finally:
        env.close()
