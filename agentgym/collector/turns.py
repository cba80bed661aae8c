"""Turn control: how many turns an episode may take.

- `FixedTurns(n)`: at most n turns; the episode is then truncated (a model
  failure: it did not finish in time).
- `DynamicTurns(initial, extension, cap)`: starts with `initial` turns; when
  they are used up and the episode asks for more, `extension` turns are
  granted at a time, never past `cap`. An episode asks when the env sets
  ``info["request_more_turns"] = True`` on the last step, or, by default, when
  it is still making progress: its last turn was a valid action and reached a
  state not seen earlier in the episode (by `state_fingerprint`). Pass
  `wants_more` to decide otherwise.

A turn control is a small stateless object; the collector keeps each
episode's budget.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from agentgym.errors import ConfigError
from agentgym.trajectory import Episode


class TurnControl(Protocol):
    """Turn budget of an episode: an initial budget and extensions on demand."""

    def initial(self) -> int:
        """Turns granted when the episode starts."""
        ...

    def extend(self, episode: Episode, budget: int) -> int:
        """Extra turns granted to `episode`, which has used its `budget` (0: none)."""
        ...


@dataclass(frozen=True)
class FixedTurns:
    """A fixed turn limit."""

    max_turns: int

    def __post_init__(self) -> None:
        if self.max_turns < 1:
            raise ConfigError(f"max_turns must be >= 1, got {self.max_turns}")

    def initial(self) -> int:
        return self.max_turns

    def extend(self, episode: Episode, budget: int) -> int:
        return 0


def making_progress(episode: Episode) -> bool:
    """The last turn asked for more turns, or was valid and reached a state not seen before in the episode."""
    if not episode.turns:
        return False
    last = episode.turns[-1]
    if last.info.get("request_more_turns"):
        return True
    if not last.valid:
        return False
    after = last.info.get("next_state_fingerprint")
    seen = {t.state_fingerprint for t in episode.turns}
    return bool(after) and after not in seen


@dataclass(frozen=True)
class DynamicTurns:
    """`initial` turns, then `extension` more at a time while `wants_more(episode)`, up to `cap`."""

    initial_turns: int
    extension: int
    cap: int
    wants_more: Callable[[Episode], bool] = making_progress

    def __post_init__(self) -> None:
        if not 1 <= self.initial_turns <= self.cap:
            raise ConfigError(f"need 1 <= initial_turns <= cap, got initial_turns={self.initial_turns}, cap={self.cap}")
        if self.extension < 1:
            raise ConfigError(f"extension must be >= 1 turn, got {self.extension}")

    def initial(self) -> int:
        return self.initial_turns

    def extend(self, episode: Episode, budget: int) -> int:
        if budget >= self.cap or not self.wants_more(episode):
            return 0
        return min(self.extension, self.cap - budget)
