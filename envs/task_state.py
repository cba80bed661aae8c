"""Shared by envs whose per-episode state is one frozen record and whose tasks are a fixed list.

An env's record subclasses `EpisodeState` (task, turn count, ended, last observation) and adds its
own fields. `next_turn` is the start of every such env's `step` (SQL-v0, Tools-v0, Code-v0,
SRE-v0). `TaskListEnv` gives them the task lookup (`task_ids`, `task`): a subclass calls
`self._index_tasks(tasks)` in `__init__` and keeps `self._state` up to date. `TaskStateEnv` adds
`snapshot`/`restore` for envs whose whole state is that record (SQL-v0, Tools-v0): the snapshot
token *is* the frozen record, so restoring is putting it back. Code-v0 (sandbox files) and SRE-v0
(a live container) have state outside the record and stay on `TaskListEnv`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from agentgym.core import AgentEnv


@dataclass(frozen=True)
class EpisodeState:
    """The fields every task env's episode record has (an env's record adds its own after them)."""

    task_id: str = ""  #: the episode's task ("" before the first reset)
    turn: int = 0  #: steps taken
    done: bool = False  #: the episode has ended
    observation: str = ""  #: the last observation


State = TypeVar("State", bound=EpisodeState)


def next_turn(state: State) -> tuple[State, dict[str, Any]]:
    """Start a step on a frozen episode state: (the state with its turn counted, the turn's `info`).

    A step before `reset` or after the episode ended is a caller's bug, not a model error: it raises.
    """
    if not state.task_id:
        raise RuntimeError("call reset() before step()")
    if state.done:
        raise RuntimeError("the episode has ended; call reset() to start a new one")
    state = replace(state, turn=state.turn + 1)
    return state, {"turn": state.turn}


class TaskListEnv(AgentEnv):
    """An `AgentEnv` over a fixed task list with its episode state in one frozen `_state` record."""

    _state: EpisodeState

    def _index_tasks(self, tasks: Sequence[Any]) -> None:
        """Index `tasks` (objects with an `id`) for `task_ids`, `choose_task` and `task`."""
        self._by_id = {t.id: t for t in tasks}
        self._task_ids = list(self._by_id)

    def task_ids(self) -> list[str]:
        return list(self._task_ids)

    @property
    def task(self) -> Any:
        """The task of the current episode."""
        if not self._state.task_id:
            raise RuntimeError("call reset() before using the task")
        return self._by_id[self._state.task_id]


class TaskStateEnv(TaskListEnv):
    """A `TaskListEnv` whose whole episode state is the record: it snapshots and restores it."""

    def snapshot(self) -> Any:
        """The frozen episode state itself (immutable, so it can be restored any number of times)."""
        if not self._state.task_id:
            raise RuntimeError("call reset() before snapshot()")
        return self._state

    def restore(self, token: Any) -> str:
        if token.task_id not in self._by_id:
            raise ValueError(f"snapshot of unknown task {token.task_id!r}")
        self._state = token
        self._last_observation = token.observation
        return token.observation
