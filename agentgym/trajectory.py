"""The trajectory data model: Episode -> turns -> tokens.

These field names are the public contract shared by the collector, the store,
the JSONL export, credit assignment and the viewer (docs/trajectory.md).
Every field has a default, so both records construct from keyword arguments.
Nothing a later stage needs is rebuilt by re-tokenizing text: the ids and
log-probs stored here are exactly what the policy sampled.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
import uuid
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class EpisodeStatus(StrEnum):
    """How an episode ended (kept separate from failure and reason all the way down)."""

    COMPLETE = "complete"  #: the env terminated it (success or failure of the task)
    TRUNCATED = "truncated"  #: cut short: turn limit, context length, time limit
    ERROR = "error"  #: something broke; `failure` says whose fault
    PARTIAL = "partial"  #: unfinished, to be resumed by a later round


class Failure(StrEnum):
    """Whose fault an error or truncation was."""

    INFRA = "infra"  #: sandbox died, env server gone, our own timeout: retry or mask, never score as 0
    MODEL = "model"  #: malformed action, turn limit, context overflow: a legitimate training signal


def new_id() -> str:
    """A fresh 32-hex-digit id."""
    return uuid.uuid4().hex


@dataclass
class Turn:
    """One model call and the env's answer to it."""

    index: int = 0  #: 0-based turn number
    observation: str = ""  #: what the env showed before the action (text; images by reference in info)
    prompt_ids: list[int] = field(default_factory=list)  #: ids the policy saw this turn that were not cached before
    action_text: str = ""  #: the decoded action, exactly as sampled
    action_ids: list[int] = field(default_factory=list)  #: sampled token ids
    action_logprobs: list[float] = field(default_factory=list)  #: behavior log-probs of `action_ids`
    token_versions: list[int] = field(default_factory=list)  #: policy version of each action token
    reward: float = 0.0  #: the env's reward for the action
    terminated: bool = False  #: the env ended the episode (task solved or failed)
    truncated: bool = False  #: the episode was cut short after this turn
    info: dict[str, Any] = field(default_factory=dict)  #: the env's structured extras (error_kind, tool result, ...)
    state_fingerprint: str = ""  #: `env.state_fingerprint()` of the state the action was taken in
    timings: dict[str, float] = field(default_factory=dict)  #: seconds in generation, env step, sandbox
    loss_mask: list[int] | None = None  #: per action token, 0 to exclude it from the loss (None: all 1)
    finish_reason: str | None = None  #: the backend's reason for stopping generation (stop, length, abort)
    advantage: float | None = None  #: the turn-level advantage once credit assignment ran

    @property
    def valid(self) -> bool:
        """Whether the env accepted the action (no `error_kind` in info)."""
        return not self.info.get("error_kind")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Turn:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


@dataclass
class Episode:
    """One rollout of one task: where it came from, how it ended, and its turns."""

    id: str = field(default_factory=new_id)
    run_id: str = ""  #: the run that produced it
    env_id: str = ""  #: registry id of the env
    task_id: str = ""  #: the task within the env
    seed: int | None = None  #: the seed passed to reset
    group_id: str = ""  #: rollouts of one task that are compared with each other
    parent_id: str | None = None  #: tree rollouts: the episode this one was forked from
    branch_turn: int | None = None  #: tree rollouts: the turn index at which it was forked
    status: EpisodeStatus = EpisodeStatus.COMPLETE
    failure: Failure | None = None  #: whose fault an error/truncation was
    error: str | None = None  #: the error or truncation reason, as text
    total_reward: float = 0.0  #: sum of turn rewards unless the env gives a terminal score
    turns: list[Turn] = field(default_factory=list)
    policy_version: int | None = None  #: version of the policy that started the episode
    created_at: float = field(default_factory=time.time)
    metadata: dict[str, Any] = field(default_factory=dict)  #: free-form extras (source tag, rollout round, ...)

    def __post_init__(self) -> None:
        self.status = EpisodeStatus(self.status)
        if self.failure is not None:
            self.failure = Failure(self.failure)
        self.turns = [t if isinstance(t, Turn) else Turn.from_dict(t) for t in self.turns]

    @property
    def num_turns(self) -> int:
        return len(self.turns)

    @property
    def num_action_tokens(self) -> int:
        return sum(len(t.action_ids) for t in self.turns)

    def end(self, status: EpisodeStatus, reason: str | None = None, failure: Failure | None = None,
            last_observation: str | None = None) -> Episode:
        """End the episode with `status`, whose fault it was and why (the collector and `run_episode` alike).

        A truncated episode's last turn is marked truncated and keeps the observation it led to.
        """
        self.status, self.error, self.failure = status, reason, failure
        self.metadata["termination"] = reason or str(status)
        if status == EpisodeStatus.TRUNCATED and self.turns:
            self.turns[-1].truncated = True
            if last_observation is not None:
                self.turns[-1].info.setdefault("next_observation", last_observation)
        return self.finish()

    def finish(self, terminal_score: float | None = None) -> Episode:
        """Set `total_reward` from the turns (or from `terminal_score`) and return self."""
        self.total_reward = float(terminal_score) if terminal_score is not None else float(
            sum(t.reward for t in self.turns)
        )
        return self

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["status"] = str(self.status)
        data["failure"] = str(self.failure) if self.failure is not None else None
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Episode:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False)

    def to_messages(self, system_prompt: str = "") -> list[dict[str, str]]:
        """The conversation as chat messages: system, then user observation / assistant action pairs."""
        return chat_messages(system_prompt, self.turns)


def chat_messages(system_prompt: str, turns: list[Turn], observation: str | None = None) -> list[dict[str, str]]:
    """System prompt, then each turn's observation (user) and action (assistant); then `observation`, if given.

    What a text-level policy sees before acting on `observation`, and what SFT renders a demonstration as.
    """
    messages = [{"role": "system", "content": system_prompt}] if system_prompt else []
    for turn in turns:
        messages.append({"role": "user", "content": turn.observation})
        messages.append({"role": "assistant", "content": turn.action_text})
    if observation is not None:
        messages.append({"role": "user", "content": observation})
    return messages


def step_ending(terminated: bool, truncated: bool, info: dict[str, Any]) -> tuple[EpisodeStatus, str | None,
                                                                               Failure | None] | None:
    """How an env step ends the episode, or None when it goes on.

    The env ending it is complete; the env truncating it is the model's outcome (it ran out of the
    env's own budget), with the env's `truncation_reason`.
    """
    if truncated:
        return EpisodeStatus.TRUNCATED, str(info.get("truncation_reason", "truncated by the env")), Failure.MODEL
    if terminated:
        return EpisodeStatus.COMPLETE, None, None
    return None


# ---- where two records of an episode part ways -----------------------------------------------------

#: what two records of a turn are compared on, in this order; the first field that differs is where they part.
#: One definition for `agentgym replay` (record vs re-execution), branching (a replayed prefix must match
#: the parent) and the viewer's / `episodes diff` comparison of two episodes.
COMPARED_FIELDS = ("observation", "action_text", "reward", "terminated", "truncated")


@dataclass(frozen=True)
class TurnDifference:
    """The first turn at which two records differ, and in what."""

    turn: int
    field: str  #: one of COMPARED_FIELDS; "length" when one record ends earlier; "error" when a replay raised
    a: Any  #: the first record's value (the recorded one, for a replay)
    b: Any  #: the second record's value (the replayed one)

    def describe(self, a_name: str = "recorded", b_name: str = "replayed") -> str:
        if self.field == "length":
            return f"turn {self.turn}: only one episode has this turn (lengths {self.a} and {self.b})"
        return f"turn {self.turn}: {self.field} differs ({a_name} {_short(self.a)}, {b_name} {_short(self.b)})"


def same_value(field: str, x: Any, y: Any) -> bool:
    """Equal, with rewards compared as floats up to rounding."""
    if field == "reward":
        return math.isclose(float(x), float(y), rel_tol=1e-9, abs_tol=1e-12)
    return x == y


def turn_difference(a: Turn, b: Turn, fields: tuple[str, ...] = COMPARED_FIELDS) -> TurnDifference | None:
    """The first of `fields` in which turns `a` and `b` differ."""
    for name in fields:
        x, y = getattr(a, name), getattr(b, name)
        if not same_value(name, x, y):
            return TurnDifference(a.index, name, x, y)
    return None


def first_difference(a: list[Turn], b: list[Turn], fields: tuple[str, ...] = COMPARED_FIELDS,
                     ) -> TurnDifference | None:
    """Where two turn lists first differ (a field, else their length); None when they match."""
    for ta, tb in zip(a, b, strict=False):
        if (found := turn_difference(ta, tb, fields)) is not None:
            return found
    if len(a) != len(b):
        return TurnDifference(min(len(a), len(b)), "length", len(a), len(b))
    return None


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
